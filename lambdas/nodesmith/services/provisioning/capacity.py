"""The reconcile pass's view of the cluster: pending pods, existing and in-flight capacity, usage, cost.

Karpenter builds this from its in-memory cluster state (``[core]:pkg/controllers/state/cluster.go``); every pass
here reads the objects once (from the API, or from watch mode's informer caches) and derives:

* **pending pods** — ``is_provisionable`` (``[core]:pkg/utils/pod/scheduling.go``: marked
  ``PodScheduled=False, reason=Unschedulable``, no ``nodeName``, no ``nominatedNodeName``, not a
  DaemonSet or mirror pod) and not terminating;
* **existing capacity** — registered Nodes with the pods bound to them, plus NodeClaims that are
  launched (or being launched) but not registered yet. Karpenter models those in-flight NodeClaims
  as state nodes (``existingnode.go``) so pods that are pending for them fit there and trigger no
  second launch;
* **NodePool usage** for ``limits`` — summed NodeClaim capacity (``nodes`` counts NodeClaims),
  as ``cluster.NodePoolResourcesFor`` does;
* **cost** — the hourly price of every launched NodeClaim's offering (``karpenter_nodepools_cost_total``).
* **volume topology** — the zone (or other node) requirements pods' PersistentVolumeClaims impose,
  and the pending pods Karpenter would not provision for because of their claims
  (:func:`volume_topology`, ``volumetopology.go``).

Everything here is pure: the caller passes the listed objects and the catalogue. A long-lived caller (a warm
container) may keep a :class:`KeptCapacity` between passes, so nodes that did not change cost nothing again.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from nodesmith.core.api.nodeclaim import same_version
from nodesmith.core.model import NodeSelectorRequirement, instance_id_of
from nodesmith.core.requirements import (
    LABEL_CAPACITY_TYPE,
    LABEL_HOSTNAME,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    LABEL_ZONE,
)
from nodesmith.core.resources import Resources, parse_resource_list
from nodesmith.core.scheduling.existing import ExistingBases
from nodesmith.core.scheduling.pods import is_provisionable
from nodesmith.core.scheduling.types import ExistingNode
from nodesmith.core.timestamps import from_rfc3339, to_rfc3339

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping, Sequence

    from nodesmith.core.api.nodeclaim import NodeClaim
    from nodesmith.core.model import InstanceType, Node, Pod, Taint
    from nodesmith.core.ports import Instance
    from nodesmith.core.scheduling.volumes import VolumeContext

__all__ = [
    "DISRUPTED_TAINT_KEY",
    "UNREGISTERED_TAINT_KEY",
    "KeptCapacity",
    "disruption_volume_topology",
    "existing_capacity",
    "from_rfc3339",
    "inflight_node",
    "instance_id_of",
    "leaving_node_names",
    "nodepool_usage",
    "offering_price",
    "pending_pods",
    "reschedulable_pods",
    "same_objects",
    "to_rfc3339",
    "volume_topology",
]

DISRUPTED_TAINT_KEY = "karpenter.sh/disrupted"
"""Taint put on nodes being disrupted/drained (``[core]:pkg/apis/v1/taints.go``)."""

UNREGISTERED_TAINT_KEY = "karpenter.sh/unregistered"
"""Taint a Karpenter node carries from launch until registration (``NoExecute``)."""


def pending_pods(pods: Sequence[Pod]) -> list[Pod]:
    """Pods Nodesmith provisions for: provisionable (Karpenter's rule) and not terminating or finished."""
    return [p for p in pods if is_provisionable(p) and p.deletion_timestamp is None and not p.is_terminal]


def leaving_node_names(
    nodes: Sequence[Node], *, deleted: Collection[str] = (), nodeclaims: Sequence[NodeClaim] = ()
) -> set[str]:
    """Nodes going away: deleted in this pass, marked for deletion, tainted ``karpenter.sh/disrupted``, or
    registered to a NodeClaim being deleted (a termination requested, its drain not begun yet)."""
    terminating = {nc.status.node_name for nc in nodeclaims if nc.metadata.deletion_timestamp and nc.status.node_name}
    return {
        n.name
        for n in nodes
        if n.name in deleted
        or n.name in terminating
        or n.deletion_timestamp is not None
        or any(t.key == DISRUPTED_TAINT_KEY for t in n.taints)
    }


_PENDING_COPIES: dict[int, tuple[Pod, Pod]] = {}
"""The last call's pending copies by ``id`` of the pod they copy (kept alive beside them, so an id is not reused)."""


def reschedulable_pods(pods: Sequence[Pod], *, leaving: Collection[str]) -> list[Pod]:
    """Pods on nodes that are going away, as pending pods to provision for ahead of their eviction.

    Karpenter adds these to every provisioning pass (``provisioner.go GetPendingPods`` with
    ``IsReschedulable``): not terminal, not DaemonSet or mirror pods, and not terminating unless
    owned by a StatefulSet (whose replacement keeps the name). Returned unbound and Unschedulable.

    A pod object passed again (the Kubernetes adapter reuses a pod's parse while its ``resourceVersion``
    stands) gets the same copy as in the call before, so successive passes over many cordoned nodes do not copy
    every pod again. Only the last call's copies are kept.
    """
    global _PENDING_COPIES  # noqa: PLW0603 - replaced whole each call: only the pods still listed stay
    before = _PENDING_COPIES
    copies: dict[int, tuple[Pod, Pod]] = {}
    out: list[Pod] = []
    for pod in pods:
        if not pod.node_name or pod.node_name not in leaving:
            continue
        if pod.is_terminal or pod.is_daemonset or pod.is_mirror or pod.owner_kind == "Node":
            continue
        if pod.deletion_timestamp is not None and pod.owner_kind != "StatefulSet":
            continue
        hit = before.get(id(pod))
        pending = hit[1] if hit is not None and hit[0] is pod else _pending(pod)
        copies[id(pod)] = (pod, pending)
        out.append(pending)
    _PENDING_COPIES = copies
    return out


def _pending(pod: Pod) -> Pod:
    return replace(pod, node_name=None, nominated_node_name=None, unschedulable=True)


def offering_price(
    catalogue: Mapping[str, InstanceType], *, instance_type: str, zone: str, capacity_type: str
) -> float:
    """Hourly price (USD) of ``(instance_type, zone, capacity_type)``; falls back to the type's
    cheapest offering of that capacity type, then 0.0 when the type is unknown."""
    it = catalogue.get(instance_type)
    if it is None:
        return 0.0
    same_type = [o for o in it.offerings if o.capacity_type == capacity_type]
    for o in same_type:
        if o.zone == zone:
            return o.price
    return min((o.price for o in same_type), default=0.0)


def _instance_labels(
    catalogue: Mapping[str, InstanceType], *, instance_type: str, zone: str, capacity_type: str
) -> dict[str, str]:
    labels: dict[str, str] = {}
    it = catalogue.get(instance_type)
    if it is not None:
        labels.update(it.labels)
    labels[LABEL_INSTANCE_TYPE] = instance_type
    if zone:
        labels[LABEL_ZONE] = zone
    if capacity_type:
        labels[LABEL_CAPACITY_TYPE] = capacity_type
    return labels


def inflight_node(
    nodeclaim: NodeClaim,
    *,
    catalogue: Mapping[str, InstanceType],
    instance: Instance | None,
) -> ExistingNode:
    """An in-flight NodeClaim (launched or launching, no Node yet) as scheduler capacity.

    Labels: the NodeClaim's labels, the launched instance's well-known labels (type, zone,
    capacity type, from ``instance`` and the catalogue) and ``kubernetes.io/hostname`` = the
    NodeClaim name (Karpenter uses the NodeClaim name as the hostname placeholder before
    registration). Allocatable is ``status.allocatable`` (filled at launch from the catalogue);
    before launch it is the NodeClaim's ``resources.requests`` so its planned pods still count.
    Startup taints are ignored until initialized (``initialized=False``).
    """
    labels = dict(nodeclaim.metadata.labels)
    if instance is not None:
        labels.update(
            _instance_labels(
                catalogue,
                instance_type=instance.instance_type,
                zone=instance.zone,
                capacity_type=instance.capacity_type,
            )
        )
    labels.setdefault(LABEL_HOSTNAME, nodeclaim.name)
    allocatable = nodeclaim.allocatable_core() or nodeclaim.requests_core()
    price = _price(instance, catalogue)
    return ExistingNode(
        name=nodeclaim.name,
        labels=labels,
        taints=nodeclaim.taints_core(),
        allocatable=allocatable,
        pods=(),
        nodepool=nodeclaim.nodepool_name,
        initialized=False,
        startup_taints=nodeclaim.startup_taints_core(),
        price=price,
    )


def _price(instance: Instance | None, catalogue: Mapping[str, InstanceType]) -> float:
    if instance is None:
        return 0.0
    return offering_price(
        catalogue, instance_type=instance.instance_type, zone=instance.zone, capacity_type=instance.capacity_type
    )


def _registered_node(
    node: Node, *, nodeclaim: NodeClaim | None, pods: Sequence[Pod], price: float
) -> ExistingNode | None:
    """A registered Node as capacity, or None when it takes no new pods (cordoned, deleting, disrupted)."""
    if node.unschedulable or node.deletion_timestamp is not None:
        return None
    if any(t.key == DISRUPTED_TAINT_KEY for t in node.taints):
        return None
    initialized = True
    startup: tuple[Taint, ...] = ()
    if nodeclaim is not None and not nodeclaim.is_true("Initialized"):
        initialized = False
        startup = nodeclaim.startup_taints_core()
    return ExistingNode(
        name=node.name,
        labels=dict(node.labels),
        taints=node.taints,
        allocatable=dict(node.allocatable),
        pods=tuple(pods),
        nodepool=node.labels.get(LABEL_NODEPOOL),
        initialized=initialized,
        unschedulable=node.unschedulable,
        startup_taints=startup,
        price=price,
    )


_Made = tuple["Node", "NodeClaim | None", "Sequence[Pod]", float, "ExistingNode | None"]


def same_objects(before: Sequence[object], now: Sequence[object]) -> bool:
    """Whether ``before`` and ``now`` hold the very same objects in the same order (identity, not equality: the
    watch cache hands out a new object for every change, so an identical one is unchanged)."""
    return len(before) == len(now) and all(a is b for a, b in zip(before, now, strict=True))


@dataclass
class KeptCapacity:
    """What a long-lived caller (a warm container) keeps of the existing capacity between passes, so a pass costs
    what changed: per registered node, the :class:`ExistingNode` made from it (``nodes``: name -> the Node,
    NodeClaim, bound pods and price it was made from, and the result), and the scheduler's
    :class:`~nodesmith.core.scheduling.existing.ExistingBases` over those nodes (``bases``). A node whose Node and
    bound pods are the same objects as last pass (parsed once per ``resourceVersion``), whose NodeClaim is the
    same version and whose price is equal gets the same :class:`ExistingNode` back, and with it its base.
    Karpenter keeps its cluster state between provisioning passes the same way
    (``[core]:pkg/controllers/state/cluster.go``)."""

    nodes: dict[str, _Made] = field(default_factory=dict)
    bases: ExistingBases = field(default_factory=ExistingBases)

    def made(
        self, node: Node, *, nodeclaim: NodeClaim | None, pods: Sequence[Pod], price: float
    ) -> ExistingNode | None:
        """The kept result for ``node`` when made from the same Node and pods (objects), the same version of its
        NodeClaim (:func:`~nodesmith.core.api.nodeclaim.same_version`) and an equal price, else
        :func:`_registered_node`'s (then kept)."""
        held = self.nodes.get(node.name)
        if (
            held is not None
            and held[0] is node
            and same_version(held[1], nodeclaim)
            and held[3] == price
            and same_objects(held[2], pods)
        ):
            return held[4]
        made = _registered_node(node, nodeclaim=nodeclaim, pods=pods, price=price)
        self.nodes[node.name] = (node, nodeclaim, pods, price, made)
        return made

    def retain(self, names: Collection[str], made: Sequence[ExistingNode]) -> None:
        """Forget the nodes not in ``names`` and every base but those of ``made`` (this pass's capacity)."""
        self.nodes = {k: v for k, v in self.nodes.items() if k in names}
        self.bases.retain(made)


def existing_capacity(
    *,
    nodes: Sequence[Node],
    pods: Sequence[Pod],
    nodeclaims: Sequence[NodeClaim],
    instances: Mapping[str, Instance],
    catalogue: Mapping[str, InstanceType],
    kept: KeptCapacity | None = None,
) -> list[ExistingNode]:
    """Registered nodes and in-flight NodeClaims as :class:`ExistingNode` capacity.

    Nodes that are cordoned, deleting, or carry the ``karpenter.sh/disrupted`` taint are left out
    (they are going away; their pods get rescheduled). A node backed by a NodeClaim that is not
    ``Initialized`` yet keeps ``initialized=False`` with that NodeClaim's startup taints. Bound pods
    that are terminal (``Succeeded``, ``Failed``) do not count; terminating ones do until they are gone, as in
    Karpenter's cluster state (``UpdatePod`` releases a pod's requests only once it is terminal or deleted) and in
    kube-scheduler, which binds nothing into their room before then. NodeClaims that are deleting are left out; the
    others whose Node is not registered yet become in-flight capacity (:func:`inflight_node`).
    ``instances`` maps instance id to the instance listed by the cloud provider. ``kept`` (a long-lived caller's)
    gives back the :class:`ExistingNode` of each registered node unchanged since the last pass and is left holding
    this pass's.
    """
    by_node: dict[str, list[Pod]] = {}
    for pod in pods:
        if pod.node_name and not pod.is_terminal:
            by_node.setdefault(pod.node_name, []).append(pod)
    claim_by_provider = {nc.status.provider_id: nc for nc in nodeclaims if nc.status.provider_id}
    out: list[ExistingNode] = []
    registered: set[str] = set()
    for node in nodes:
        claim = claim_by_provider.get(node.provider_id) if node.provider_id else None
        if claim is not None:
            registered.add(claim.name)
        price = _price(instances.get(node.instance_id or ""), catalogue)
        on_node = by_node.get(node.name, ())
        entry = (
            _registered_node(node, nodeclaim=claim, pods=on_node, price=price)
            if kept is None
            else kept.made(node, nodeclaim=claim, pods=on_node, price=price)
        )
        if entry is not None:
            out.append(entry)
    for nc in nodeclaims:
        if nc.name in registered or nc.metadata.deletion_timestamp or nc.status.node_name:
            continue  # registered, deleting, or registered with its Node gone (cleanup decides)
        instance = instances.get(instance_id_of(nc.status.provider_id) or "")
        out.append(inflight_node(nc, catalogue=catalogue, instance=instance))
    if kept is not None:
        kept.retain({n.name for n in nodes}, out)
    return out


def nodepool_usage(
    nodeclaims: Sequence[NodeClaim],
) -> dict[str, Resources]:
    """Resources each NodePool already holds, for ``spec.limits``: summed ``status.capacity`` of its
    NodeClaims (``resources.requests`` before launch), plus ``nodes`` = NodeClaim count.

    Deleting NodeClaims still count (their capacity exists until the instance is gone), as
    Karpenter's ``NodePoolResourcesFor`` does. cpu in millicores, memory in bytes.
    """
    usage: dict[str, Resources] = {}
    for nc in nodeclaims:
        pool = nc.nodepool_name
        if not pool:
            continue
        held = parse_resource_list(nc.status.capacity) if nc.status.capacity else nc.requests_core()
        acc = usage.setdefault(pool, {})
        for name, amount in held.items():
            if name == "nodes":
                continue
            acc[name] = acc.get(name, 0) + amount
        acc["nodes"] = acc.get("nodes", 0) + 1
    return usage


def volume_topology(
    *, pending: Sequence[Pod], moving: Sequence[Pod], context: VolumeContext
) -> tuple[dict[str, tuple[NodeSelectorRequirement, ...]], dict[str, str]]:
    """``(requirements, refused)`` for the pods' PersistentVolumeClaims against the cluster's storage objects.

    ``requirements`` maps a pod key (``namespace/name``) to the node requirements its claims impose:
    a bound claim's PersistentVolume node affinity (its first term, hostname dropped for local
    volumes), an unbound claim's StorageClass ``allowedTopologies`` (first term)
    (:func:`~nodesmith.core.scheduling.volumes.volume_requirements`). ``refused`` maps a *pending*
    pod key to why Karpenter would not provision for it (``ValidatePersistentVolumeClaims``: claim,
    volume or class missing; unbound claim without a class or with an ``Immediate`` class): such
    pods are left out of the pass. Pods of nodes going away (``moving``) are never refused, and their
    generic ephemeral volumes impose nothing (a replacement pod gets new claims).
    """
    requirements: dict[str, tuple[NodeSelectorRequirement, ...]] = {}
    refused: dict[str, str] = {}
    for pods, validate in ((pending, True), (moving, False)):
        for pod in pods:
            if not pod.pvc_names:
                continue
            reqs, notes = context.requirements(pod, rescheduled=not validate)
            if validate and notes:
                refused[pod.key] = "; ".join(notes)
                continue
            if reqs:
                requirements[pod.key] = reqs
    return requirements, refused


def disruption_volume_topology(
    *, pods: Sequence[Pod], nodes: Sequence[Node], context: VolumeContext | None
) -> dict[str, tuple[NodeSelectorRequirement, ...]]:
    """Node requirements of every pod's PersistentVolumeClaims, for a disruption simulation.

    A pod bound to a node would move if the node went away: its claims pin it like a rescheduled
    pod's (generic ephemeral volumes skipped); pending pods' claims pin them as in provisioning.
    What Karpenter would refuse is not reported here (the pod is already running, or provisioning
    reports it). ``context`` None means the storage objects could not be read: a bound pod with
    claims is then pinned to its node's zone (where a zonal volume must be), a pending pod to nothing.
    """
    zone_of = {n.name: n.labels.get(LABEL_ZONE, "") for n in nodes}
    out: dict[str, tuple[NodeSelectorRequirement, ...]] = {}
    for pod in pods:
        if not pod.pvc_names or pod.is_terminal:
            continue
        bound = bool(pod.node_name)
        if context is None:
            zone = zone_of.get(pod.node_name or "", "")
            if bound and zone:
                out[pod.key] = (NodeSelectorRequirement(key=LABEL_ZONE, operator="In", values=(zone,)),)
            continue
        reqs, _ = context.requirements(pod, rescheduled=bound)
        if reqs:
            out[pod.key] = reqs
    return out
