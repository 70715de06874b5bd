"""The disruption use case: expiration, drift, emptiness and consolidation, carried out across passes.

Karpenter's disruption controller (``karpenter-v1.md`` §3) is a singleton loop with an in-memory
queue. Here each reconcile pass calls :func:`disrupt` once after provisioning, and everything a
later pass needs is stored on the NodeClaims (:mod:`.disruption_state`), so no invocation has to
stay alive between steps:

1. **In-flight commands** (NodeClaims with ``DisruptionReason``): once every replacement NodeClaim
   is ``Initialized``, the nodes (already tainted ``karpenter.sh/disrupted``) are drained through
   the Eviction API (:func:`~nodesmith.services.drain.drain_node`, PDBs honoured) and, drained,
   terminated: instance, Node, NodeClaim (event ``DisruptionTerminating``). A drain that runs out
   of its per-pass budget resumes next pass. Their nodes count as deleting for the decision below.
   A command whose replacement vanished first is abandoned: its nodes are untainted and uncordoned
   and stay (Karpenter fails the command the same way).
2. **Expirations** (forceful, not budgeted, no pre-spun replacement; Karpenter's expiration
   controller): tainted, drained and terminated at once; their pods are re-provisioned by the
   next provisioning pass.
3. **One command** from :func:`~nodesmith.core.disruption.decide` (Emptiness, Drift, Multi-, then
   Single-node consolidation, budgets applied). A new command is only *recorded* as a candidate
   (``nodesmith.io/DisruptionCandidate``). When a pass at least ``validation_delay`` seconds later
   (Karpenter's ``commandValidationDelay``, 15 s) finds the same command again — and, when the
   in-memory ``pending`` map still has the first decision, :func:`~nodesmith.core.disruption.still_valid`
   accepts it — it is executed: taint + ``DisruptionReason``, replacements created and launched
   through the provisioning launch path, and deletes drained and terminated at once. Commands with
   replacements wait (step 1) until the replacements are Initialized before any pod is evicted.

Every decision is explained twice: Kubernetes Events on the nodes (``DisruptionBlocked``,
``Unconsolidatable``, ``DisruptionLaunching``, ``DisruptionWaitingReadiness``,
``DisruptionTerminating``, as Karpenter names them) and a JSON-safe record in
:attr:`DisruptionOutcome.decisions` that the handler logs (method, nodes, cost before/after,
rejected candidates with why).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from nodesmith.core.api.nodeclaim import CONDITION_INITIALIZED
from nodesmith.core.disruption import DisruptionSettings, decide, still_valid
from nodesmith.core.errors import ConflictError, KubernetesError, LaunchError, NodeClassNotReadyError
from nodesmith.core.ports import ObjectRef

from .breakdown import PoolKey, disruption_reason, pool_key
from .capacity import DISRUPTED_TAINT_KEY, disruption_volume_topology, instance_id_of, pending_pods
from .disruption_state import (
    CONDITION_CANDIDATE,
    CONDITION_DISRUPTING,
    CommandRecord,
    cluster_nodes,
    read_record,
    write_condition,
)
from .drain import cordon_node, drain_node
from .launch import Launcher
from .lifecycle import nodeclaim_ref
from .nodeclaims import build_nodeclaim, nodeclaim_name

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from nodesmith.core.api.ec2nodeclass import EC2NodeClass
    from nodesmith.core.api.nodeclaim import NodeClaim
    from nodesmith.core.disruption import ClusterNode, Decision, DisruptionPlan
    from nodesmith.core.model import InstanceType, Node, NodeSelectorRequirement
    from nodesmith.core.ports import CloudProvider, Cluster, Instance

__all__ = [
    "COMMAND_VALIDATION_DELAY_SECONDS",
    "DRAIN_BUDGET_SECONDS",
    "DisruptionOutcome",
    "PendingCommand",
    "disrupt",
    "summary",
]

LOG = logging.getLogger(__name__)

COMMAND_VALIDATION_DELAY_SECONDS = 15.0
"""Karpenter's ``commandValidationDelay`` (``validation.go``): a command waits this long, then is re-checked."""

DRAIN_BUDGET_SECONDS = 60.0
"""How long one pass drains a node before leaving the rest to the next pass (seconds)."""

MAX_EVENTS = 50
"""At most this many rejection Events per pass (Karpenter dedupes its event recorder the same way)."""

EVENT_DEDUPE_SECONDS = 600.0
"""An identical rejection Event (node, reason, message) is not posted again within this many seconds."""

_MAX_LOGGED_REJECTIONS = 50
_QUIET_REJECTIONS = ("node is not initialized", "node is deleting", "instance is terminating")


@dataclass(frozen=True, slots=True)
class PendingCommand:
    """A command found by an earlier pass of this container, kept in memory for exact validation."""

    decision: Decision
    since: float


@dataclass(slots=True)
class DisruptionOutcome:
    """What one :func:`disrupt` call did.

    ``decisions`` are JSON-safe explanations (one per command found, validated, executed or
    finished, and per expiration); ``executed`` counts commands started by method; ``savings_per_hour``
    sums ``cost_before - cost_after`` of commands started now (USD/hour), ``savings_by_method`` splits
    it by the method that claims it. ``nodes_terminated`` and
    ``pods_evicted`` count this pass's terminations and evictions; ``errors`` describe calls that
    failed without stopping the pass. ``terminated_by`` counts the terminations by (reason,
    NodePool, capacity type), reasons as Karpenter's (:func:`~nodesmith.services.breakdown.disruption_reason`);
    ``created_by`` / ``launched_by`` count replacement NodeClaims by (NodePool, capacity type).
    """

    decisions: list[dict[str, Any]] = field(default_factory=list)
    executed: dict[str, int] = field(default_factory=dict)
    savings_per_hour: float = 0.0
    savings_by_method: dict[str, float] = field(default_factory=dict)
    candidates: list[str] = field(default_factory=list)
    nodes_terminated: list[str] = field(default_factory=list)
    terminated_by: dict[tuple[str, str, str], int] = field(default_factory=dict)
    created_by: dict[PoolKey, int] = field(default_factory=dict)
    launched_by: dict[PoolKey, int] = field(default_factory=dict)
    replacements_launched: list[str] = field(default_factory=list)
    pods_evicted: int = 0
    rejected: int = 0
    errors: list[str] = field(default_factory=list)


def _explain(decision: Decision, *, stage: str) -> dict[str, Any]:
    rejected = [
        {"node": r.node, "method": r.method, "reason": r.reason} for r in decision.rejected[:_MAX_LOGGED_REJECTIONS]
    ]
    return {
        "stage": stage,
        "method": decision.method,
        "cause": decision.cause,
        "reason": decision.reason,
        "nodes": list(decision.nodes),
        "nodepools": list(decision.nodepools),
        "replacements": [
            {"nodepool": p.nodepool, "instance_types": [it.name for it in p.instance_types[:5]]}
            for p in decision.replacements
        ],
        "cost_before_usd_per_hour": round(decision.cost_before, 6),
        "cost_after_usd_per_hour": round(decision.cost_after, 6),
        "savings_usd_per_hour": round(decision.savings_per_hour, 6),
        "pods": list(decision.pods),
        "rejected": rejected,
        "rejected_total": len(decision.rejected),
    }


def _node_ref(node: str) -> ObjectRef:
    return ObjectRef(kind="Node", name=node)


class _Disruption:
    """One :func:`disrupt` call (its steps split for readability)."""

    def __init__(
        self,
        *,
        cluster: Cluster,
        cloud: CloudProvider,
        cluster_name: str,
        now: float,
        settings: DisruptionSettings,
        pending: dict[str, PendingCommand],
        recent_events: dict[str, float],
        validation_delay: float,
        drain_budget: float,
        sleep: Callable[[float], None],
        clock: Callable[[], float],
    ) -> None:
        self.cluster, self.cloud, self.cluster_name, self.now = cluster, cloud, cluster_name, now
        self.settings, self.pending, self.recent_events = settings, pending, recent_events
        self.validation_delay, self.drain_budget = validation_delay, drain_budget
        self.sleep, self.clock = sleep, clock
        self.out = DisruptionOutcome()

    # -- snapshot ----------------------------------------------------------------------------------

    def snapshot(self) -> None:
        cluster, cloud = self.cluster, self.cloud
        self.nodes: list[Node] = cluster.list_nodes()
        self.pods = cluster.list_pods()
        self.daemonsets = cluster.list_daemonsets()
        self.pdbs = cluster.list_pdbs()
        self.nodepools = [p for p in cluster.list_nodepools() if p.metadata.deletion_timestamp is None]
        self.nodeclasses: dict[str, EC2NodeClass] = {nc.name: nc for nc in cluster.list_ec2nodeclasses()}
        self.instances: dict[str, Instance] = {i.instance_id: i for i in cloud.list_instances()}
        self.catalogues: dict[str, dict[str, InstanceType]] = {}
        for name in sorted(self.nodeclasses):
            try:
                self.catalogues[name] = {it.name: it for it in cloud.instance_types(nodeclass=self.nodeclasses[name])}
            except NodeClassNotReadyError as exc:
                self.out.errors.append(f"EC2NodeClass {name}: {exc}")
        merged: dict[str, InstanceType] = {}
        for name in sorted(self.catalogues):
            for type_name, it in self.catalogues[name].items():
                merged.setdefault(type_name, it)
        self.catalogue = merged
        self.views, self.claims = cluster_nodes(
            cluster=cluster,
            nodes=self.nodes,
            pods=self.pods,
            nodeclaims=cluster.list_nodeclaims(),
            instances=self.instances,
            now=self.now,
            errors=self.out.errors,
        )
        self.by_name: dict[str, ClusterNode] = {v.name: v for v in self.views}

    def pool_types(self) -> dict[str, list[InstanceType]]:
        """Each NodePool's own EC2NodeClass catalogue (Karpenter's ``GetInstanceTypes(nodePool)``);
        NodePools of one node class share a list."""
        lists = {name: list(catalogue.values()) for name, catalogue in self.catalogues.items()}
        refs = {np.name: np.spec.template.spec.node_class_ref.name for np in self.nodepools}
        return {pool: lists[ref] for pool, ref in refs.items() if ref in lists}

    def volume_requirements(self) -> dict[str, tuple[NodeSelectorRequirement, ...]]:
        """The node requirements of the pods' PersistentVolumeClaims, so a simulated move keeps a pod
        in its volume's zone. Read only when some pod mounts a claim; when the storage objects cannot
        be read, bound pods with claims stay in their node's zone
        (:func:`~nodesmith.services.capacity.disruption_volume_topology`)."""
        if not any(p.pvc_names for p in self.pods):
            return {}
        try:
            context = self.cluster.volume_context()
        except KubernetesError as exc:
            self.out.errors.append(f"list PersistentVolumeClaims, PersistentVolumes and StorageClasses: {exc}")
            context = None
        return disruption_volume_topology(pods=self.pods, nodes=self.nodes, context=context)

    def _claim_of(self, node: str) -> NodeClaim | None:
        view = self.by_name.get(node)
        if view is None or view.nodeclaim is None:
            return None
        return self.claims.get(view.nodeclaim.name, view.nodeclaim)

    def _set(self, node: str, condition: str, status: str, reason: str, message: str) -> None:
        claim = self._claim_of(node)
        if claim is None:
            return
        try:
            self.claims[claim.name] = write_condition(
                cluster=self.cluster,
                nodeclaim=claim,
                condition=condition,
                status=status,
                reason=reason,
                message=message,
                now=self.now,
            )
        except KubernetesError as exc:
            self.out.errors.append(f"write {condition} of NodeClaim {claim.name}: {exc}")

    def _event(self, node: str, reason: str, message: str, *, warning: bool = False, dedupe: bool = False) -> None:
        key = f"{node}|{reason}|{message}"
        if dedupe:
            seen = self.recent_events.get(key)
            if seen is not None and self.now - seen < EVENT_DEDUPE_SECONDS:
                return
            self.recent_events[key] = self.now
        self.cluster.record_event(
            ref=_node_ref(node), reason=reason, message=message, type_="Warning" if warning else "Normal"
        )
        claim = self._claim_of(node)
        if claim is not None and not dedupe:
            self.cluster.record_event(
                ref=nodeclaim_ref(claim), reason=reason, message=message, type_="Warning" if warning else "Normal"
            )

    # -- step 1: commands in flight ----------------------------------------------------------------

    def in_flight(self) -> set[str]:
        """Advance the commands started by earlier passes; return every node that is going away."""
        going = {
            n.name
            for n in self.nodes
            if n.deletion_timestamp is not None or any(t.key == DISRUPTED_TAINT_KEY for t in n.taints)
        }
        commands: dict[tuple[str, ...], CommandRecord] = {}
        for claim in list(self.claims.values()):
            rec = read_record(claim, CONDITION_DISRUPTING)
            if rec is not None:
                commands.setdefault(rec.nodes, rec)
        for rec in commands.values():
            vanished = [r for r in rec.replacements if self._vanished(r)]
            if vanished:
                going -= self._abandon(rec, vanished)
                continue
            going |= set(rec.nodes)
            waiting = [r for r in rec.replacements if not self._initialized(r)]
            if waiting:
                for node in rec.nodes:
                    self._event(
                        node,
                        "DisruptionWaitingReadiness",
                        f"Waiting on readiness to continue disruption ({len(waiting)} replacement(s): "
                        + ", ".join(waiting)
                        + ")",
                        dedupe=True,
                    )
                continue
            for node in rec.nodes:
                self._terminate(node, why=f"{rec.method} ({rec.cause})", method=rec.method)
        return going

    def _initialized(self, name: str) -> bool:
        claim = self.claims.get(name)
        return claim is not None and claim.is_true(CONDITION_INITIALIZED)

    def _vanished(self, name: str) -> bool:
        """True when replacement ``name`` is gone or being deleted (capacity error, liveness, a user)."""
        claim = self.claims.get(name)
        return claim is None or claim.metadata.deletion_timestamp is not None

    def _abandon(self, rec: CommandRecord, vanished: list[str]) -> set[str]:
        """Fail a command whose replacement vanished before it initialized; returns the nodes given back.

        Karpenter un-taints the candidates and starts over ("If a replacement node fails to
        initialize, un-taint the node(s), and restart", disruption docs; ``karpenter-v1.md`` §3): the
        ``karpenter.sh/disrupted`` taint and the cordon come off, ``DisruptionReason`` turns False
        (so no later pass resumes the command) and the nodes are not drained. A node whose untaint
        failed keeps its command, so the next pass tries again.
        """
        why = f"replacement NodeClaim(s) {', '.join(vanished)} vanished before initializing"
        released: set[str] = set()
        for node in rec.nodes:
            try:
                self.cluster.untaint_and_uncordon(node_name=node, taint_key=DISRUPTED_TAINT_KEY)
            except KubernetesError as exc:
                self.out.errors.append(f"untaint {node}: {exc}")
                continue
            released.add(node)
            self._set(node, CONDITION_DISRUPTING, "False", "Abandoned", why)
            self._event(node, "DisruptionBlocked", f"Abandoned {rec.method} ({rec.cause}): {why}", warning=True)
        self.out.decisions.append(
            {"stage": "abandoned", "method": rec.method, "cause": rec.cause, "reason": why, "nodes": list(rec.nodes)}
        )
        return released

    def _terminate(self, node_name: str, *, why: str, method: str) -> bool:
        """Drain ``node_name`` (already tainted) and, when drained, terminate it. True when gone.

        Counted in ``terminated_by`` under Karpenter's reason for ``method`` (``Empty``, ``Drifted``, ...).
        """
        node = next((n for n in self.nodes if n.name == node_name), None)
        claim = self._claim_of(node_name)
        if node is not None:
            result = drain_node(
                cluster=self.cluster,
                node=node,
                now=self.now,
                deadline=None,
                budget_seconds=self.drain_budget,
                sleep=self.sleep,
                clock=self.clock,
            )
            self.out.pods_evicted += result.evicted
            if not result.complete:
                self._event(node_name, "DisruptionBlocked", f"Draining: {result.reason}", warning=True, dedupe=True)
                return False
        self._event(node_name, "DisruptionTerminating", f"Disrupting Node: {why}")
        try:
            inst = instance_id_of(node.provider_id if node is not None else None) or instance_id_of(
                claim.status.provider_id if claim is not None else None
            )
            if inst:
                self.cloud.terminate(instance_ids=[inst])
            self.cluster.delete_node(name=node_name)
            if claim is not None:
                self.cluster.delete_nodeclaim(name=claim.name)
        except (KubernetesError, LaunchError) as exc:
            self.out.errors.append(f"terminate {node_name}: {exc}")
            return False
        self.out.nodes_terminated.append(node_name)
        key = (disruption_reason(method), *pool_key(nodeclaim=claim, labels=node.labels if node is not None else None))
        self.out.terminated_by[key] = self.out.terminated_by.get(key, 0) + 1
        return True

    # -- step 2: expirations -----------------------------------------------------------------------

    def expire(self, plan: DisruptionPlan) -> None:
        for dec in plan.expirations:
            self.out.decisions.append(_explain(dec, stage="executed"))
            self.out.executed[dec.method] = self.out.executed.get(dec.method, 0) + 1
            self._start(dec)
            for node in dec.nodes:
                self._terminate(node, why=f"expiration ({dec.reason})", method=dec.method)

    # -- step 3: the command -----------------------------------------------------------------------

    def command(self, plan: DisruptionPlan) -> None:
        cmd = plan.command
        self._explain_rejections(plan)
        stored = self._stored_candidate()
        if cmd is None:
            if stored is not None:
                self._clear_candidate(stored.nodes)
            return
        key = ",".join(sorted(cmd.nodes))
        same = stored is not None and stored.method == cmd.method and set(stored.nodes) == set(cmd.nodes)
        if not same:
            if stored is not None:
                self._clear_candidate(stored.nodes)
            self.pending.clear()
            self.pending[key] = PendingCommand(decision=cmd, since=self.now)
            record = CommandRecord(method=cmd.method, nodes=cmd.nodes, since=self.now, cause=cmd.cause)
            for node in cmd.nodes:
                self._set(node, CONDITION_CANDIDATE, "True", _camel(cmd.method), record.message())
            self.out.candidates.extend(cmd.nodes)
            self.out.decisions.append(_explain(cmd, stage="candidate"))
            return
        assert stored is not None
        if self.now - stored.since < self.validation_delay:
            return
        remembered = self.pending.get(key)
        if remembered is not None and not still_valid(remembered.decision, plan):
            self.out.decisions.append(_explain(cmd, stage="invalidated"))
            self._clear_candidate(stored.nodes)
            self.pending.pop(key, None)
            return
        self.pending.pop(key, None)
        self._clear_candidate(cmd.nodes)
        self._execute(cmd)

    def _stored_candidate(self) -> CommandRecord | None:
        for claim in self.claims.values():
            rec = read_record(claim, CONDITION_CANDIDATE)
            if rec is not None:
                return rec
        return None

    def _clear_candidate(self, nodes: tuple[str, ...]) -> None:
        for node in nodes:
            claim = self._claim_of(node)
            if claim is not None and claim.is_true(CONDITION_CANDIDATE):
                self._set(node, CONDITION_CANDIDATE, "False", "Superseded", "")

    def _explain_rejections(self, plan: DisruptionPlan) -> None:
        sent = 0
        for rej in plan.rejected:
            if sent >= MAX_EVENTS:
                break
            if rej.reason.startswith(_QUIET_REJECTIONS):
                continue  # transient states Karpenter does not report either
            reason = "DisruptionBlocked" if rej.method is None else "Unconsolidatable"
            if rej.method == "drift":
                reason = "DisruptionBlocked"
            before = len(self.recent_events)
            self._event(rej.node, reason, rej.reason, dedupe=True)
            sent += len(self.recent_events) > before
        self.out.rejected = len(plan.rejected)

    def _start(self, dec: Decision, replacements: tuple[str, ...] = ()) -> None:
        record = CommandRecord(
            method=dec.method,
            nodes=dec.nodes,
            since=self.now,
            cause=dec.cause,
            replacements=replacements,
            cost_before=dec.cost_before,
            cost_after=dec.cost_after,
        )
        for node in dec.nodes:
            try:
                cordon_node(cluster=self.cluster, node_name=node)
            except KubernetesError as exc:
                self.out.errors.append(f"taint {node}: {exc}")
            self._set(node, CONDITION_DISRUPTING, "True", _reason(dec.cause), record.message())

    def _execute(self, cmd: Decision) -> None:
        self.out.executed[cmd.method] = self.out.executed.get(cmd.method, 0) + 1
        self.out.savings_per_hour += cmd.savings_per_hour
        by_method = self.out.savings_by_method
        by_method[cmd.method] = by_method.get(cmd.method, 0.0) + cmd.savings_per_hour
        names = self._launch(cmd)
        if names is None:
            self.out.decisions.append(_explain(cmd, stage="failed-launch"))
            return
        self._start(cmd, names)
        self.out.decisions.append(_explain(cmd, stage="executed"))
        verb = "replace" if cmd.replacements else "delete"
        for node in cmd.nodes:
            self._event(
                node,
                "DisruptionLaunching" if cmd.replacements else "Disrupted",
                f"{cmd.method} ({cmd.cause}): {verb}; {cmd.reason}; "
                f"${cmd.cost_before:.4f}/h -> ${cmd.cost_after:.4f}/h"
                + (f"; replacement(s) {', '.join(names)}" if names else ""),
            )
        if not cmd.replacements:
            for node in cmd.nodes:
                self._terminate(node, why=f"{cmd.method} ({cmd.cause})", method=cmd.method)

    def _launch(self, cmd: Decision) -> tuple[str, ...] | None:
        """Create and launch the replacements (the provisioning launch path); None if one failed."""
        if not cmd.replacements:
            return ()
        launcher = Launcher(
            cluster=self.cluster,
            cloud=self.cloud,
            cluster_name=self.cluster_name,
            now=self.now,
            nodeclasses=self.nodeclasses,
            catalogues=self.catalogues,
            instances=self.instances,
        )
        pools = {p.name: p for p in self.nodepools}
        taken = set(self.claims)
        names: list[str] = []
        for index, plan in enumerate(cmd.replacements):
            pool = pools.get(plan.nodepool)
            if pool is None:
                self.out.errors.append(f"replacement for {cmd.nodes}: NodePool {plan.nodepool} is gone")
                return None
            seed = f"disruption|{','.join(cmd.nodes)}|{self.now:.3f}|{index}"
            name = nodeclaim_name(nodepool=plan.nodepool, seed=seed, taken=taken)
            taken.add(name)
            nodeclass = self.nodeclasses.get(pool.spec.template.spec.node_class_ref.name)
            try:
                draft = build_nodeclaim(plan=plan, nodepool=pool, name=name, nodeclass=nodeclass)
                created = self.cluster.create_nodeclaim(nodeclaim=draft)
            except (ValidationError, ConflictError, KubernetesError) as exc:
                self.out.errors.append(f"create replacement NodeClaim {name}: {exc}")
                return None
            launched = launcher.launch(created)
            kind = launched.result.capacity_type if launched.result is not None else plan.capacity_type
            _tally(self.out.created_by, pool_key(nodeclaim=created, capacity_type=kind))
            if launched.nodeclaim is None:
                self.out.errors.append(f"launch replacement NodeClaim {name}: {launched.message}")
                return None
            _tally(self.out.launched_by, pool_key(nodeclaim=created, capacity_type=kind))
            names.append(name)
            self.out.replacements_launched.append(name)
        self.out.errors.extend(launcher.errors)
        return tuple(names)


def _tally(counts: dict[PoolKey, int], key: PoolKey) -> None:
    counts[key] = counts.get(key, 0) + 1


def _camel(method: str) -> str:
    return "".join(part.capitalize() for part in method.split("-"))


def _reason(cause: str) -> str:
    cleaned = "".join(ch for ch in cause if ch.isalnum() or ch == "_")
    return cleaned or "Disrupted"


def disrupt(
    *,
    cluster: Cluster,
    cloud: CloudProvider,
    cluster_name: str,
    now: float,
    settings: DisruptionSettings | None = None,
    pending: dict[str, PendingCommand] | None = None,
    recent_events: dict[str, float] | None = None,
    validation_delay: float = COMMAND_VALIDATION_DELAY_SECONDS,
    drain_budget_seconds: float = DRAIN_BUDGET_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> DisruptionOutcome:
    """Run one disruption pass (see the module docstring) and return what it did.

    ``now`` is the pass time (epoch seconds). ``settings`` are the core's
    :class:`~nodesmith.core.disruption.DisruptionSettings`. ``pending`` and ``recent_events`` are
    optional in-memory maps a long-lived caller (a warm Lambda container, watch mode, the demo)
    passes again on every call: the first decision of each candidate command, for exact
    :func:`~nodesmith.core.disruption.still_valid` validation, and the rejection Events already
    posted, for deduplication. Without them the state on the NodeClaims is enough: a command
    found again ``validation_delay`` seconds (default 15) later is executed.
    ``drain_budget_seconds`` bounds the drain of one node per pass; ``sleep``/``clock`` are the
    drain's (injectable for tests).

    Kubernetes and EC2 errors on one object are reported in ``outcome.errors``; errors while
    listing propagate.
    """
    run = _Disruption(
        cluster=cluster,
        cloud=cloud,
        cluster_name=cluster_name,
        now=now,
        settings=settings or DisruptionSettings(),
        pending=pending if pending is not None else {},
        recent_events=recent_events if recent_events is not None else {},
        validation_delay=validation_delay,
        drain_budget=drain_budget_seconds,
        sleep=sleep,
        clock=clock,
    )
    run.snapshot()
    going = run.in_flight()
    views = [v for v in run.views if v.name not in set(run.out.nodes_terminated)]
    plan = decide(
        now=now,
        nodes=views,
        nodepools=run.nodepools,
        instance_types=list(run.catalogue.values()),
        nodeclasses=list(run.nodeclasses.values()),
        pending_pods=pending_pods(run.pods),
        pdbs=run.pdbs,
        daemonsets=run.daemonsets,
        deleting=going,
        settings=run.settings,
        volume_requirements=run.volume_requirements(),
        nodepool_instance_types=run.pool_types(),
    )
    run.expire(plan)
    run.command(plan)
    for record in run.out.decisions:
        LOG.info("disruption %s: %s", record["stage"], record["reason"])
    return run.out


def summary(outcome: DisruptionOutcome) -> Mapping[str, Any]:
    """A short JSON-safe summary of ``outcome`` for the reconcile pass summary."""
    return {
        "executed": dict(outcome.executed),
        "candidates": list(outcome.candidates),
        "nodes_terminated": list(outcome.nodes_terminated),
        "replacements_launched": list(outcome.replacements_launched),
        "pods_evicted": outcome.pods_evicted,
        "savings_usd_per_hour": round(outcome.savings_per_hour, 6),
        "errors": list(outcome.errors),
    }
