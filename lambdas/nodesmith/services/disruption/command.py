"""Starting disruption: expirations at once, and the one command a pass decided on once validated
(steps 2 and 3 of a disruption pass).

Expirations (forceful, not budgeted, no pre-spun replacement; Karpenter's expiration controller)
are tainted, drained and terminated at once. A new command from
:func:`~nodesmith.core.disruption.decide` is first only *recorded* as a candidate
(``nodesmith.io/DisruptionCandidate``); a pass at least ``validation_delay`` seconds later
(Karpenter's ``commandValidationDelay``, ``validation.go``) that finds it again — and, when the
in-memory ``pending`` map still has the first decision, :func:`~nodesmith.core.disruption.still_valid`
accepts it — executes it: taint + ``DisruptionReason``, replacements created and launched through
the provisioning launch path (:class:`~nodesmith.services.provisioning.launch.Launcher`), and deletes drained
and terminated at once. Rejected candidates are explained by deduplicated Events.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import ValidationError

from nodesmith.core.disruption import still_valid
from nodesmith.core.errors import ConflictError, KubernetesError
from nodesmith.services.breakdown import pool_key
from nodesmith.services.disruption.outcome import explain, tally
from nodesmith.services.disruption.state import CONDITION_CANDIDATE, CONDITION_DISRUPTING, CommandRecord, read_record
from nodesmith.services.provisioning.launch import Launcher
from nodesmith.services.provisioning.nodeclaims import build_nodeclaim, nodeclaim_name
from nodesmith.services.termination.drain import cordon_node

if TYPE_CHECKING:
    from nodesmith.core.disruption import Decision, DisruptionPlan
    from nodesmith.services.disruption.run import DisruptionPass

__all__ = [
    "COMMAND_VALIDATION_DELAY_SECONDS",
    "MAX_EVENTS",
    "PendingCommand",
    "expire",
    "run_command",
]

COMMAND_VALIDATION_DELAY_SECONDS = 15.0
"""Karpenter's ``commandValidationDelay`` (``validation.go``): a command waits this long, then is re-checked."""

MAX_EVENTS = 50
"""At most this many rejection Events per pass (Karpenter dedupes its event recorder the same way)."""

_QUIET_REJECTIONS = ("node is not initialized", "node is deleting", "instance is terminating")


@dataclass(frozen=True, slots=True)
class PendingCommand:
    """A command found by an earlier pass of this container, kept in memory for exact validation."""

    decision: Decision
    since: float


def expire(run: DisruptionPass, plan: DisruptionPlan) -> None:
    """Taint, drain and terminate the nodes of every expiration in ``plan`` at once."""
    for dec in plan.expirations:
        run.out.decisions.append(explain(dec, stage="executed"))
        run.out.executed[dec.method] = run.out.executed.get(dec.method, 0) + 1
        _start(run, dec)
        for node in dec.nodes:
            run.terminate(node, why=f"expiration ({dec.reason})", method=dec.method)


def run_command(
    run: DisruptionPass, plan: DisruptionPlan, *, pending: dict[str, PendingCommand], validation_delay: float
) -> None:
    """Record ``plan.command`` as a candidate, or execute it when an earlier pass recorded the same
    command at least ``validation_delay`` seconds ago (and ``pending``, when it remembers the first
    decision, still validates). A stale candidate is cleared; rejections are explained by Events."""
    cmd = plan.command
    _explain_rejections(run, plan)
    stored = _stored_candidate(run)
    if cmd is None:
        if stored is not None:
            _clear_candidate(run, stored.nodes)
        return
    key = ",".join(sorted(cmd.nodes))
    same = stored is not None and stored.method == cmd.method and set(stored.nodes) == set(cmd.nodes)
    if not same:
        if stored is not None:
            _clear_candidate(run, stored.nodes)
        pending.clear()
        pending[key] = PendingCommand(decision=cmd, since=run.now)
        record = CommandRecord(method=cmd.method, nodes=cmd.nodes, since=run.now, cause=cmd.cause)
        for node in cmd.nodes:
            run.set_condition(node, CONDITION_CANDIDATE, "True", _camel(cmd.method), record.message())
        run.out.candidates.extend(cmd.nodes)
        run.out.decisions.append(explain(cmd, stage="candidate"))
        return
    assert stored is not None
    if run.now - stored.since < validation_delay:
        return
    remembered = pending.get(key)
    if remembered is not None and not still_valid(remembered.decision, plan):
        run.out.decisions.append(explain(cmd, stage="invalidated"))
        _clear_candidate(run, stored.nodes)
        pending.pop(key, None)
        return
    pending.pop(key, None)
    _clear_candidate(run, cmd.nodes)
    _execute(run, cmd)


def _stored_candidate(run: DisruptionPass) -> CommandRecord | None:
    for claim in run.claims.values():
        rec = read_record(claim, CONDITION_CANDIDATE)
        if rec is not None:
            return rec
    return None


def _clear_candidate(run: DisruptionPass, nodes: tuple[str, ...]) -> None:
    for node in nodes:
        claim = run.claim_of(node)
        if claim is not None and claim.is_true(CONDITION_CANDIDATE):
            run.set_condition(node, CONDITION_CANDIDATE, "False", "Superseded", "")


def _explain_rejections(run: DisruptionPass, plan: DisruptionPlan) -> None:
    sent = 0
    for rej in plan.rejected:
        if sent >= MAX_EVENTS:
            break
        if rej.reason.startswith(_QUIET_REJECTIONS):
            continue  # transient states Karpenter does not report either
        reason = "DisruptionBlocked" if rej.method is None else "Unconsolidatable"
        if rej.method in ("drift", "repair"):
            reason = "DisruptionBlocked"
        before = len(run.recent_events)
        run.event(rej.node, rej.event or reason, rej.reason, dedupe=True, warning=rej.event is not None)
        sent += len(run.recent_events) > before
    run.out.rejected = len(plan.rejected)


def _start(run: DisruptionPass, dec: Decision, replacements: tuple[str, ...] = ()) -> None:
    record = CommandRecord(
        method=dec.method,
        nodes=dec.nodes,
        since=run.now,
        cause=dec.cause,
        replacements=replacements,
        cost_before=dec.cost_before,
        cost_after=dec.cost_after,
        drain_bound=dec.drain_bound,
    )
    for node in dec.nodes:
        try:
            cordon_node(cluster=run.cluster, node_name=node)
        except KubernetesError as exc:
            run.out.errors.append(f"taint {node}: {exc}")
        run.set_condition(node, CONDITION_DISRUPTING, "True", _reason(dec.cause), record.message())


def _execute(run: DisruptionPass, cmd: Decision) -> None:
    run.out.executed[cmd.method] = run.out.executed.get(cmd.method, 0) + 1
    run.out.savings_per_hour += cmd.savings_per_hour
    by_method = run.out.savings_by_method
    by_method[cmd.method] = by_method.get(cmd.method, 0.0) + cmd.savings_per_hour
    names = _launch(run, cmd)
    if names is None:
        run.out.decisions.append(explain(cmd, stage="failed-launch"))
        return
    _start(run, cmd, names)
    run.out.decisions.append(explain(cmd, stage="executed"))
    verb = "replace" if cmd.replacements else "delete"
    for node in cmd.nodes:
        if cmd.approval:  # Karpenter's Event for a Balanced NodePool's consolidation it scored worth making
            run.event(node, "ConsolidationApproved", cmd.approval)
        run.event(
            node,
            "DisruptionLaunching" if cmd.replacements else "Disrupted",
            f"{cmd.method} ({cmd.cause}): {verb}; {cmd.reason}; "
            f"${cmd.cost_before:.4f}/h -> ${cmd.cost_after:.4f}/h"
            + (f"; replacement(s) {', '.join(names)}" if names else ""),
        )
    if not cmd.replacements:
        for node in cmd.nodes:
            run.terminate(node, why=f"{cmd.method} ({cmd.cause})", method=cmd.method, drain_bound=cmd.drain_bound)


def _launch(run: DisruptionPass, cmd: Decision) -> tuple[str, ...] | None:
    """Create and launch the replacements (the provisioning launch path); None if one failed."""
    if not cmd.replacements:
        return ()
    launcher = Launcher(
        cluster=run.cluster,
        cloud=run.cloud,
        cluster_name=run.cluster_name,
        now=run.now,
        nodeclasses=run.nodeclasses,
        catalogues=run.catalogues,
        instances=run.instances,
    )
    pools = {p.name: p for p in run.nodepools}
    taken = set(run.claims)
    names: list[str] = []
    for index, plan in enumerate(cmd.replacements):
        pool = pools.get(plan.nodepool)
        if pool is None:
            run.out.errors.append(f"replacement for {cmd.nodes}: NodePool {plan.nodepool} is gone")
            return None
        seed = f"disruption|{','.join(cmd.nodes)}|{run.now:.3f}|{index}"
        name = nodeclaim_name(nodepool=plan.nodepool, seed=seed, taken=taken)
        taken.add(name)
        nodeclass = run.nodeclasses.get(pool.spec.template.spec.node_class_ref.name)
        try:
            draft = build_nodeclaim(plan=plan, nodepool=pool, name=name, nodeclass=nodeclass)
            created = run.cluster.create_nodeclaim(nodeclaim=draft)
        except (ValidationError, ConflictError, KubernetesError) as exc:
            run.out.errors.append(f"create replacement NodeClaim {name}: {exc}")
            return None
        launched = launcher.launch(created)
        kind = launched.result.capacity_type if launched.result is not None else plan.capacity_type
        tally(run.out.created_by, pool_key(nodeclaim=created, capacity_type=kind))
        if launched.nodeclaim is None:
            run.out.errors.append(f"launch replacement NodeClaim {name}: {launched.message}")
            return None
        tally(run.out.launched_by, pool_key(nodeclaim=created, capacity_type=kind))
        names.append(name)
        run.out.replacements_launched.append(name)
    run.out.errors.extend(launcher.errors)
    return tuple(names)


def _camel(method: str) -> str:
    return "".join(part.capitalize() for part in method.split("-"))


def _reason(cause: str) -> str:
    cleaned = "".join(ch for ch in cause if ch.isalnum() or ch == "_")
    return cleaned or "Disrupted"
