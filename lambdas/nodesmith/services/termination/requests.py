"""Starting and finishing a termination: the two ends every caller shares.

:func:`request_termination` is how anyone asks for a node to go (the interruption function, a disruption
pass, the reconcile pass for a NodeClaim or Node a user deleted): annotate the NodeClaim
(:func:`~nodesmith.core.termination.request_annotations`: reason, deadline, when requested), DELETE it
(its finalizer ``karpenter.sh/termination`` keeps it, now deleting), and hand back the
:class:`~nodesmith.core.termination.TerminationRequest` for the caller to send to the termination queue,
where the termination function drains and terminates it (:mod:`.service`). :func:`sweep_deletions` is the
reconcile pass's part: deletions nobody requested (a user's ``kubectl delete``) and requests that went missing.

:func:`finish_termination` is the last step, in Karpenter's order (``[core]:pkg/controllers/node/termination``,
``[core]:pkg/controllers/nodeclaim/termination``): terminate the instance, delete the Node and remove its
finalizer, remove the NodeClaim's finalizer last, so a crash part-way leaves a NodeClaim that is still
deleting and the next attempt goes on from where this one stopped. The termination function calls it
when a node is drained; NodeClaim garbage collection when the instance is already gone or never
registered a node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nodesmith.core.drain import carries_disrupted_taint
from nodesmith.core.errors import KubernetesError
from nodesmith.core.termination import (
    REQUESTED_AT_ANNOTATION,
    TERMINATION_FINALIZER,
    TERMINATION_REASON_ANNOTATION,
    TerminationRequest,
    request_annotations,
)
from nodesmith.core.timestamps import from_rfc3339

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nodesmith.core.api.nodeclaim import NodeClaim
    from nodesmith.core.model import Node
    from nodesmith.core.ports import CloudProvider, Cluster, TerminationQueue

__all__ = ["REASON_DELETED", "Sweep", "finish_termination", "request_termination", "sweep_deletions"]

REASON_DELETED = "Deleted"
"""The termination reason of a NodeClaim or Node someone deleted (``kubectl delete``)."""


def request_termination(
    *,
    cluster: Cluster,
    nodeclaim: NodeClaim,
    reason: str,
    now: float,
    deadline: float | None = None,
    guarded: bool = False,
) -> TerminationRequest:
    """Annotate ``nodeclaim`` (``reason``, a Karpenter reason; ``deadline``, epoch seconds, kept when earlier
    than one it has; ``now`` as the request time) and DELETE it; returns the request to send.

    Idempotent: a NodeClaim already deleting keeps its first reason and its earliest deadline. ``guarded``
    makes the annotation conditional on ``nodeclaim``'s ``resourceVersion``, so of two callers that read the
    same NodeClaim exactly one writes it. Raises :class:`~nodesmith.core.errors.KubernetesError`
    (``NotFoundError`` when the NodeClaim is gone, ``ConflictError`` when guarded and it changed) before the
    delete when the annotation cannot be written, so nothing is deleted without it.
    """
    annotations = request_annotations(
        reason=reason, now=now, deadline=deadline, current=dict(nodeclaim.metadata.annotations)
    )
    version = nodeclaim.metadata.resource_version if guarded else None
    cluster.annotate_nodeclaim(name=nodeclaim.name, annotations=annotations, resource_version=version)
    if nodeclaim.metadata.deletion_timestamp is None:
        cluster.delete_nodeclaim(name=nodeclaim.name)
    return TerminationRequest.for_nodeclaim(nodeclaim, reason)


def finish_termination(
    *,
    cluster: Cluster,
    cloud: CloudProvider,
    nodeclaim_name: str,
    node_name: str | None,
    terminate: Sequence[str],
    nodeclaim_deleting: bool = False,
) -> None:
    """Terminate the instances ``terminate`` (ours, still up), delete the Node ``node_name`` (when given) and
    remove its finalizer, then DELETE the NodeClaim (unless ``nodeclaim_deleting``: the caller just read it with
    its ``deletionTimestamp``) and remove its finalizer, so it goes.

    Each step is idempotent. Raises the cloud provider's ``LaunchError`` / ``TerminationError`` or a
    ``KubernetesError`` when a step fails; the NodeClaim then keeps its finalizer, and the next attempt
    repeats what is left.
    """
    if terminate:
        cloud.terminate(instance_ids=list(terminate))
    if node_name:
        cluster.delete_node(name=node_name)
        cluster.remove_node_finalizer(name=node_name, finalizer=TERMINATION_FINALIZER)
    if not nodeclaim_deleting:
        cluster.delete_nodeclaim(name=nodeclaim_name)
    cluster.remove_nodeclaim_finalizer(name=nodeclaim_name, finalizer=TERMINATION_FINALIZER)


@dataclass(slots=True)
class Sweep:
    """What :func:`sweep_deletions` did: NodeClaims whose request it sent, Nodes it let go, and errors."""

    requested: list[str] = field(default_factory=list)
    released_nodes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def sweep_deletions(
    *,
    cluster: Cluster,
    queue: TerminationQueue,
    nodeclaims: Sequence[NodeClaim],
    nodes: Sequence[Node],
    now: float,
    stale_seconds: float,
) -> Sweep:
    """Make sure every deletion in the cluster has a termination request on its way (the reconcile pass's sweep).

    * a Node being deleted (``kubectl delete node``) that carries ``karpenter.sh/termination``: its NodeClaim's
      termination is requested (reason ``Deleted``, the NodeClaim is deleted too), as Karpenter's node termination
      controller does; a Node no NodeClaim claims is not ours to hold, and its finalizer is removed;
    * a NodeClaim being deleted with the finalizer (``kubectl delete nodeclaim``, or a request whose message was
      lost) whose :data:`~nodesmith.core.termination.REQUESTED_AT_ANNOTATION` is missing or older than
      ``stale_seconds`` (a draining node's annotation is refreshed by its rounds), or whose node is not tainted
      ``karpenter.sh/disrupted`` (no round started; :func:`_unstarted`): its request is sent again.
      The request is sent before the annotation is written, and the annotation only for a request the queue
      took: the annotation is what tells later passes a request is on its way, so a write that failed (or whose
      answer was lost) or an invocation ended between the two leaves the NodeClaim to the next pass rather than
      unrequested for ``stale_seconds``. A request sent twice is harmless (the termination queue's
      deduplication drops the copy; a round finds the drain where the last one left it).

    ``now`` is epoch seconds. Errors are collected per object, never raised.
    """
    out = Sweep()
    by_provider = {nc.status.provider_id: nc for nc in nodeclaims if nc.status.provider_id}
    owed: dict[str, tuple[NodeClaim, str]] = {}
    for node in nodes:
        if node.deletion_timestamp is None or TERMINATION_FINALIZER not in node.finalizers:
            continue
        claim = by_provider.get(node.provider_id)
        if claim is None:
            try:
                cluster.remove_node_finalizer(name=node.name, finalizer=TERMINATION_FINALIZER)
                out.released_nodes.append(node.name)
            except KubernetesError as exc:
                out.errors.append(f"release node {node.name}: {exc}")
        elif claim.metadata.deletion_timestamp is None:
            owed[claim.name] = (claim, REASON_DELETED)
    by_node = {n.provider_id: n for n in nodes if n.provider_id}
    for claim in nodeclaims:
        if claim.metadata.deletion_timestamp is None or TERMINATION_FINALIZER not in claim.metadata.finalizers:
            continue
        asked = from_rfc3339(claim.metadata.annotations.get(REQUESTED_AT_ANNOTATION))
        if asked is None or now - asked >= stale_seconds or _unstarted(by_node.get(claim.status.provider_id or "")):
            owed[claim.name] = (claim, claim.metadata.annotations.get(TERMINATION_REASON_ANNOTATION) or REASON_DELETED)
    requests: list[TerminationRequest] = []
    deleting = {name: claim for name, (claim, _) in owed.items() if claim.metadata.deletion_timestamp is not None}
    for claim, reason in owed.values():
        if claim.name in deleting:  # sent first, annotated once the queue took it (see the docstring)
            requests.append(TerminationRequest.for_nodeclaim(claim, reason))
            continue
        try:
            requests.append(request_termination(cluster=cluster, nodeclaim=claim, reason=reason, now=now))
        except KubernetesError as exc:
            out.errors.append(f"request termination of NodeClaim {claim.name}: {exc}")
    problems = queue.send(requests=requests) if requests else []
    failed = {p.split(":", 1)[0] for p in problems}
    out.requested = [r.nodeclaim for r in requests if r.nodeclaim not in failed]
    out.errors += [f"send termination request {p}" for p in problems]
    sent = [r for r in requests if r.nodeclaim in deleting and r.nodeclaim not in failed]
    out.errors += _annotate_sent(cluster, [(deleting[r.nodeclaim], r) for r in sent], now=now)
    return out


def _unstarted(node: Node | None) -> bool:
    """Whether ``node`` (a deleting NodeClaim's) shows that no drain round has started on it: it is there, not
    being deleted, and carries no taint keyed ``karpenter.sh/disrupted`` (:func:`carries_disrupted_taint`), which
    every caller puts on it right after requesting the termination and every round puts on it first. A caller ended
    between the two (an interruption invocation that deleted the NodeClaim and was killed before the taint and the
    send) leaves exactly that."""
    return node is not None and node.deletion_timestamp is None and not carries_disrupted_taint(node.taints)


def _annotate_sent(cluster: Cluster, sent: Sequence[tuple[NodeClaim, TerminationRequest]], *, now: float) -> list[str]:
    """Annotate each deleting NodeClaim whose request the queue took (reason, ``now`` as the request time); returns
    the errors, one per NodeClaim whose annotation could not be written (its request went all the same)."""
    errors: list[str] = []
    for claim, request in sent:
        current = dict(claim.metadata.annotations)
        annotations = request_annotations(reason=request.reason, now=now, deadline=None, current=current)
        try:
            cluster.annotate_nodeclaim(name=claim.name, annotations=annotations)
        except KubernetesError as exc:
            errors.append(f"annotate the termination request of NodeClaim {claim.name}: {exc}")
    return errors
