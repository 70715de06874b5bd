"""NodeClaim lifecycle after launch: registration, initialization, liveness and garbage collection.

Karpenter runs these as separate controllers; a reconcile pass runs them in one go, before it
schedules, so the capacity it plans against is current:

* **registration** (``[core]:pkg/controllers/nodeclaim/lifecycle/registration.go``): the Node whose
  ``spec.providerID`` equals the NodeClaim's gets linked (``status.nodeName``, ``Registered=True``),
  labelled with the NodeClaim's labels and ``karpenter.sh/registered=true``, and given the
  ``karpenter.sh/termination`` finalizer, so a Node a user deletes is drained before it goes;
* **initialization** (``initialization.go``): Node ``Ready``, the NodeClaim's startup taints and the
  known ephemeral taints gone, requested extended resources registered -> ``Initialized=True`` and
  ``karpenter.sh/initialized=true`` on the Node;
* both transitions post an Event on the NodeClaim with the condition type as reason (``Registered``,
  ``Initialized``), as Karpenter's status-condition events do;
* **liveness** (``liveness.go``): not Launched within 5 minutes, or not Registered within 15
  minutes of the ``Registered`` condition's last transition (creation before launch) -> delete the
  NodeClaim and terminate its instance;
* **instance gone** (``[core]:pkg/controllers/nodeclaim/garbagecollection``): a launched NodeClaim
  whose instance no longer exists (or is shutting down / terminated) is deleted with its Node, and an
  instance EC2 does not describe at all is terminated by id anyway (as Karpenter's cloud provider ``Delete``
  does), in case it is one EC2 does not show yet;
* **orphans** (``[aws]:pkg/controllers/nodeclaim/garbagecollection/controller.go``): our instances
  that no NodeClaim claims, launched more than 30 seconds ago, are terminated.

The last two need every instance of ours (DescribeInstances of the whole fleet); Karpenter runs
them every :data:`GARBAGE_COLLECTION_INTERVAL_SECONDS`, and so does the reconcile function (a pass
given only some instances skips them, ``fleet_listed=False``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nodesmith.core.api.nodeclaim import CONDITION_INITIALIZED, CONDITION_LAUNCHED, CONDITION_REGISTERED
from nodesmith.core.errors import KubernetesError, LaunchError, TerminationError
from nodesmith.core.model import INSTANCE_GONE_STATES
from nodesmith.core.ports import CloudProvider, Cluster, Instance, ObjectRef
from nodesmith.core.requirements import LABEL_INITIALIZED, LABEL_REGISTERED
from nodesmith.core.resources import CPU, EPHEMERAL_STORAGE, MEMORY, PODS
from nodesmith.core.termination import TERMINATION_FINALIZER
from nodesmith.services.breakdown import (
    REASON_GARBAGE_COLLECTED,
    REASON_LAUNCH_TIMEOUT,
    REASON_REGISTRATION_TIMEOUT,
    PoolKey,
    Tally,
    pool_key,
)
from nodesmith.services.parallel import map_ordered
from nodesmith.services.provisioning.capacity import UNREGISTERED_TAINT_KEY, from_rfc3339, instance_id_of, to_rfc3339
from nodesmith.services.provisioning.nodeclaims import TAG_NODECLAIM
from nodesmith.services.termination.requests import finish_termination

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from nodesmith.core.api.nodeclaim import NodeClaim
    from nodesmith.core.model import Node
    from nodesmith.services.ports import Ports

__all__ = [
    "EPHEMERAL_TAINT_KEYS",
    "GARBAGE_COLLECTION_INTERVAL_SECONDS",
    "INSTANCE_GONE_GRACE_SECONDS",
    "LAUNCH_TTL_SECONDS",
    "ORPHAN_GRACE_SECONDS",
    "REGISTRATION_TTL_SECONDS",
    "GcLimits",
    "LifecycleOutcome",
    "collect_garbage",
    "instance_grace_seconds",
    "link_nodes",
    "nodeclaim_ref",
]

LAUNCH_TTL_SECONDS = 5 * 60.0
"""A NodeClaim not Launched this long after creation is deleted (``launchTTL``, liveness.go)."""

REGISTRATION_TTL_SECONDS = 15 * 60.0
"""A launched NodeClaim not Registered this long is deleted (``registrationTTL``, liveness.go)."""

ORPHAN_GRACE_SECONDS = 30.0
"""An instance with no NodeClaim younger than this is left alone (AWS garbagecollection controller)."""

GC_WORKERS = 8
"""NodeClaims garbage collection deletes at once (each deletion is a few API calls; after a burst of
interruptions there can be hundreds, as Karpenter's controllers work them in parallel too)."""

INSTANCE_GONE_GRACE_SECONDS = 10.0
"""A NodeClaim Launched less than this long ago is not checked for a vanished instance: EC2's
DescribeInstances is eventually consistent right after a launch (Karpenter's NodeClaim garbage
collection waits 10 s the same way, ``[core]:pkg/controllers/nodeclaim/garbagecollection``)."""


def instance_grace_seconds(nodeclaim: NodeClaim, now: float) -> float:
    """Seconds left of :data:`INSTANCE_GONE_GRACE_SECONDS` since ``nodeclaim``'s ``Launched`` transition (0 once
    they passed, or without a ``Launched=True`` transition time): while above 0, EC2 not describing its instance
    says nothing of the instance being gone (EC2 API reference, "Eventual consistency"). ``now``: epoch seconds."""
    launched = nodeclaim.condition(CONDITION_LAUNCHED)
    if launched is None or launched.status != "True":
        return 0.0
    launched_at = from_rfc3339(launched.last_transition_time)
    if launched_at is None:
        return 0.0
    return max(0.0, INSTANCE_GONE_GRACE_SECONDS - (now - launched_at))


GARBAGE_COLLECTION_INTERVAL_SECONDS = 120.0
"""How often the instance-gone check and the orphan sweep run, at most (seconds): both list every
instance of ours, and Karpenter's garbage collection controllers requeue every 2 minutes
(``[core]:pkg/controllers/nodeclaim/garbagecollection/controller.go``, ``RequeueAfter: time.Minute * 2``).
A burst of interruptions runs many provisioning passes a minute, and listing the fleet in each would spend
the account's EC2 API rate limits on a read only garbage collection needs."""

EPHEMERAL_TAINT_KEYS = frozenset(
    {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.cloudprovider.kubernetes.io/uninitialized",
        UNREGISTERED_TAINT_KEY,
    }
)
"""Taints that must be gone before a node is Initialized (Karpenter ``KnownEphemeralTaints``)."""

_BASE_RESOURCES = frozenset({CPU, MEMORY, PODS, EPHEMERAL_STORAGE})


@dataclass(slots=True)
class LifecycleOutcome:
    """What the lifecycle step did: counts, the NodeClaims and Nodes deleted (by name) and errors met.

    ``registered_by`` / ``initialized_by`` count by (NodePool, capacity type);
    ``terminated_by`` by (reason, NodePool, capacity type), reasons of :mod:`~nodesmith.services.breakdown`
    (``GarbageCollected``, ``LaunchTimeout``, ``RegistrationTimeout``).
    """

    registered: int = 0
    initialized: int = 0
    terminated: int = 0
    orphans_terminated: int = 0
    registered_by: Tally = field(default_factory=Counter)
    initialized_by: Tally = field(default_factory=Counter)
    terminated_by: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    deleted: set[str] = field(default_factory=set)
    deleted_nodes: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)


def nodeclaim_ref(nodeclaim: NodeClaim) -> ObjectRef:
    """Event target for a NodeClaim (cluster-scoped, ``karpenter.sh/v1``)."""
    return ObjectRef(
        kind="NodeClaim", name=nodeclaim.name, uid=nodeclaim.metadata.uid or "", api_version="karpenter.sh/v1"
    )


def _initialization_blocker(nodeclaim: NodeClaim, node: Node) -> str | None:
    """Why the Node is not initialized yet, or None (``initialization.go``)."""
    if not node.ready:
        return "node not ready"
    startup = {(t.key, t.effect) for t in nodeclaim.startup_taints_core()}
    for taint in node.taints:
        if (taint.key, taint.effect) in startup or taint.key in EPHEMERAL_TAINT_KEYS:
            return f"taint {taint.key}:{taint.effect} still present"
    for name in nodeclaim.requests_core():
        if name not in _BASE_RESOURCES and node.allocatable.get(name, 0) <= 0:
            return f"resource {name} not registered"
    return None


def link_nodes(
    *,
    cluster: Cluster,
    nodeclaims: Sequence[NodeClaim],
    nodes: Sequence[Node],
    now: float,
    outcome: LifecycleOutcome,
) -> list[NodeClaim]:
    """Register and initialize launched NodeClaims whose Node has appeared; returns the NodeClaims
    with their updated status (unchanged ones, e.g. all already Initialized, as the same objects). Status
    writes that fail are reported in ``outcome.errors`` and retried next pass.
    """
    by_provider = {n.provider_id: n for n in nodes if n.provider_id}
    stamp = to_rfc3339(now)
    out: list[NodeClaim] = []
    for nc in nodeclaims:
        node = by_provider.get(nc.status.provider_id or "")
        if (
            nc.metadata.deletion_timestamp
            or node is None
            or (nc.is_true(CONDITION_REGISTERED) and nc.is_true(CONDITION_INITIALIZED))
        ):
            out.append(nc)  # nothing to write: no deep copy (a pass over a large fleet would copy every NodeClaim)
            continue
        updated = nc.model_copy(deep=True)
        changed = False
        try:
            if not updated.is_true(CONDITION_REGISTERED):
                labels = dict(updated.metadata.labels)
                labels[LABEL_REGISTERED] = "true"
                cluster.label_node(node_name=node.name, labels=labels, finalizers=(TERMINATION_FINALIZER,))
                updated.status.node_name = node.name
                updated.set_condition(CONDITION_REGISTERED, "True", "Registered", "", stamp)
                changed = True
                outcome.registered += 1
                outcome.registered_by[pool_key(nodeclaim=updated, labels=node.labels)] += 1
                cluster.record_event(
                    ref=nodeclaim_ref(updated),
                    reason="Registered",
                    message=f"Status condition transitioned, Type: Registered, Status: True, node {node.name}",
                )
            if not updated.is_true(CONDITION_INITIALIZED):
                blocker = _initialization_blocker(updated, node)
                if blocker is None:
                    cluster.label_node(node_name=node.name, labels={LABEL_INITIALIZED: "true"})
                    updated.set_condition(CONDITION_INITIALIZED, "True", "Initialized", "", stamp)
                    outcome.initialized += 1
                    outcome.initialized_by[pool_key(nodeclaim=updated, labels=node.labels)] += 1
                    changed = True
                    cluster.record_event(
                        ref=nodeclaim_ref(updated),
                        reason="Initialized",
                        message=f"Status condition transitioned, Type: Initialized, Status: True, node {node.name}",
                    )
                else:
                    changed = (
                        updated.set_condition(CONDITION_INITIALIZED, "Unknown", "NotInitialized", blocker, stamp)
                        or changed
                    )
            if changed:
                updated = cluster.update_nodeclaim_status(nodeclaim=updated)
        except KubernetesError as exc:
            outcome.errors.append(f"link NodeClaim {nc.name} to node {node.name}: {exc}")
            out.append(nc)
            continue
        out.append(updated)
    return out


@dataclass(frozen=True, slots=True)
class _Deletion:
    """One NodeClaim garbage collection decided to delete, and how to report it."""

    nodeclaim: NodeClaim
    node_name: str | None
    instance_ids: tuple[str, ...]
    reason: str
    message: str
    cause: str
    key: PoolKey


def _delete_claim(cluster: Cluster, cloud: CloudProvider, d: _Deletion) -> str | None:
    """Terminate, delete the Node and the NodeClaim (nothing to drain: the node is gone or never registered;
    :func:`~nodesmith.services.termination.requests.finish_termination`), post ``d.reason``; None when done, else
    the error."""
    try:
        finish_termination(
            cluster=cluster, cloud=cloud, nodeclaim_name=d.nodeclaim.name, node_name=d.node_name,
            terminate=d.instance_ids,
        )  # fmt: skip
    except (KubernetesError, LaunchError) as exc:
        return f"delete NodeClaim {d.nodeclaim.name} ({d.reason}): {exc}"
    cluster.record_event(ref=nodeclaim_ref(d.nodeclaim), reason=d.reason, message=d.message, type_="Warning")
    return None


def _delete_all(
    cluster: Cluster, cloud: CloudProvider, deletions: list[_Deletion], workers: int, out: LifecycleOutcome
) -> None:
    """Run the deletions ``workers`` at a time and count them in ``out`` in their order (so the outcome does
    not depend on thread timing)."""
    errors = map_ordered(lambda d: _delete_claim(cluster, cloud, d), deletions, workers=workers, name="gc")
    for d, error in zip(deletions, errors, strict=True):
        if error is not None:
            out.errors.append(error)
            continue
        out.deleted.add(d.nodeclaim.name)
        if d.node_name:
            out.deleted_nodes.add(d.node_name)
        out.terminated += 1
        out.terminated_by[(d.cause, *d.key)] += 1


def _liveness_expired(nodeclaim: NodeClaim, *, now: float, launch_ttl: float, registration_ttl: float) -> str | None:
    """Why liveness deletes this NodeClaim now, or None (``liveness.go``)."""
    if nodeclaim.is_true(CONDITION_REGISTERED):
        return None
    created = from_rfc3339(nodeclaim.metadata.creation_timestamp)
    if not nodeclaim.is_true(CONDITION_LAUNCHED):
        if created is not None and now - created >= launch_ttl:
            return f"not launched within {launch_ttl:.0f}s of creation"
        return None
    registered = nodeclaim.condition(CONDITION_REGISTERED)
    since = from_rfc3339(registered.last_transition_time) if registered is not None else None
    since = since if since is not None else created
    if since is not None and now - since >= registration_ttl:
        return f"not registered within {registration_ttl:.0f}s of launch"
    return None


@dataclass(frozen=True, slots=True)
class GcLimits:
    """Garbage collection's clocks (seconds) and fan-out: Karpenter's launch and registration TTLs
    (``liveness.go``), the orphan grace (the AWS garbage collection controller), deletions at once."""

    launch_ttl_seconds: float = LAUNCH_TTL_SECONDS
    registration_ttl_seconds: float = REGISTRATION_TTL_SECONDS
    orphan_grace_seconds: float = ORPHAN_GRACE_SECONDS
    workers: int = GC_WORKERS


def collect_garbage(
    *,
    ports: Ports,
    nodeclaims: Sequence[NodeClaim],
    nodes: Sequence[Node],
    instances: Mapping[str, Instance],
    now: float,
    outcome: LifecycleOutcome,
    fleet_listed: bool = True,
    limits: GcLimits | None = None,
) -> None:
    """Delete NodeClaims whose instance is gone or whose liveness expired; terminate orphan instances.

    ``instances`` are our live instances by id (``cloud.list_instances()``, possibly begun passes before this one:
    :class:`~nodesmith.services.provisioning.fleet_listing.FleetListing`); the instances of settled NodeClaims
    missing there are confirmed together (``cloud.get_instances``: one DescribeInstances per 200 ids) before their
    NodeClaims are deleted, and so are the orphans (instances no NodeClaim claims) before they are terminated.
    The deletions (terminate, delete Node and NodeClaim, Event) run ``limits.workers`` at a time. NodeClaims
    already being deleted are the termination function's. Times in epoch seconds. Deleted NodeClaim names land
    in ``outcome.deleted``, failed deletions in ``outcome.errors``; a failure to describe the instances
    propagates (the pass is retried).

    ``fleet_listed=False``: ``instances`` holds only some of ours (those of in-flight NodeClaims, or none), so
    an instance missing there says nothing; only liveness runs, and the instance-gone check and the orphan
    sweep wait for a pass that listed the fleet (:data:`GARBAGE_COLLECTION_INTERVAL_SECONDS`).
    """
    limits = limits or GcLimits()
    cluster, cloud = ports.cluster, ports.cloud
    node_by_provider = {n.provider_id: n.name for n in nodes if n.provider_id}
    labels_by_node = {n.name: n.labels for n in nodes}

    def key_of(nc: NodeClaim, node_name: str | None, inst: Instance | None) -> PoolKey:
        kind = inst.capacity_type if inst is not None else None
        return pool_key(nodeclaim=nc, labels=labels_by_node.get(node_name or ""), capacity_type=kind)

    # (NodeClaim, its instance id, settled) for each NodeClaim not being deleted already
    live = [
        (nc, instance_id_of(nc.status.provider_id), instance_grace_seconds(nc, now) == 0.0)
        for nc in nodeclaims
        if not nc.metadata.deletion_timestamp
    ]
    unlisted = [iid for _, iid, done in live if fleet_listed and iid is not None and done and iid not in instances]
    # a terminated instance is no longer listed, but still described
    described = cloud.get_instances(instance_ids=unlisted) if unlisted else {}
    deletions: list[_Deletion] = []
    for nc, iid, done in live:
        node_name = nc.status.node_name or node_by_provider.get(nc.status.provider_id or "")
        inst = (instances.get(iid) or described.get(iid)) if iid is not None else None
        if fleet_listed and iid is not None and done and (inst is None or inst.state in INSTANCE_GONE_STATES):
            state = "gone" if inst is None else inst.state
            deletions.append(
                _Deletion(
                    nodeclaim=nc,
                    node_name=node_name,
                    # by id all the same when EC2 describes nothing (an unknown id is no error): an instance it does
                    # not show yet must not run on without its NodeClaim
                    instance_ids=(iid,) if inst is None else (),
                    reason="InstanceTerminated",
                    message=f"Instance {iid} is {state}; deleting NodeClaim",
                    cause=REASON_GARBAGE_COLLECTED,
                    key=key_of(nc, node_name, inst),
                )
            )
            continue
        why = _liveness_expired(
            nc, now=now, launch_ttl=limits.launch_ttl_seconds, registration_ttl=limits.registration_ttl_seconds
        )
        if why is not None:
            ids = [iid] if iid else [i.instance_id for i in instances.values() if i.tags.get(TAG_NODECLAIM) == nc.name]
            deletions.append(
                _Deletion(
                    nodeclaim=nc,
                    node_name=node_name,
                    instance_ids=tuple(ids),
                    reason="LivenessExpired",
                    message=f"NodeClaim {why}; deleting it and terminating its instance",
                    cause=REASON_REGISTRATION_TIMEOUT if nc.is_true(CONDITION_LAUNCHED) else REASON_LAUNCH_TIMEOUT,
                    key=key_of(nc, node_name, inst),
                )
            )
    _delete_all(cluster, cloud, deletions, limits.workers, outcome)
    if not fleet_listed:
        return
    claimed_ids = {instance_id_of(nc.status.provider_id) for nc in nodeclaims if nc.name not in outcome.deleted}
    claimed_names = {nc.name for nc in nodeclaims if nc.name not in outcome.deleted and not nc.status.provider_id}

    def orphan(i: Instance) -> bool:
        return (
            i.instance_id not in claimed_ids
            and i.tags.get(TAG_NODECLAIM) not in claimed_names
            and i.state not in INSTANCE_GONE_STATES
            and now - i.launch_time >= limits.orphan_grace_seconds
        )

    orphans = [i.instance_id for i in instances.values() if orphan(i)]
    if orphans:  # asked again by id: the listing may have begun passes ago, and only what EC2 says now is acted on
        again = cloud.get_instances(instance_ids=orphans)
        orphans = [iid for iid in orphans if (i := again.get(iid)) is not None and orphan(i)]
    if orphans:
        try:
            cloud.terminate(instance_ids=orphans)
            outcome.orphans_terminated += len(orphans)
        except TerminationError as exc:  # the others were terminated
            outcome.orphans_terminated += len(orphans) - len(exc.failed)
            outcome.errors.append(f"terminate orphan instances {sorted(exc.failed)}: {exc}")
        except LaunchError as exc:
            outcome.errors.append(f"terminate orphan instances {orphans}: {exc}")
