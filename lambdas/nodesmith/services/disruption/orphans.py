"""Releasing ``karpenter.sh/disrupted`` taints nothing accounts for (step 1b of a disruption pass).

A node is tainted ``karpenter.sh/disrupted:NoSchedule`` (and cordoned) by whoever is about to take it away:
a disruption command (:mod:`.command`), the termination function's drain, the interruption function. When
the invocation that tainted it ends before it records why (killed or timed out between the taint and the
``DisruptionReason`` condition or the NodeClaim's deletion), or that record's write fails, the taint stays with
nothing behind it: the node takes no pods, is counted as going away against the disruption budgets, and is never
consolidated.

Karpenter's disruption controller removes the taint, on every reconcile, from the nodes that are neither in
its orchestration queue nor deleting (``kubernetes-sigs/karpenter``
``pkg/controllers/disruption/controller.go``: "If Karpenter restarts or fails with an error during a
disruption action, some nodes can be left tainted. Idempotently remove this taint from candidates that are
not in the orchestration queue"; ``state.RequireNoScheduleTaint(..., false, ...)`` on the state nodes neither in
the queue nor ``MarkedForDeletion``). Nodesmith's queue is the ``DisruptionReason`` records on the NodeClaims,
and "deleting" is the node's or its NodeClaim's ``deletionTimestamp`` or a termination request
(:data:`~nodesmith.core.termination.REQUESTED_AT_ANNOTATION`), which the interruption function and every other
termination path write before draining.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodesmith.core.errors import KubernetesError
from nodesmith.core.termination import REQUESTED_AT_ANNOTATION
from nodesmith.services.disruption.state import CONDITION_DISRUPTING, read_record
from nodesmith.services.provisioning.capacity import DISRUPTED_TAINT_KEY

if TYPE_CHECKING:
    from nodesmith.core.api.nodeclaim import NodeClaim
    from nodesmith.services.disruption.run import DisruptionPass

__all__ = ["release_orphaned_taints"]


def _leaving(claim: NodeClaim | None) -> bool:
    """Whether ``claim`` is deleting or its termination was requested (None: gone, so leaving too)."""
    return (
        claim is None
        or claim.metadata.deletion_timestamp is not None
        or REQUESTED_AT_ANNOTATION in claim.metadata.annotations
    )


def release_orphaned_taints(run: DisruptionPass) -> set[str]:
    """Untaint (``karpenter.sh/disrupted``) and uncordon the nodes of ``run`` that no disruption covers; return them.

    A tainted node is left alone when it is deleting, when its NodeClaim is deleting or has a termination request,
    when it is one of the nodes of a ``DisruptionReason`` command still in flight (read after step 1, so the
    commands it abandoned are not; step 1 untainted those itself), when this pass requested its termination, or
    when it has no NodeClaim (not Nodesmith's to judge). Must run before this pass starts any command, so a node
    tainted by this pass is never seen here. Each remaining node's NodeClaim is read again just before the write:
    a termination requested since the snapshot keeps the taint. The cordon goes as
    :meth:`~nodesmith.core.ports.Cluster.untaint_and_uncordon` undoes it (only when Nodesmith put it there). A
    node released gets a ``DisruptionTaintRemoved`` Event; a failed read or write goes to ``out.errors`` and the
    next pass tries again.
    """
    in_flight: set[str] = set()
    for claim in run.claims.values():
        record = read_record(claim, CONDITION_DISRUPTING)
        if record is not None:
            in_flight.update(record.nodes)
    handled = set(run.out.nodes_terminated)  # termination requested by this pass
    handled.update(n for d in run.out.decisions if d["stage"] == "abandoned" for n in d["nodes"])  # untainted already
    released: set[str] = set()
    for node in run.nodes:
        if not any(t.key == DISRUPTED_TAINT_KEY for t in node.taints):
            continue
        if node.deletion_timestamp is not None or node.name in in_flight or node.name in handled:
            continue
        known = run.claim_of(node.name)
        if known is None or _leaving(known):
            continue
        try:
            if _leaving(run.cluster.get_nodeclaim(name=known.name)):
                continue
            run.cluster.untaint_and_uncordon(node_name=node.name, taint_key=DISRUPTED_TAINT_KEY)
        except KubernetesError as exc:
            run.out.errors.append(f"untaint {node.name}: {exc}")
            continue
        released.add(node.name)
        run.event(
            node.name,
            "DisruptionTaintRemoved",
            f"Removed the {DISRUPTED_TAINT_KEY} taint: no disruption command, deletion or termination request "
            "covers the node",
        )
    if released:
        run.out.decisions.append(
            {
                "stage": "untainted",
                "method": "",
                "cause": "",
                "reason": "tainted node not covered by a command, deletion or termination request",
                "nodes": sorted(released),
            }
        )
    return released
