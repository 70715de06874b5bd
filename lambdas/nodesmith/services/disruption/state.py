"""Disruption state kept on the cluster itself, so the reconcile Lambda stays stateless.

Karpenter keeps its disruption queue and each node's ``lastPodEventTime`` in memory and in NodeClaim
status. Nodesmith's reconcile runs as short Lambda invocations, so everything a later pass needs is
written to the NodeClaims' ``status.conditions`` (the status subresource; no new API objects):

* ``nodesmith.io/PodSet`` (reason ``Observed``): a fingerprint of the node's non-DaemonSet pods.
  When it changes, ``status.lastPodEventTime`` is set to the pass time, which is what Karpenter's
  ``consolidateAfter`` quiet period counts from (``karpenter-v1.md`` §3.1).
* ``nodesmith.io/DisruptionCandidate``: a command found by one pass and waiting for its validation
  (Karpenter's 15 s ``commandValidationDelay``, §3.5); the message is JSON
  ``{"method", "nodes", "since"}``.
* ``DisruptionReason`` (Karpenter's condition, reason = the cause such as ``Empty`` or ``AMIDrift``):
  a validated command being carried out; the message is JSON ``{"method", "nodes", "replacements",
  "started", "cost_before", "cost_after"}`` and, for a node repair with a bounded drain, ``"drain_bound"``
  (seconds). Its nodes carry the ``karpenter.sh/disrupted`` taint.

This module builds the :class:`~nodesmith.core.disruption.ClusterNode` views the pure core decides
on (pods, NodeClaim, the AMI of the NodeClaim's ``status.imageID``, the instance's subnet and security groups,
``last_pod_event_time``) and reads and writes those conditions. Times are epoch seconds.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from nodesmith.core.api.nodeclaim import same_version
from nodesmith.core.disruption import ClusterNode
from nodesmith.core.errors import KubernetesError
from nodesmith.services.parallel import map_ordered
from nodesmith.services.provisioning.capacity import from_rfc3339, instance_id_of, same_objects, to_rfc3339

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from nodesmith.core.api.nodeclaim import NodeClaim
    from nodesmith.core.model import Node, Pod
    from nodesmith.core.ports import Cluster, InstanceFacts

    _Placed = tuple[Node, tuple[Pod, ...], str | None]  # a Node, the pods bound to it, its NodeClaim's name

__all__ = [
    "CONDITION_CANDIDATE",
    "CONDITION_DISRUPTING",
    "CONDITION_POD_SET",
    "OBSERVE_WORKERS",
    "CommandRecord",
    "cluster_nodes",
    "read_record",
    "write_condition",
]

CONDITION_POD_SET: Final = "nodesmith.io/PodSet"
CONDITION_CANDIDATE: Final = "nodesmith.io/DisruptionCandidate"
CONDITION_DISRUPTING: Final = "DisruptionReason"

OBSERVE_WORKERS = 16
"""NodeClaim status writes of :func:`cluster_nodes` in flight at a time (as many as a pass's launches)."""


@dataclass(frozen=True, slots=True)
class CommandRecord:
    """A disruption command as stored in a NodeClaim condition (see the module docstring).

    ``since`` is when the pass that found it ran (candidates) or when it started (in flight);
    ``replacements`` are NodeClaim names; costs are USD/hour; ``drain_bound`` (seconds) bounds the nodes'
    drain from their termination request (None: the NodeClaims' own ``terminationGracePeriod``).
    """

    method: str
    nodes: tuple[str, ...]
    since: float
    cause: str = ""
    replacements: tuple[str, ...] = ()
    cost_before: float = 0.0
    cost_after: float = 0.0
    drain_bound: float | None = None

    def message(self) -> str:
        """The JSON stored as the condition message."""
        bound = {} if self.drain_bound is None else {"drain_bound": self.drain_bound}
        return json.dumps(
            {
                **bound,
                "method": self.method,
                "nodes": list(self.nodes),
                "since": self.since,
                "replacements": list(self.replacements),
                "cost_before": round(self.cost_before, 6),
                "cost_after": round(self.cost_after, 6),
            },
            sort_keys=True,
            separators=(",", ":"),
        )


def read_record(nodeclaim: NodeClaim, condition: str) -> CommandRecord | None:
    """The command stored in ``condition`` of ``nodeclaim`` when it is True and well formed, else None."""
    cond = nodeclaim.condition(condition)
    if cond is None or cond.status != "True" or not cond.message:
        return None
    try:
        doc: Any = json.loads(cond.message)
        return CommandRecord(
            method=str(doc["method"]),
            nodes=tuple(str(n) for n in doc["nodes"]),
            since=float(doc["since"]),
            cause=cond.reason or "",
            replacements=tuple(str(n) for n in doc.get("replacements", ())),
            cost_before=float(doc.get("cost_before", 0.0)),
            cost_after=float(doc.get("cost_after", 0.0)),
            drain_bound=float(doc["drain_bound"]) if doc.get("drain_bound") is not None else None,
        )
    except (ValueError, KeyError, TypeError):
        return None


def write_condition(
    *,
    cluster: Cluster,
    nodeclaim: NodeClaim,
    condition: str,
    status: str,
    reason: str,
    message: str,
    now: float,
    last_pod_event_time: float | None = None,
) -> NodeClaim:
    """Set ``condition`` (and optionally ``status.lastPodEventTime``) and write the status.

    Returns the updated NodeClaim; when nothing changed no call is made. Raises
    :class:`~nodesmith.core.errors.KubernetesError` when the write fails (``ConflictError`` if the
    NodeClaim changed since it was read).
    """
    out = nodeclaim.model_copy(deep=True)
    changed = out.set_condition(condition, status, reason, message, to_rfc3339(now))  # type: ignore[arg-type]
    if last_pod_event_time is not None:
        stamp = to_rfc3339(last_pod_event_time)
        if out.status.last_pod_event_time != stamp:
            out.status.last_pod_event_time = stamp
            changed = True
    if not changed:
        return nodeclaim
    return cluster.update_nodeclaim_status(nodeclaim=out)


def _fingerprint(pods: Sequence[Pod]) -> str:
    ids = sorted(p.uid or p.key for p in pods if not p.is_daemonset and not p.is_mirror)
    return hashlib.sha256(",".join(ids).encode()).hexdigest()[:16]


class _ClaimIndex:
    """The NodeClaims by ``status.nodeName`` and by ``status.providerID``: a node's NodeClaim is the first (in
    list order) naming either, found without scanning every NodeClaim for every node."""

    def __init__(self, claims: Sequence[NodeClaim]) -> None:
        self.by_node: dict[str, tuple[int, str]] = {}
        self.by_provider: dict[str, tuple[int, str]] = {}
        for position, nc in enumerate(claims):
            if nc.status.node_name:
                self.by_node.setdefault(nc.status.node_name, (position, nc.name))
            if nc.status.provider_id:
                self.by_provider.setdefault(nc.status.provider_id, (position, nc.name))

    def name_for(self, node: Node) -> str | None:
        found = [hit for hit in (self.by_node.get(node.name), self.by_provider.get(node.provider_id or "")) if hit]
        return min(found)[1] if found else None


def cluster_nodes(
    *,
    cluster: Cluster,
    nodes: Sequence[Node],
    pods: Sequence[Pod],
    nodeclaims: Sequence[NodeClaim],
    facts: Mapping[str, InstanceFacts],
    now: float,
    errors: list[str],
    kept: dict[str, ClusterNode] | None = None,
) -> tuple[list[ClusterNode], dict[str, NodeClaim]]:
    """The :class:`ClusterNode` views of ``nodes`` and the NodeClaims by name (as updated here).

    Pods are grouped by ``spec.nodeName`` (terminal pods left out). ``image_id`` is the NodeClaim's
    ``status.imageID`` (Karpenter's AMI drift reads ``nodeClaim.Status.ImageID``), else the AMI of the instance
    behind the node; the instance's launch facts (``facts``, by instance id of the node's providerID) give
    ``subnet_id`` and ``security_group_ids`` (Karpenter's AWS provider reads them from the instance,
    ``[aws]:pkg/cloudprovider/drift.go``); None where unknown. The pod-set fingerprint of each node with a NodeClaim
    is compared with the stored ``nodesmith.io/PodSet`` condition: on a change ``lastPodEventTime`` becomes ``now``
    (first sight: the newest pod's creation time, or the ``lastPodEventTime`` already recorded when that is later,
    as Karpenter's is for a NodeClaim it launched; unset when there is neither, so the core falls back to the
    NodeClaim's initialization). Only the NodeClaims whose pod set changed are written, :data:`OBSERVE_WORKERS` at a
    time (a fleet seen for the first time writes one per NodeClaim; an unchanged one none). A failed status write is
    reported in ``errors`` and does not stop the pass.

    ``kept`` (node name -> view) is what a long-lived caller keeps between passes: a node whose Node and pods are
    the same objects as its kept view's, whose NodeClaim is the same (object, or uid and ``resourceVersion``) and
    whose other fields are equal gets the kept view object back, so per-view results kept with it
    (:class:`~nodesmith.core.disruption.memo.NodeMemo`) are reused; ``kept`` is left holding this pass's views. A
    kept view whose Node and pods are the very objects read now and whose NodeClaim is the same version is handed
    back without fingerprinting its pods again: the stored fingerprint was found equal, or written, when that
    NodeClaim version was read.
    """
    by_node: dict[str, list[Pod]] = {}
    for pod in pods:
        if pod.node_name and not pod.is_terminal:
            by_node.setdefault(pod.node_name, []).append(pod)
    claims = {nc.name: nc for nc in nodeclaims}
    index = _ClaimIndex(list(claims.values()))
    placed = [(node, tuple(by_node.get(node.name, ())), index.name_for(node)) for node in nodes]
    unchanged = _unchanged_views(placed, claims=claims, facts=facts, kept=kept or {})
    last_events, unwritten = _observe_pod_sets(
        cluster=cluster, placed=placed, claims=claims, unchanged=unchanged, now=now, errors=errors
    )
    out: list[ClusterNode] = []
    keep: list[ClusterNode] = []
    for node, on_node, name in placed:
        if (same := unchanged.get(node.name)) is not None and same_version(same.nodeclaim, claims.get(name or "")):
            out.append(same)
            keep.append(same)
            continue
        owner = claims[name] if name is not None else None
        image, subnet, groups = _launch_fields(owner, facts.get(instance_id_of(node.provider_id) or ""))
        view = ClusterNode(
            node=node,
            pods=on_node,
            nodeclaim=owner,
            last_pod_event_time=last_events.get(name) if name is not None else None,
            image_id=image,
            subnet_id=subnet,
            security_group_ids=groups,
        )
        before = kept.get(node.name) if kept is not None else None
        out.append(before if before is not None and _same_view(before, view) else view)
        if name in unwritten:
            continue
        keep.append(out[-1])
    if kept is not None:
        kept.clear()
        kept.update((v.name, v) for v in keep)
    return out, claims


def _unchanged_views(
    placed: Sequence[_Placed],
    *,
    claims: Mapping[str, NodeClaim],
    facts: Mapping[str, InstanceFacts],
    kept: Mapping[str, ClusterNode],
) -> dict[str, ClusterNode]:
    """Node name -> kept view whose Node and pods are the objects read now, whose NodeClaim is the same version
    (:func:`~nodesmith.core.api.nodeclaim.same_version`) and whose launch facts are equal."""
    unchanged: dict[str, ClusterNode] = {}
    for node, on_node, name in placed:
        before = kept.get(node.name)
        owner = claims[name] if name is not None else None
        if (
            before is not None
            and before.node is node
            and same_version(before.nodeclaim, owner)
            and same_objects(before.pods, on_node)
            and _launch_fields(owner, facts.get(instance_id_of(node.provider_id) or "")) == _kept_launch_fields(before)
        ):
            unchanged[node.name] = before
    return unchanged


def _observe_pod_sets(
    *,
    cluster: Cluster,
    placed: Sequence[_Placed],
    claims: dict[str, NodeClaim],
    unchanged: Mapping[str, ClusterNode],
    now: float,
    errors: list[str],
) -> tuple[dict[str, float | None], set[str]]:
    """Each NodeClaim's pod-event time, with the pod sets that changed written (``claims`` updated with what was
    written), and the names of the NodeClaims whose write failed (reported in ``errors``)."""
    observed: dict[str, tuple[str, tuple[Pod, ...]]] = {}  # a NodeClaim is observed once, with its first node's pods
    for node, on_node, name in placed:
        if name is not None:
            observed.setdefault(name, (node.name, on_node))
    last_events: dict[str, float | None] = {}
    writes: list[tuple[str, tuple[Pod, ...], str]] = []
    for name, (node_name, on_node) in observed.items():
        if (same := unchanged.get(node_name)) is not None:  # the same pods and NodeClaim: the same fingerprint
            last_events[name] = same.last_pod_event_time
            continue
        fingerprint = _fingerprint(on_node)
        stored = claims[name].condition(CONDITION_POD_SET)
        if stored is not None and stored.message == fingerprint:
            last_events[name] = from_rfc3339(claims[name].status.last_pod_event_time)
        else:
            writes.append((name, on_node, fingerprint))

    def observe(item: tuple[str, tuple[Pod, ...], str]) -> tuple[NodeClaim, float | None, list[str]]:
        problems: list[str] = []
        name, on_node, fingerprint = item
        claim, last = _record_pods(
            cluster=cluster, claim=claims[name], pods=on_node, fingerprint=fingerprint, now=now, errors=problems
        )
        return claim, last, problems

    unwritten: set[str] = set()
    for claim, last, problems in map_ordered(observe, writes, workers=OBSERVE_WORKERS, name="podset"):
        claims[claim.name], last_events[claim.name] = claim, last
        errors.extend(problems)
        if problems:
            unwritten.add(claim.name)
    return last_events, unwritten


_LaunchFields = tuple[str | None, str | None, frozenset[str] | None]


def _launch_fields(claim: NodeClaim | None, inst: InstanceFacts | None) -> _LaunchFields:
    """A node view's ``image_id``, ``subnet_id`` and ``security_group_ids`` from its NodeClaim and instance."""
    image = (claim.status.image_id if claim is not None else None) or (inst.image_id if inst is not None else "")
    subnet = (inst.subnet_id or None) if inst is not None else None
    groups = frozenset(inst.security_group_ids) if inst is not None and inst.security_group_ids else None
    return image or None, subnet, groups


def _kept_launch_fields(view: ClusterNode) -> _LaunchFields:
    return view.image_id, view.subnet_id, view.security_group_ids


def _same_view(before: ClusterNode, now: ClusterNode) -> bool:
    """True when ``now`` says what ``before`` said: the same Node and pod objects (frozen), the same NodeClaim
    version, equal launch facts and pod-event time."""
    return (
        before.node is now.node
        and same_objects(before.pods, now.pods)
        and same_version(before.nodeclaim, now.nodeclaim)
        and before.last_pod_event_time == now.last_pod_event_time
        and _kept_launch_fields(before) == _kept_launch_fields(now)
    )


def _record_pods(
    *, cluster: Cluster, claim: NodeClaim, pods: Sequence[Pod], fingerprint: str, now: float, errors: list[str]
) -> tuple[NodeClaim, float | None]:
    """Write ``fingerprint`` (which differs from the stored ``nodesmith.io/PodSet``) and the new
    ``lastPodEventTime`` on ``claim``; returns the claim as written and that time."""
    stored = claim.condition(CONDITION_POD_SET)
    last = from_rfc3339(claim.status.last_pod_event_time)
    if stored is None:  # first sight: a time already recorded (by Karpenter, before Nodesmith) is never moved back
        times = [p.creation_timestamp for p in pods if not p.is_daemonset and p.creation_timestamp > 0]
        if last is not None:
            times.append(last)
        new_last = max(times, default=None)
    else:
        new_last = now
    try:
        claim = write_condition(
            cluster=cluster,
            nodeclaim=claim,
            condition=CONDITION_POD_SET,
            status="True",
            reason="Observed",
            message=fingerprint,
            now=now,
            last_pod_event_time=new_last,
        )
    except KubernetesError as exc:
        errors.append(f"record pods of NodeClaim {claim.name}: {exc}")
    return claim, new_last
