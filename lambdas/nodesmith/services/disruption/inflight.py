"""Advancing the disruption commands earlier passes started (step 1 of a disruption pass).

A command in flight is stored in the ``DisruptionReason`` condition of its nodes' NodeClaims
(:mod:`.disruption_state`). Each pass: once every replacement NodeClaim is ``Initialized`` the
nodes (tainted ``karpenter.sh/disrupted``) are drained and terminated
(:meth:`~nodesmith.services.disruption.run.DisruptionPass.terminate`, resumed next pass when the
drain runs out of budget); until then the nodes get ``DisruptionWaitingReadiness`` Events. A
command whose replacement vanished first, or whose replacements are not all Initialized
:data:`REPLACEMENT_TIMEOUT_SECONDS` (600 s) after the command started, is abandoned: its nodes are
untainted, uncordoned and kept, and the replacements are left alone (Karpenter fails the command
the same way).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodesmith.core.api.nodeclaim import CONDITION_INITIALIZED
from nodesmith.core.errors import KubernetesError
from nodesmith.services.disruption.state import CONDITION_DISRUPTING, CommandRecord, read_record
from nodesmith.services.provisioning.capacity import DISRUPTED_TAINT_KEY

if TYPE_CHECKING:
    from nodesmith.services.disruption.run import DisruptionPass

__all__ = ["REPLACEMENT_TIMEOUT_SECONDS", "advance_in_flight"]

REPLACEMENT_TIMEOUT_SECONDS = 600.0
"""How long a started command waits for its replacements to become Initialized (seconds from its start).

Karpenter's disruption queue fails a command that is still waiting past its retry duration:
``maxRetryDuration`` (10 min) in ``kubernetes-sigs/karpenter``
``pkg/controllers/disruption/orchestration/queue.go`` (v0.3x); since the queue moved to
``pkg/controllers/disruption/queue.go`` (v1) it is ``minRetryDuration`` (10 min), scaled by 80 ms per
queued command up to 1 h, which stays 10 min for the few commands a pass runs. Checked only while
replacements are still waiting: once they are Initialized the drain (Karpenter's termination
controller) is not on this clock.
"""


def advance_in_flight(run: DisruptionPass) -> set[str]:
    """Advance the commands started by earlier passes; return every node that is going away.

    Going away: nodes being deleted or tainted ``karpenter.sh/disrupted``, and the nodes of every
    command still in flight; the nodes of an abandoned command are given back.
    """
    going = {
        n.name
        for n in run.nodes
        if n.deletion_timestamp is not None or any(t.key == DISRUPTED_TAINT_KEY for t in n.taints)
    }
    commands: dict[tuple[str, ...], CommandRecord] = {}
    for claim in list(run.claims.values()):
        rec = read_record(claim, CONDITION_DISRUPTING)
        if rec is not None:
            commands.setdefault(rec.nodes, rec)
    for rec in commands.values():
        vanished = [r for r in rec.replacements if _vanished(run, r)]
        if vanished:
            going -= _abandon(run, rec, f"replacement NodeClaim(s) {', '.join(vanished)} vanished before initializing")
            continue
        waiting = [r for r in rec.replacements if not _initialized(run, r)]
        if waiting and run.now - rec.since > REPLACEMENT_TIMEOUT_SECONDS:
            going -= _abandon(
                run,
                rec,
                f"replacement NodeClaim(s) {', '.join(waiting)} not initialized "
                f"{REPLACEMENT_TIMEOUT_SECONDS:.0f} s after the command started (timed out)",
            )
            continue
        going |= set(rec.nodes)
        if waiting:
            for node in rec.nodes:
                run.event(
                    node,
                    "DisruptionWaitingReadiness",
                    f"Waiting on readiness to continue disruption ({len(waiting)} replacement(s): "
                    + ", ".join(waiting)
                    + ")",
                    dedupe=True,
                )
            continue
        for node in rec.nodes:
            run.terminate(node, why=f"{rec.method} ({rec.cause})", method=rec.method, drain_bound=rec.drain_bound)
    return going


def _initialized(run: DisruptionPass, name: str) -> bool:
    claim = run.claims.get(name)
    return claim is not None and claim.is_true(CONDITION_INITIALIZED)


def _vanished(run: DisruptionPass, name: str) -> bool:
    """True when replacement ``name`` is gone or being deleted (capacity error, liveness, a user)."""
    claim = run.claims.get(name)
    return claim is None or claim.metadata.deletion_timestamp is not None


def _abandon(run: DisruptionPass, rec: CommandRecord, why: str) -> set[str]:
    """Fail a command whose replacement vanished or timed out before it initialized (``why`` says
    which); returns the nodes given back.

    Karpenter un-taints the candidates and starts over ("If a replacement node fails to
    initialize, un-taint the node(s), and restart", disruption docs; ``karpenter-v1.md`` §3.7;
    the failure branch of the queue's ``Reconcile`` in ``pkg/controllers/disruption/queue.go``): the
    ``karpenter.sh/disrupted`` taint and the cordon come off, ``DisruptionReason`` turns False
    (so no later pass resumes the command) and the nodes are not drained. The replacements are not
    touched (Karpenter does not delete them either: one that never registers is removed by the
    NodeClaim liveness check, an empty one by consolidation). A node whose untaint failed keeps its
    command, so the next pass tries again.
    """
    released: set[str] = set()
    for node in rec.nodes:
        try:
            run.cluster.untaint_and_uncordon(node_name=node, taint_key=DISRUPTED_TAINT_KEY)
        except KubernetesError as exc:
            run.out.errors.append(f"untaint {node}: {exc}")
            continue
        released.add(node)
        run.set_condition(node, CONDITION_DISRUPTING, "False", "Abandoned", why)
        run.event(node, "DisruptionBlocked", f"Abandoned {rec.method} ({rec.cause}): {why}", warning=True)
    run.out.decisions.append(
        {"stage": "abandoned", "method": rec.method, "cause": rec.cause, "reason": why, "nodes": list(rec.nodes)}
    )
    return released
