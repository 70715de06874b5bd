"""One scheduling pass: place pending pods on existing capacity, planned NodeClaims or new NodeClaims.

Follows Karpenter v1's provisioning scheduler (``[core]:pkg/controllers/provisioning/scheduling/
scheduler.go Solve``/``add``, ``queue.go``, ``preferences.go``):

1. Pending pods (:func:`~nodesmith.core.scheduling.pods.is_provisionable`) are queued cpu desc,
   memory desc, creation time, uid.
2. Each pod tries, in order: existing nodes (initialized first, then by name; cordoned skipped;
   :class:`~nodesmith.core.scheduling.existingindex.ExistingIndex` skips those that certainly refuse),
   NodeClaims planned in this pass (fewest pods first, then oldest), then a new NodeClaim from the
   NodePools by weight desc, name asc — the first that accepts wins. Static NodePools (``spec.replicas``)
   never open one (Karpenter's provisioner leaves them out); their nodes are existing capacity.
3. A pod that fits nowhere is relaxed one step at a time (preferred terms were treated as required)
   and retried; if still unplaced it goes to the back of the queue with its original preferences.
   The pass ends when the queue cycles without progress.
4. With ``packing="nodesmith"`` (the default), the planned NodeClaims of pods without topology,
   host ports or minValues are re-packed for a lower USD/hour when that is strictly cheaper
   (:mod:`~nodesmith.core.scheduling.repack`); ``packing="karpenter"`` stops after step 3.

The result is deterministic for a given input regardless of the order of pods, NodePools,
instance types or nodes in it.

Supported: requirement operators incl. Gt/Lt/Gte/Lte and minValues (Strict policy), node selector
and ORed required node-affinity terms, preferred node affinity, taints/tolerations (startup and
ephemeral taints ignored on uninitialized nodes), host ports, DaemonSet overhead, NodePool weight,
limits (any resource and ``nodes``), topology spread (any key the NodePools or nodes define;
maxSkew, minDomains, matchLabelKeys, nodeAffinity/nodeTaints policies), required and preferred pod
affinity/anti-affinity (incl. anti-affinity of running pods), reasons with numbers.
Volume topology comes in as ``SchedulingInput.volume_requirements`` (:mod:`~nodesmith.core.scheduling.volumes`).
Capacity reservations: a pass plans no more NodeClaims on a reservation than it can take
(:mod:`~nodesmith.core.scheduling.reservations`). Not modelled: DRA, the minValues BestEffort policy.
Each NodePool schedules from its EC2NodeClass's catalogue when ``SchedulingInput.nodepool_instance_types``
names it, else from ``instance_types``.
A podAffinity/podAntiAffinity term with a non-empty namespaceSelector makes the pod unschedulable
with that reason instead of being ignored.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from nodesmith.core.capacityreservations import LABEL_CAPACITY_RESERVATION_ID
from nodesmith.core.requirements import LABEL_HOSTNAME, LABEL_ZONE, Requirement
from nodesmith.core.scheduling.claims import ClaimIndex
from nodesmith.core.scheduling.daemonsets import daemon_infos
from nodesmith.core.scheduling.existing import SimExistingNode
from nodesmith.core.scheduling.existingindex import ExistingIndex
from nodesmith.core.scheduling.explain import Explainer, Failure
from nodesmith.core.scheduling.instancetypes import TypeInfo, type_info
from nodesmith.core.scheduling.nodeclaim import SimNodeClaim, Template, new_nodeclaim
from nodesmith.core.scheduling.plan import to_plan
from nodesmith.core.scheduling.pods import PodData, PodDataCache, is_provisionable, pod_id, queue_key
from nodesmith.core.scheduling.reasons import Rejection
from nodesmith.core.scheduling.repack import repack
from nodesmith.core.scheduling.reservations import ReservationLedger
from nodesmith.core.scheduling.topology import DomainNode, Topology
from nodesmith.core.scheduling.types import PACKING_POLICIES, NodeClaimPlan, SchedulingInput, SchedulingResult

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from nodesmith.core.model import Pod, Taint
    from nodesmith.core.requirements import Requirements
    from nodesmith.core.scheduling.claims import Entry
    from nodesmith.core.scheduling.reasons import Explanation

__all__ = ["solve"]

HOSTNAME_PREFIX = "hostname-placeholder-"
_RESERVATIONS_TAKEN = Rejection(
    "offerings",
    "capacity reservations",
    "the NodePool's types that fit are offered only in capacity reservations this pass has no slot left of",
)


def solve(inp: SchedulingInput) -> SchedulingResult:
    """Run one scheduling pass over ``inp`` and return the NodeClaims to launch, the placements on
    existing nodes and a reason for every pending pod that fits nowhere.

    Pure and deterministic. Raises nothing for bad pods or NodePools: a malformed requirement makes
    that pod unschedulable (or that NodePool unusable) with a reason. Raises ``ValueError`` for an
    unknown ``inp.packing``.
    """
    if inp.packing not in PACKING_POLICIES:
        raise ValueError(f"unknown packing policy {inp.packing!r} (expected one of {', '.join(PACKING_POLICIES)})")
    return _Pass(inp).run()


class _Pass:
    def __init__(self, inp: SchedulingInput) -> None:
        self.packing = inp.packing
        catalogues: dict[int, list[TypeInfo]] = {}  # by id of the types sequence: NodePools sharing one share it
        daemons = daemon_infos(inp.daemonsets)
        self.templates: list[Template] = []
        self.skipped: list[tuple[str, Rejection]] = []
        for np in sorted(inp.nodepools, key=lambda n: (-n.weight_or_zero, n.name)):
            if np.spec.replicas is not None:  # static: its NodeClaims follow replicas, never pending pods
                why = "static NodePool (spec.replicas): it launches for its replicas, never for pending pods"
                self.skipped.append((np.name, Rejection("nodepool", "static NodePool", why)))
                continue
            types = inp.types_for(np.name)
            catalogue = catalogues.get(id(types))
            if catalogue is None:
                catalogue = [type_info(it) for it in sorted(types, key=lambda it: it.name)]
                catalogues[id(types)] = catalogue
            tpl = Template(np, catalogue=catalogue, daemons=daemons, usage=inp.nodepool_usage.get(np.name, {}))
            if tpl.error is None:
                self.templates.append(tpl)
            else:
                self.skipped.append((tpl.name, Rejection("nodepool", tpl.error, tpl.error)))
        self.tolerate_pns = any(t.effect == "PreferNoSchedule" for tpl in self.templates for t in tpl.taints)
        seen: set[str] = set()
        self.pending: list[Pod] = []
        for pod in inp.pods:
            pid = pod_id(pod)
            if is_provisionable(pod) and pid not in seen:
                seen.add(pid)
                self.pending.append(pod)
        nodes = sorted(inp.existing_nodes, key=lambda n: (not n.initialized, n.name))
        bases = inp.existing_bases
        self.existing = [
            SimExistingNode(n, daemons, bases.base(n, inp.daemonsets, daemons) if bases is not None else None)
            for n in nodes
        ]
        self.targets = ExistingIndex([n for n in self.existing if not n.node.unschedulable])
        self._universe_cache: dict[str, dict[str, list[tuple[Taint, ...]]]] = {}
        self.topology = Topology(
            universe=self._universe,
            nodes=[
                DomainNode(
                    name=n.name,
                    labels=n.node.labels,
                    taints=n.node.taints,
                    requirements=n.requirements,
                    pods=n.node.pods,
                )
                for n in self.existing
            ],
            excluded=seen,
        )
        shared = inp.pod_data
        self.cache = (
            shared
            if shared is not None and shared.serves(inp.volume_requirements)
            else PodDataCache(inp.volume_requirements)
        )
        for pod in self.pending:
            self.topology.update(pod, self.cache.get(pod, self.cache.original(pod)))
        self.claims: list[SimNodeClaim] = []
        self.index = ClaimIndex()
        self.explainer = Explainer(
            templates=self.templates,
            skipped=self.skipped,
            existing=self.existing,
            topology=self.topology,
            volumes=inp.volume_requirements,
        )
        self.traced = frozenset(inp.explain)
        self.ledger = ReservationLedger(self.templates)

    def _universe(self, key: str) -> Mapping[str, Sequence[tuple[Taint, ...]]]:
        """Domains NodePools can create for ``key``, with the taints of the pools offering them (buildDomainGroups)."""
        hit = self._universe_cache.get(key)
        if hit is not None:
            return hit
        out: dict[str, list[tuple[Taint, ...]]] = {}
        if key != LABEL_HOSTNAME:
            for tpl in self.templates:
                values: set[str] = set()
                pool_req = tpl.requirements.get(key) if tpl.requirements.has(key) else None
                if pool_req is not None and not pool_req.complement:
                    values.update(pool_req.values)
                for t in tpl.types:
                    if not t.requirements.has(key):
                        continue
                    req = t.requirements.get(key)
                    if pool_req is not None:
                        req = req.intersection(pool_req)
                    if not req.complement:
                        values.update(req.values)
                for value in values:
                    out.setdefault(value, []).append(tpl.taints)
        self._universe_cache[key] = out
        return out

    # -- the loop -------------------------------------------------------------------------------

    def run(self) -> SchedulingResult:
        queue = deque(sorted(self.pending, key=queue_key))
        last_len: dict[str, int] = {}
        errors: dict[str, tuple[Pod, Failure]] = {}
        while queue:
            pod = queue[0]
            pid = pod_id(pod)
            if last_len.get(pid) == len(queue):
                break
            queue.popleft()
            failure = self._try(pod)
            if failure is None:
                errors.pop(pid, None)
                continue
            errors[pid] = (pod, failure)
            self.topology.update(pod, self.cache.get(pod, self.cache.original(pod)))
            queue.append(pod)
            last_len[pid] = len(queue)
        # Explanations see the pass as the last failed attempts did: before re-packing changes limits.
        explanations = {
            pod.key: self.explainer.failure(pod, failure, original=self.cache.get(pod, self.cache.original(pod)))
            for pod, failure in errors.values()
        }
        if self.packing == "nodesmith" and self.claims:
            self.claims = repack(
                self.claims,
                topology=self.topology,
                new_hostname=lambda seq: f"{HOSTNAME_PREFIX}{seq + 1:04d}",
                next_seq=len(self.claims),
            )
        return self._result(explanations)

    def _try(self, pod: Pod) -> Failure | None:
        """Place the pod, relaxing its soft constraints one step at a time (``trySchedule``)."""
        constraints = self.cache.original(pod)
        relaxed: list[str] = []
        while True:
            data = self.cache.get(pod, constraints)
            if data.error is not None:
                return Failure(data=data, relaxed=tuple(relaxed), error=data.error)
            rejections = self._add(pod, data, tuple(relaxed))
            if rejections is None:
                return None
            step = constraints.relax(tolerations=pod.tolerations, tolerate_prefer_no_schedule=self.tolerate_pns)
            if step is None:
                return Failure(data=data, relaxed=tuple(relaxed), rejections=tuple(rejections))
            constraints = step[0]
            relaxed.append(step[1])
            self.topology.update(pod, self.cache.get(pod, constraints))

    def _add(self, pod: Pod, data: PodData, relaxed: tuple[str, ...]) -> list[tuple[Template, Rejection]] | None:
        """Place the pod (existing node, planned NodeClaim, new NodeClaim); None on success, else why
        each NodePool refused. Pods in ``SchedulingInput.explain`` are traced before they are placed."""
        topology = self.topology
        traced = pod.key in self.traced
        if len(self.targets):
            found = self.targets.first_fit(pod, data, topology)
            if found is not None:
                node, reqs = found
                if traced:
                    self.explainer.trace(pod, data, relaxed, placed=f"existing node {node.name}")
                node.add(pod, data, reqs, topology)
                self.targets.placed(node)
                return None
        if len(self.index):
            filters = topology.domain_filters(pod, data)
            for entry in self._claim_candidates(pod, data, filters):
                nc = entry[2]
                if filters and nc.excluded_by(filters):
                    continue
                can = nc.can_add(pod, data, topology)
                fit = self._reserve(nc.template, nc.hostname, *can) if can is not None else None
                if fit is not None:
                    if traced:
                        self.explainer.trace(
                            pod, data, relaxed, placed=f"NodeClaim planned in this pass for nodepool {nc.template.name}"
                        )
                    zone = nc.single(LABEL_ZONE)
                    nc.add(pod, data, fit[0], fit[1], topology)
                    self.ledger.hold(nc.hostname, fit[2])
                    self.index.remove(entry, zone)
                    self.index.add(nc)
                    return None
        rejections: list[tuple[Template, Rejection]] = []
        for tpl in self.templates:
            hostname = f"{HOSTNAME_PREFIX}{len(self.claims) + 1:04d}"
            claim, rejection = new_nodeclaim(tpl, pod, data, topology, seq=len(self.claims), hostname=hostname)
            reserving = self._reserve(tpl, hostname, claim.requirements, claim.mask) if claim is not None else None
            if claim is None or reserving is None:
                rejections.append((tpl, rejection or _RESERVATIONS_TAKEN))
                continue
            claim.requirements, claim.mask, claim.charged = reserving[0], reserving[1], reserving[1]
            if traced:
                self.explainer.trace(
                    pod,
                    data,
                    relaxed,
                    placed=f"new NodeClaim of nodepool {tpl.name}",
                    chosen=(tpl, claim),
                    rejections=rejections,
                )
            claim.add(pod, data, claim.requirements, claim.mask, topology)
            self.ledger.hold(hostname, reserving[2])
            tpl.charge(claim.mask)
            self.claims.append(claim)
            self.index.add(claim)
            return None
        return rejections

    def _reserve(
        self, tpl: Template, hostname: str, reqs: Requirements, mask: int
    ) -> tuple[Requirements, int, frozenset[str]] | None:
        """A NodeClaim's requirements, instance types and the reservations it holds once capacity reservations are
        accounted for (:mod:`~nodesmith.core.scheduling.reservations`): the reservations it can have a slot of, or
        else the same NodeClaim without the reservations the pass has no slot left of; None when nothing is left
        to launch it with then."""
        if not tpl.reserved:
            return reqs, mask, frozenset()
        held = self.ledger.to_reserve(tpl, hostname=hostname, reqs=reqs, mask=mask)
        exhausted = self.ledger.exhausted_in(tpl)
        if held or not exhausted:
            return reqs, mask, held
        narrowed = reqs.copy()
        narrowed.add(Requirement(LABEL_CAPACITY_RESERVATION_ID, complement=True, values=exhausted))
        mask &= tpl.compatible_mask(narrowed)
        return (narrowed, mask, held) if mask else None

    def _claim_candidates(
        self, pod: Pod, data: PodData, filters: Sequence[tuple[str, frozenset[str]]]
    ) -> Iterable[Entry]:
        """Planned NodeClaims to try, fewest pods first, narrowed when the pod's topology allows only
        some hostnames (anti-affinity) or some zones; the rest would be refused anyway.
        """
        exclusive = self.topology.exclusive_host_groups(pod, data)
        if exclusive:
            picked = self.index.on_free_hosts(exclusive)
            if picked is not None:
                return picked
        zones: frozenset[str] | None = None
        for key, allowed in filters:
            if key == LABEL_ZONE:
                zones = allowed if zones is None else zones & allowed
        if zones is not None:
            return self.index.in_zones(zones)
        return self.index.ordered()

    # -- output ---------------------------------------------------------------------------------

    def _result(self, explanations: dict[str, Explanation]) -> SchedulingResult:
        plans: list[NodeClaimPlan] = []
        for nc in self.claims:
            plan = to_plan(nc, reservations=self.ledger.held(nc.hostname))
            if isinstance(plan, str):
                for pod in nc.pods:
                    explanations[pod.key] = self.explainer.unlaunchable(pod, plan, nc.template)
            else:
                plans.append(plan)
        existing = {n.name: tuple(n.placed) for n in sorted(self.existing, key=lambda n: n.name) if n.placed}
        unschedulable = {key: explanations[key].text() for key in sorted(explanations)}
        for plan in plans:
            for pod in plan.pods:
                if pod.key in self.traced:
                    explanations[pod.key] = self.explainer.placed(pod.key, plan=plan)
        for name, pods in existing.items():
            for pod in pods:
                if pod.key in self.traced:
                    explanations[pod.key] = self.explainer.placed(pod.key, node=name)
        return SchedulingResult(
            nodeclaims=tuple(plans), existing=existing, unschedulable=unschedulable, explanations=explanations
        )
