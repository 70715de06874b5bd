"""The disruption use case: expiration, drift, emptiness and consolidation, carried out across passes.

Karpenter's disruption controller (``karpenter-v1.md`` §3) is a singleton loop with an in-memory
queue. Here each reconcile pass calls :func:`disrupt` once after provisioning, and everything a
later pass needs is stored on the NodeClaims (:mod:`.disruption_state`), so no invocation has to
stay alive between steps:

1. **In-flight commands** (NodeClaims with ``DisruptionReason``): once every replacement NodeClaim
   is ``Initialized``, the nodes' (already tainted ``karpenter.sh/disrupted``) termination is requested
   (event ``DisruptionTerminating``): their NodeClaims are deleted and the termination queue drains them
   through the Eviction API, PDBs honoured, and terminates them (:mod:`nodesmith.services.termination`).
   Their nodes count as deleting for the decision below.
   A command whose replacement vanished first, or whose replacements are not all Initialized 600 s
   after it started (Karpenter's disruption queue timeout), is abandoned: its nodes are untainted
   and uncordoned and stay, its replacements are left (Karpenter fails the command the same way).
   Then a node still tainted ``karpenter.sh/disrupted`` that no command in flight, deletion or
   termination request covers (an invocation ended between the taint and its record) is untainted
   (:mod:`.orphans`, Karpenter's cleanup of tainted nodes "not in the queue and not deleting").
2. **Expirations** (forceful, not budgeted, no pre-spun replacement; Karpenter's expiration
   controller): tainted and their termination requested at once; their pods are re-provisioned by the
   next provisioning pass.
3. **One command** from :func:`~nodesmith.core.disruption.decide` (node Repair when the ``NodeRepair``
   gate is on, Emptiness, Drift, Multi-, then Single-node consolidation, budgets applied). A repair is
   replaced like a drift (replacement Initialized first, then the drain, reason ``Unhealthy``), or
   terminated at once when its NodePool cannot hold a replacement; its blocked candidates get
   ``NodeRepairBlocked`` or ``DisruptionBlocked`` Events. A new command is only *recorded* as a candidate
   (``nodesmith.io/DisruptionCandidate``). When a pass at least ``validation_delay`` seconds later
   (Karpenter's ``commandValidationDelay``, 15 s) finds the same command again — and, when the
   in-memory ``pending`` map still has the first decision, :func:`~nodesmith.core.disruption.still_valid`
   accepts it — it is executed: taint + ``DisruptionReason``, replacements created and launched
   through the provisioning launch path, and deletes' termination requested at once. Commands with
   replacements wait (step 1) until the replacements are Initialized before any pod is evicted.

Every decision is explained twice: Kubernetes Events on the nodes (``DisruptionBlocked``,
``Unconsolidatable``, ``DisruptionLaunching``, ``DisruptionWaitingReadiness``,
``DisruptionTerminating``, as Karpenter names them) and a JSON-safe record in
:attr:`DisruptionOutcome.decisions` that the handler logs (method, nodes, cost before/after,
rejected candidates with why).

The steps live in their own modules, one concern each: :mod:`.disruption_pass` (the snapshot and
the node actions the steps share), :mod:`.disruption_inflight` (step 1), :mod:`.disruption_command`
(steps 2 and 3) and :mod:`.disruption_outcome` (what the pass did, and its summary). This module
runs them in order and re-exports their public names.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from nodesmith.core.disruption import DisruptionSettings, DisruptionSnapshot, decide
from nodesmith.services.disruption.command import COMMAND_VALIDATION_DELAY_SECONDS, PendingCommand, expire, run_command
from nodesmith.services.disruption.consolidated import Consolidated, cluster_state
from nodesmith.services.disruption.inflight import advance_in_flight
from nodesmith.services.disruption.orphans import release_orphaned_taints
from nodesmith.services.disruption.outcome import DisruptionOutcome, summary
from nodesmith.services.disruption.run import DisruptionPass
from nodesmith.services.provisioning.capacity import pending_pods

if TYPE_CHECKING:
    from nodesmith.services.ports import Ports
    from nodesmith.services.provisioning.inputs import Snapshot

__all__ = [
    "COMMAND_VALIDATION_DELAY_SECONDS",
    "Consolidated",
    "DisruptionOutcome",
    "PendingCommand",
    "disrupt",
    "summary",
]

LOG = logging.getLogger(__name__)


def disrupt(
    *,
    ports: Ports,
    now: float,
    settings: DisruptionSettings | None = None,
    pending: dict[str, PendingCommand] | None = None,
    recent_events: dict[str, float] | None = None,
    validation_delay: float = COMMAND_VALIDATION_DELAY_SECONDS,
    snapshot: Snapshot | None = None,
    consolidated: Consolidated | None = None,
) -> DisruptionOutcome:
    """Run one disruption pass (see the module docstring) and return what it did.

    ``now`` is the pass time (epoch seconds). ``settings`` are the core's
    :class:`~nodesmith.core.disruption.DisruptionSettings`. ``pending`` and ``recent_events`` are
    optional in-memory maps a long-lived caller (a warm Lambda container, watch mode, the demo)
    passes again on every call: the first decision of each candidate command, for exact
    :func:`~nodesmith.core.disruption.still_valid` validation, and the rejection Events already
    posted, for deduplication. Without them the state on the NodeClaims is enough: a command
    found again ``validation_delay`` seconds (default 15) later is executed.
    ``ports.queue`` takes the termination requests of the nodes the pass disrupts. ``snapshot`` is the
    reconcile pass's snapshot as that pass left the cluster
    (:attr:`~nodesmith.services.provisioning.outcome.ReconcileOutcome.snapshot`): the pass decides on it and lists
    only what it lacks; None lists the cluster. ``consolidated`` is the consolidation state a long-lived caller
    remembers between calls (:class:`~nodesmith.services.disruption.consolidated.Consolidated`): while the cluster's
    state is the one an earlier call found no consolidation command in (for at most five minutes), consolidation
    is not computed again, as Karpenter's ``IsConsolidated``; None computes it every call. It also keeps what the
    pass derives from each node while the node does not change (:class:`Consolidated`), so a pass over an unchanged
    cluster costs what changed; the decisions are the same.

    Kubernetes and EC2 errors on one object are reported in ``outcome.errors``; errors while
    listing propagate.
    """
    run = DisruptionPass(
        ports=ports,
        now=now,
        settings=settings or DisruptionSettings(),
        recent_events=recent_events if recent_events is not None else {},
    )
    run.snapshot(snapshot, kept=consolidated.views if consolidated is not None else None)
    if not run.pool_catalogues.evaluated:
        return run.out  # NodeOverlays unread: prices unknown, so nothing is decided (Karpenter waits the same way)
    run.report_invalid_annotations(consolidated.nodes if consolidated is not None else None)
    going = advance_in_flight(run)
    going -= release_orphaned_taints(run)
    views = [v for v in run.views if v.name not in set(run.out.nodes_terminated)]
    waiting = pending_pods(run.pods)
    state = ""
    if consolidated is not None:
        state = cluster_state(
            views=views,
            pending=waiting,
            nodeclaims=run.claims.values(),
            nodepools=run.nodepools,
            pdbs=run.pdbs,
            daemonsets=run.daemonsets,
            deleting=going,
            digests=consolidated.digests,
        )
    plan = decide(
        DisruptionSnapshot(
            nodes=views,
            nodepools=run.nodepools,
            instance_types=list(run.catalogue.values()),
            nodeclasses=list(run.nodeclasses.values()),
            pending_pods=waiting,
            pdbs=run.pdbs,
            daemonsets=run.daemonsets,
            volume_requirements=run.volume_requirements(),
            nodepool_instance_types=run.pool_types(),
        ),
        now=now,
        deleting=going,
        settings=run.settings,
        cluster_state=state,
        consolidated=consolidated.current(now=now) if consolidated is not None else "",
        memo=consolidated.nodes if consolidated is not None else None,
    )
    if consolidated is not None:
        consolidated.record(plan, now=now)
    run.out.consolidation_skipped = plan.consolidation_skipped
    expire(run, plan)
    run_command(run, plan, pending=pending if pending is not None else {}, validation_delay=validation_delay)
    for record in run.out.decisions:
        LOG.info("disruption %s: %s", record["stage"], record["reason"])
    return run.out
