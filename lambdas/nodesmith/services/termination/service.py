"""The termination use case: one round of one node's termination per delivery of its request.

A :class:`~nodesmith.core.termination.TerminationRequest` names a NodeClaim and its instance; everything
acted on is read again here (Karpenter's termination controller, ``karpenter-v1.md`` §3.7):

1. The NodeClaim must exist, be deleting (``deletionTimestamp``) and carry ``karpenter.sh/termination``; its
   ``status.providerID`` must name the request's instance. Otherwise nothing is done (``IGNORED`` with a
   reason): a stale or forged request cannot start a termination, only nudge one the cluster already asked for.
2. The instance, described now (once for the batch of rounds, :func:`describe`), must be ours
   (:func:`~nodesmith.core.interruption.not_ours`: the cluster tag ``owned`` and ``karpenter.sh/nodepool``), or
   already gone from EC2. One EC2 does not describe within 10 s of the NodeClaim's launch may just not be visible
   yet (eventual consistency; :func:`~nodesmith.services.provisioning.lifecycle.instance_grace_seconds`): the round
   is tried again once that time has passed (``DRAINING``), rather than finish without terminating an instance that
   runs.
3. Its node (the NodeClaim's ``status.nodeName``, else the instance's private DNS name; its providerID must
   match) is tainted ``karpenter.sh/disrupted:NoSchedule`` and cordoned, and one drain round runs
   (:func:`~.drain.drain_round`) against the deadline read from the NodeClaim
   (:func:`~nodesmith.core.termination.termination_deadline`).
   A node whose instance EC2 already reports shutting down or terminated is not drained: its pods are gone with
   it, and removing the node lets their controllers replace them at once (Karpenter removes the finalizer when
   the instance is gone).
4. Pods left and the deadline not reached: ``DRAINING``, with the seconds to wait before the next round
   (:func:`~nodesmith.core.termination.retry_after_seconds`: the first wait after a round that evicted or
   deleted a pod, growing with the deliveries while nothing moves, as a PodDisruptionBudget lets one replica
   go at a time); the request's
   :data:`~nodesmith.core.termination.REQUESTED_AT_ANNOTATION` is refreshed once per ``heartbeat_seconds``,
   with a ``FailedDraining`` Event naming what holds the node. Otherwise the instance is terminated and the
   Node and NodeClaim go (:func:`~.requests.finish_termination`): ``TERMINATED``.

A duplicate or a redelivered request finds the node already cordoned and partly drained and goes on.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from enum import StrEnum, unique
from typing import TYPE_CHECKING

from nodesmith.core.api.common import parse_duration
from nodesmith.core.interruption import not_ours
from nodesmith.core.model import INSTANCE_GONE_STATES, instance_id_of
from nodesmith.core.termination import (
    REQUESTED_AT_ANNOTATION,
    TERMINATION_FINALIZER,
    TERMINATION_REASON_ANNOTATION,
    retry_after_seconds,
    termination_deadline,
)
from nodesmith.core.timestamps import from_rfc3339, to_rfc3339
from nodesmith.services.provisioning.lifecycle import instance_grace_seconds
from nodesmith.services.termination import events
from nodesmith.services.termination.drain import DrainRound, cordon_node, drain_round, is_cordoned
from nodesmith.services.termination.requests import finish_termination

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from nodesmith.core.api.nodeclaim import NodeClaim
    from nodesmith.core.model import Node
    from nodesmith.core.ports import Cluster, Instance
    from nodesmith.core.termination import TerminationRequest
    from nodesmith.services.ports import Ports

__all__ = ["Status", "TerminationOutcome", "TerminationSettings", "describe", "retry_after_failure", "run_round"]

LOG = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TerminationSettings:
    """Tuning of the rounds (``Settings`` fields): evictions at once per round, the backoff between rounds
    (seconds: first wait, cap; Karpenter's eviction queue backs off to 10 s) and how often a draining node's
    request is refreshed (seconds)."""

    eviction_workers: int = 8
    retry_initial_seconds: float = 2.0
    retry_max_seconds: float = 10.0
    heartbeat_seconds: float = 60.0


@unique
class Status(StrEnum):
    """How a round ended: the node is gone, it is still draining, or the request was not acted on."""

    TERMINATED = "terminated"
    DRAINING = "draining"
    IGNORED = "ignored"


@dataclass(frozen=True, slots=True)
class TerminationOutcome:
    """One round's result. ``detail`` is the ignore reason code (``not_deleting``, ``not_owned``, ...) or what
    happened; ``reason`` the NodeClaim's termination reason; ``retry_after`` (DRAINING) the seconds before the
    next round; ``drain`` the round's evictions; ``missed_deadline`` True when pods were still on the node at
    its deadline; ``seconds_since_deletion`` how long the termination has taken (TERMINATED)."""

    status: Status
    detail: str = ""
    node: str | None = None
    nodepool: str | None = None
    capacity_type: str | None = None
    reason: str = ""
    drain: DrainRound | None = None
    retry_after: int | None = None
    instance_terminated: bool = False
    missed_deadline: bool = False
    seconds_since_deletion: float | None = None


def _ignored(why: str) -> TerminationOutcome:
    return TerminationOutcome(status=Status.IGNORED, detail=why)


def _check(claim: NodeClaim | None, request: TerminationRequest) -> str:
    """Why the cluster does not back ``request``, or ``""`` when it does."""
    if claim is None:
        return "nodeclaim_gone"
    if claim.metadata.deletion_timestamp is None:
        return "not_deleting"
    if TERMINATION_FINALIZER not in claim.metadata.finalizers:
        return "no_finalizer"
    if (instance_id_of(claim.status.provider_id) or "") != request.instance_id:
        return "instance_mismatch"
    return ""


def _grace(claim: NodeClaim) -> float | None:
    """``spec.terminationGracePeriod`` in seconds, or None when unset (the API validated its format)."""
    value = claim.spec.termination_grace_period
    return parse_duration(value) if value else None


def _node(cluster: Cluster, claim: NodeClaim, instance: Instance | None) -> Node | None:
    """The NodeClaim's node: by ``status.nodeName``, else by the instance's private DNS name (the name EKS gives
    it), else, for a NodeClaim whose registration is not recorded yet, among all nodes; its providerID must be
    the NodeClaim's. A running instance's node is never taken for absent without that search: terminating it
    would skip its drain."""
    for name in (claim.status.node_name, instance.private_dns_name if instance is not None else None):
        if name:
            node = cluster.get_node(name=name)
            if node is not None and node.provider_id == claim.status.provider_id:
                return node
    if claim.status.node_name or not claim.status.provider_id:
        return None  # registered under that name and gone since, or never launched
    return next((n for n in cluster.list_nodes() if n.provider_id == claim.status.provider_id), None)


def describe(ports: Ports, requests: Sequence[TerminationRequest]) -> dict[str, Instance] | None:
    """The instances ``requests`` name, in one ``DescribeInstances`` for a batch of rounds (Karpenter batches
    its DescribeInstances calls too: EC2 throttles them per account); ids EC2 does not know are left out.

    None when that call fails (logged): each round then describes its own instance, and a round that cannot
    fails alone and is delivered again after its backoff. Never raises."""
    ids = sorted({r.instance_id for r in requests if r.instance_id})
    if not ids:
        return {}
    try:
        return ports.cloud.get_instances(instance_ids=ids)
    except Exception as exc:  # the rounds describe one by one
        LOG.warning("DescribeInstances for the batch failed", extra={"error": str(exc), "instances": len(ids)})
        return None


def retry_after_failure(settings: TerminationSettings, *, attempt: int, now: float) -> int:
    """Seconds before a request whose round raised (an AWS or Kubernetes call that kept failing) is delivered
    again: the drain backoff for its ``attempt``-th delivery (1-based), not the queue's whole visibility timeout,
    as Karpenter requeues a failed reconcile with backoff."""
    return retry_after_seconds(
        attempt=attempt,
        now=now,
        next_due=None,
        initial_seconds=settings.retry_initial_seconds,
        max_seconds=settings.retry_max_seconds,
    )


def run_round(
    *,
    ports: Ports,
    settings: TerminationSettings,
    request: TerminationRequest,
    now: float,
    attempt: int,
    described: Mapping[str, Instance] | None = None,
) -> TerminationOutcome:
    """One round of ``request``'s termination at ``now`` (epoch seconds), its ``attempt``-th delivery (1-based).

    ``described`` is what :func:`describe` just read for the round's batch (its instance absent: gone from
    EC2); without it the instance is described here. See the module docstring. Raises
    :class:`~nodesmith.core.errors.KubernetesError` or the cloud provider's errors when a read or a write that
    must succeed fails (the request is delivered again).
    """
    cluster, cloud = ports.cluster, ports.cloud
    claim = cluster.get_nodeclaim(name=request.nodeclaim)
    why = _check(claim, request)
    if why or claim is None:
        return _ignored(why)
    instance = None
    if request.instance_id:
        instance = (
            described.get(request.instance_id)
            if described is not None
            else cloud.get_instance(instance_id=request.instance_id)
        )
    if instance is not None and (why := not_ours(instance.tags, ports.cluster_name)):
        return _ignored(why)
    unseen = instance_grace_seconds(claim, now) if request.instance_id and instance is None else 0.0
    if unseen > 0:  # launched moments ago: EC2 may not describe it yet, which says nothing of it being gone
        return TerminationOutcome(
            status=Status.DRAINING,
            nodepool=claim.nodepool_name,
            reason=claim.metadata.annotations.get(TERMINATION_REASON_ANNOTATION, "Deleted"),
            retry_after=max(1, math.ceil(unseen)),
            detail="instance not described yet",
        )
    gone = instance is None or instance.state in INSTANCE_GONE_STATES
    node = _node(cluster, claim, instance)
    deleted_at = from_rfc3339(claim.metadata.deletion_timestamp)
    deadline = termination_deadline(
        annotations=claim.metadata.annotations,
        deletion_timestamp=deleted_at,
        grace_period_seconds=_grace(claim),
    )
    base = TerminationOutcome(
        status=Status.DRAINING,
        node=node.name if node is not None else None,
        nodepool=claim.nodepool_name,
        capacity_type=instance.capacity_type if instance is not None else None,
        reason=claim.metadata.annotations.get(TERMINATION_REASON_ANNOTATION, "Deleted"),
    )
    drain = None
    if node is not None and not gone:
        if not is_cordoned(node):  # read just now: a redelivery finds it cordoned and writes nothing
            cordon_node(cluster=cluster, node_name=node.name)
        drain = drain_round(cluster=cluster, node=node, now=now, deadline=deadline, workers=settings.eviction_workers)
        if not drain.drained and (deadline is None or now < deadline):
            _heartbeat(cluster, claim, node, drain, now=now, every=settings.heartbeat_seconds)
            progressed = drain.evicted + drain.force_deleted > 0
            wait = retry_after_seconds(
                attempt=1 if progressed else attempt,  # a drain that moves is looked at again soon
                now=now,
                next_due=drain.next_due,
                initial_seconds=settings.retry_initial_seconds,
                max_seconds=settings.retry_max_seconds,
            )
            return replace(base, drain=drain, retry_after=wait, detail=f"{drain.remaining} pod(s) left")
    # an instance EC2 does not describe is terminated by id all the same (an unknown id is no error): one it
    # still does not show after the wait above must not run on without its NodeClaim (Karpenter's Delete calls
    # TerminateInstances whatever it last described)
    terminate = [request.instance_id] if request.instance_id and (instance is None or not gone) else []
    finish_termination(
        cluster=cluster,
        cloud=cloud,
        nodeclaim_name=claim.name,
        node_name=node.name if node is not None else None,
        terminate=terminate,
        nodeclaim_deleting=True,  # _check read its deletionTimestamp
    )
    return replace(
        base,
        status=Status.TERMINATED,
        detail="instance already gone" if gone else "drained" if drain is None or drain.drained else "deadline passed",
        drain=drain,
        instance_terminated=bool(terminate) and not gone,
        missed_deadline=drain is not None and not drain.drained,
        seconds_since_deletion=None if deleted_at is None else max(0.0, now - deleted_at),
    )


def _heartbeat(cluster: Cluster, claim: NodeClaim, node: Node, drain: DrainRound, *, now: float, every: float) -> None:
    """Refresh the request's time on the NodeClaim, and say on the node what holds it, once per ``every`` seconds."""
    last = from_rfc3339(claim.metadata.annotations.get(REQUESTED_AT_ANNOTATION))
    if last is not None and now - last < every:
        return
    cluster.annotate_nodeclaim(name=claim.name, annotations={REQUESTED_AT_ANNOTATION: to_rfc3339(now)})
    events.node_failed_to_drain(cluster, node.name, remaining=drain.remaining, blocked=drain.blocked_pods)
