"""One reconcile pass's state and steps: the NodeClaim lifecycle, capacity reservations, catalogues, static NodePools,
provisioning for pending pods and the pass's report.

:func:`~nodesmith.services.provisioning.reconcile.reconcile` decides the order of the steps; creating and launching
the planned NodeClaims is :class:`~nodesmith.services.provisioning.creation.NodeClaimCreator`'s.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING

from nodesmith.core.errors import KubernetesError
from nodesmith.core.scheduling.types import ExistingNode, NodeClaimPlan, SchedulingInput
from nodesmith.core.timestamps import from_rfc3339
from nodesmith.services.breakdown import PoolKey, pool_key
from nodesmith.services.provisioning.capacity import (
    existing_capacity,
    inflight_node,
    leaving_node_names,
    nodepool_usage,
    pending_pods,
    reschedulable_pods,
    volume_topology,
)
from nodesmith.services.provisioning.creation import NodeClaimCreator, as_instance
from nodesmith.services.provisioning.inputs import (
    merged_catalogue,
    nodeclass_catalogues,
    take_snapshot,
    usable_pools,
    without_offerings,
)
from nodesmith.services.provisioning.launch import Launcher
from nodesmith.services.provisioning.lifecycle import (
    INSTANCE_GONE_GRACE_SECONDS,
    GcLimits,
    LifecycleOutcome,
    collect_garbage,
    link_nodes,
)
from nodesmith.services.provisioning.nodeclasses import finalize_nodeclasses, update_nodeclass_status
from nodesmith.services.provisioning.nodepool_status import update_nodepool_statuses
from nodesmith.services.provisioning.outcome import ReconcileOutcome, cost_by_pool, post_pod_events
from nodesmith.services.provisioning.overlays import nodepool_catalogues
from nodesmith.services.provisioning.reservations import expire_capacity_blocks, sync_nodeclass_status
from nodesmith.services.provisioning.static import decide_static, launch_plans, remove_static, static_pools
from nodesmith.services.provisioning.utilization import nodepool_utilization
from nodesmith.services.termination.requests import sweep_deletions

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nodesmith.core.api.nodeclaim import NodeClaim
    from nodesmith.core.api.nodepool import NodePool
    from nodesmith.core.model import InstanceType, Node, NodeSelectorRequirement, Pod
    from nodesmith.core.ports import LaunchResult
    from nodesmith.core.resources import Resources
    from nodesmith.services.ports import Ports
    from nodesmith.services.provisioning.inputs import Snapshot
    from nodesmith.services.provisioning.reconcile import ReconcileOptions

__all__ = ["ReconcilePass"]


class ReconcilePass:
    """State and steps of one reconcile pass; :func:`~nodesmith.services.provisioning.reconcile.reconcile` runs the
    steps in order. Taking the snapshot (construction) raises what listing raises; each step reports errors on one
    object in ``out.errors`` and goes on."""

    def __init__(self, *, ports: Ports, now: float, options: ReconcileOptions, fleet: bool = False) -> None:
        self.ports = ports
        self.cluster = ports.cluster
        self.cloud = ports.cloud
        self.cluster_name = ports.cluster_name
        self.now = now
        self.options = options
        self.solver = options.solver
        self.clock = options.clock
        self.started = self.clock()
        self.out = ReconcileOutcome()
        # fleet: garbage collection is due and its listing of the fleet runs while the pass provisions; a kept
        # listing (options.fleet_listing) runs across passes, and a snapshot that must list the fleet lists afresh
        self._kept = options.fleet_listing if fleet else None
        if self._kept is not None:
            self._kept.begin(self.cloud)
        self._listing = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="fleet") if fleet and not self._kept else None
        )
        self._fleet = self._listing.submit(self.cloud.list_instances) if self._listing is not None else None
        try:
            self.snap = take_snapshot(
                cluster=self.cluster,
                cloud=self.cloud,
                every_instance=False,
                fleet=self._fleet.result if self._fleet is not None else None,
            )
        except BaseException:
            self.close()
            raise
        self.claims: list[NodeClaim] = list(self.snap.nodeclaims)
        self.nodes: list[Node] = list(self.snap.nodes)
        self.leaving: set[str] = set()
        self.nominated: list[tuple[Pod, str]] = []
        self.pending: list[Pod] = []
        self.pools: list[NodePool] = []
        self.existing: dict[str, ExistingNode] = {}
        self.volume_requirements: dict[str, tuple[NodeSelectorRequirement, ...]] = {}
        self.new_cost_by: dict[PoolKey, float] = {}
        self.created: list[NodeClaim] = []

    def close(self) -> None:
        """Wait for the fleet listing begun at construction, if any (a pass leaves no thread behind)."""
        if self._listing is not None:
            self._listing.shutdown(wait=True, cancel_futures=True)

    def list_fleet(self) -> bool:
        """Make the snapshot's instances every live instance of ours, unless they are already all of them (the
        snapshot reads only those provisioning uses, unless a NodeClaim never launched made it list the fleet): the
        listing begun at construction, the kept listing (``options.fleet_listing``) once it has ended, else one made
        now. Instances it does not show that this pass read by id or launched are kept (an instance launched after
        the listing began, or one EC2 does not list yet); what this pass read wins over a kept listing, which may
        have begun passes ago. False when the kept listing is still under way, or failed (in ``out.errors``)."""
        if self.snap.every_instance:
            return True
        if self._kept is not None:
            try:
                instances = self._kept.take(self.cloud)
            except Exception as exc:  # reported; the collection stays due and the next pass lists again
                self.out.errors.append(f"list the fleet for garbage collection: {exc}")
                return False
            if instances is None:
                return False
            older = {i.instance_id: i for i in instances}
            self.snap.instances = {**older, **self.snap.instances}
        else:
            listed = {i.instance_id: i for i in (self._fleet.result() if self._fleet else self.cloud.list_instances())}
            self.snap.instances = {**self.snap.instances, **listed}
        self.snap.every_instance = True
        return True

    def collect_fleet_garbage(self) -> None:
        """The garbage collection that needs the fleet listing (the instance-gone check and the orphan sweep),
        after provisioning, when :meth:`lifecycle` ran without the fleet: pending pods do not wait for the listing.
        The pods of the nodes it removes are provisioned for at once, as if :meth:`lifecycle` had removed them."""
        if self.out.garbage_collected or not self.list_fleet():
            return
        life = LifecycleOutcome()
        self._collect_garbage(nodeclaims=self.claims, nodes=self.nodes, outcome=life)
        out = self.out
        out.errors.extend(life.errors)
        self.claims = [nc for nc in self.claims if nc.name not in life.deleted]
        self.nodes = [n for n in self.nodes if n.name not in life.deleted_nodes]
        gone = set(life.deleted_nodes) - self.leaving
        self.leaving |= gone
        if not gone:
            return
        pending = {p.key for p in self.pending}
        removed = [node for name in gone if (node := self.existing.pop(name, None)) is not None]
        placed = [p for node in removed for p in node.pods if p.key in pending]  # pending pods it was to take
        out.pods_awaiting_capacity -= len(placed)
        moving = reschedulable_pods(self.snap.pods, leaving=gone)
        out.pods_rescheduled += len(moving)
        if self.pools and (placed or moving):
            self._solve_all([*placed, *moving])

    def lifecycle(self) -> None:
        """(e) + (f): registration, initialization, liveness and garbage collection."""
        snap, out = self.snap, self.out
        life = LifecycleOutcome()
        claims = link_nodes(cluster=self.cluster, nodeclaims=self.claims, nodes=snap.nodes, now=self.now, outcome=life)
        out.nodeclaims_registered = life.registered
        out.nodeclaims_initialized = life.initialized
        out.registered_by = dict(life.registered_by)
        out.initialized_by = dict(life.initialized_by)
        self._collect_garbage(nodeclaims=claims, nodes=snap.nodes, outcome=life)
        if self.ports.queue is not None:
            swept = sweep_deletions(
                cluster=self.cluster,
                queue=self.ports.queue,
                nodeclaims=[nc for nc in claims if nc.name not in life.deleted],
                nodes=snap.nodes,
                now=self.now,
                stale_seconds=self.options.request_stale_seconds,
            )
            out.terminations_requested.extend(swept.requested)
            out.errors.extend(swept.errors)
        self.claims = [nc for nc in claims if nc.name not in life.deleted]
        classes = finalize_nodeclasses(
            ports=self.ports, nodeclasses=list(snap.nodeclasses.values()), nodeclaims=self.claims
        )
        out.launch_templates_deleted = classes.templates_deleted
        out.errors.extend(classes.errors)
        written, errors = update_nodeclass_status(ports=self.ports, nodeclasses=snap.nodeclasses.values(), now=self.now)
        snap.nodeclasses.update(written)  # the disruption pass after this one decides on the status as written
        out.errors.extend(errors)
        self.nodes = [n for n in snap.nodes if n.name not in life.deleted_nodes]
        self.leaving = leaving_node_names(snap.nodes, deleted=life.deleted_nodes, nodeclaims=self.claims)
        out.errors.extend(life.errors)

    def _collect_garbage(
        self, *, nodeclaims: Sequence[NodeClaim], nodes: Sequence[Node], outcome: LifecycleOutcome
    ) -> None:
        """Garbage-collect ``nodeclaims`` and ``nodes`` against the snapshot's instances (the instance-gone check and
        the orphan sweep only when they are the whole fleet) into ``outcome``, and count what it terminated in
        :attr:`out` (its errors stay in ``outcome``)."""
        collect_garbage(
            ports=self.ports,
            nodeclaims=nodeclaims,
            nodes=nodes,
            instances=self.snap.instances,
            now=self.now,
            outcome=outcome,
            fleet_listed=self.snap.every_instance,
            limits=GcLimits(registration_ttl_seconds=self.options.registration_ttl_seconds),
        )
        out = self.out
        out.nodeclaims_terminated += outcome.terminated
        for key, count in outcome.terminated_by.items():
            out.terminated_by[key] = out.terminated_by.get(key, 0) + count
        out.orphans_terminated += outcome.orphans_terminated
        out.garbage_collected = self.snap.every_instance

    def capacity_reservations(self) -> None:
        """With ``ports.reservations`` (gate ``ReservedCapacity``): EC2NodeClass ``status.capacityReservations``, and
        the termination of NodeClaims whose Capacity Block ends (:mod:`.reservations`); their nodes are then leaving,
        so their pods are provisioned for in this pass."""
        reservations = self.ports.reservations
        if reservations is None:
            return
        written, errors = sync_nodeclass_status(
            ports=self.ports, reservations=reservations, nodeclasses=list(self.snap.nodeclasses.values()), now=self.now
        )
        self.snap.nodeclasses.update(written)
        self.out.errors.extend(errors)
        expiry = expire_capacity_blocks(
            ports=self.ports, reservations=reservations, nodeclaims=self.claims, now=self.now
        )
        self.out.errors.extend(expiry.errors)
        self.out.terminations_requested.extend(expiry.requested)
        if not expiry.requested:
            return
        refreshed: list[NodeClaim] = []
        for nc in self.claims:
            fresh: NodeClaim | None = nc
            if nc.name in expiry.requested:
                try:
                    fresh = self.cluster.get_nodeclaim(name=nc.name)
                except KubernetesError as exc:  # the next pass sees it deleting
                    self.out.errors.append(f"read NodeClaim {nc.name} after requesting its termination: {exc}")
            if fresh is not None:
                refreshed.append(fresh)
        self.claims = refreshed

    def prepare(self) -> None:
        """(b): catalogues per EC2NodeClass, the NodePools that can provision, the launcher."""
        snap = self.snap
        wanted = {np.spec.template.spec.node_class_ref.name for np in snap.nodepools}
        wanted |= {nc.spec.node_class_ref.name for nc in self.claims}
        self.catalogues = nodeclass_catalogues(
            cloud=self.cloud, nodeclasses=snap.nodeclasses, wanted=wanted, out=self.out
        )
        self.merged = merged_catalogue(self.catalogues)
        self.pools = usable_pools(snap, self.catalogues, self.out)
        self.pool_catalogues = nodepool_catalogues(
            overlays=self.ports.overlays, nodepools=self.pools, catalogues=self.catalogues, now=self.now
        )
        self.out.errors.extend(self.pool_catalogues.errors)
        if not self.pool_catalogues.evaluated:
            self.pools = []
        self.pool_by_name = {p.name: p for p in self.pools}
        self.launcher = Launcher(
            cluster=self.cluster,
            cloud=self.cloud,
            cluster_name=self.cluster_name,
            now=self.now,
            nodeclasses=snap.nodeclasses,
            catalogues=self.catalogues,
            instances=snap.instances,
            elapsed=lambda: self.clock() - self.started,
            pool_catalogues=self.pool_catalogues.for_launch(self.pools, self.catalogues),
            price_overlays=self.pool_catalogues.price_overlaid(),
        )
        self.creator = NodeClaimCreator(
            cluster=self.cluster,
            launcher=self.launcher,
            pools=self.pool_by_name,
            nodeclasses=snap.nodeclasses,
            pool_catalogues=self.pool_catalogues,
            out=self.out,
            now=self.now,
        )

    def launch_leftovers(self) -> None:
        """NodeClaims created but never launched (a pass that died half-way): adopt or launch them.

        One created less than :data:`~.lifecycle.INSTANCE_GONE_GRACE_SECONDS` ago with no instance found is left to
        a later pass: the pass that created it may have launched an instance EC2 does not describe yet (eventual
        consistency), and launching now would give the NodeClaim a second one. It still counts as in-flight
        capacity meanwhile."""
        kept: list[NodeClaim] = []
        for nc in self.claims:
            if nc.status.provider_id or nc.metadata.deletion_timestamp:
                kept.append(nc)
                continue
            created = from_rfc3339(nc.metadata.creation_timestamp)
            recent = created is not None and self.now - created < INSTANCE_GONE_GRACE_SECONDS
            if recent and self.launcher.adoptable(nc) is None:
                kept.append(nc)
                continue
            result = self.launcher.launch(nc)
            if result.nodeclaim is not None:
                kept.append(result.nodeclaim)
        self.claims = kept

    def scale_static(self) -> None:
        """Static NodePools (gate ``StaticCapacity``, :mod:`.static`): remove the excess NodeClaims, then create and
        launch the missing ones; both count in this pass's capacity (removed nodes' pods are provisioned for)."""
        if not self.options.static_capacity:
            return
        out = self.out
        pools = static_pools(self.snap.nodepools, self.catalogues, out.errors)
        decisions = decide_static(
            pools=pools, nodeclaims=self.claims, nodes=self.nodes, pods=self.snap.pods, now=self.now
        )
        removal = remove_static(
            cluster=self.cluster, queue=self.ports.queue, nodeclaims=self.claims, decisions=decisions, now=self.now
        )
        self.claims = removal.claims
        out.static_removed, out.static_decisions = removal.removed, decisions
        out.errors.extend(removal.errors)
        self.pool_by_name.update((pool.name, pool) for pool in pools)
        plans = launch_plans(pools=pools, decisions=decisions, catalogues=self.catalogues, errors=out.errors)
        self.creator.taken = {nc.name for nc in self.claims}
        for launched in self.creator.launch_all(plans):
            if launched is not None and launched.nodeclaim is not None and launched.result is not None:
                self.claims.append(launched.nodeclaim)
                self.snap.instances[launched.result.instance_id] = as_instance(launched.result)  # priced with the rest
                out.new_cost_per_hour += launched.result.price
        self.leaving = leaving_node_names(self.nodes, nodeclaims=self.claims) | self.leaving

    def provision(self) -> None:
        """(a), (c), (d): solve pending pods, create and launch NodeClaims, re-solve after capacity errors."""
        snap, out = self.snap, self.out
        self.pending = pending_pods(snap.pods)
        out.pods_pending = len(self.pending)
        ages = [self.now - p.creation_timestamp for p in self.pending if p.creation_timestamp > 0]
        out.oldest_pending_age_seconds = max(0.0, max(ages, default=0.0))
        moving = reschedulable_pods(snap.pods, leaving=self.leaving)
        out.pods_rescheduled = len(moving)
        capacity = existing_capacity(
            nodes=self.nodes,
            pods=snap.pods,
            nodeclaims=self.claims,
            instances=snap.instances,
            catalogue=self.merged,
            kept=self.options.kept_capacity,
        )
        # a node going away (its NodeClaim deleting, say) takes no new pods, as Karpenter's marked-for-deletion nodes
        self.existing = {n.name: n for n in capacity if n.name not in self.leaving}
        self.usage = nodepool_usage(self.claims)
        self.creator.taken = {nc.name for nc in self.claims}
        if not self.pools:
            for pod in self.pending:
                out.unschedulable[pod.key] = "no NodePool with a ready EC2NodeClass"
            return
        self._solve_all([*self.pending, *moving])

    def _solve_all(self, pods: list[Pod]) -> None:
        """Solve ``pods`` (pending, or moving off nodes going away) and launch, re-solving after capacity errors up
        to ``options.max_solve_attempts`` solves in the pass."""
        out = self.out
        pending = {p.key for p in self.pending}
        requirements, refused = self._volume_topology([p for p in pods if p.key not in pending])
        self.volume_requirements = {**self.volume_requirements, **requirements}
        out.unschedulable.update(refused)
        to_solve: list[Pod] = [p for p in pods if p.key not in refused]
        while to_solve:
            out.solve_attempts += 1
            retry = self._solve_once(to_solve)
            if not retry:
                break
            if out.solve_attempts >= self.options.max_solve_attempts:
                for pod in retry:
                    out.unschedulable[pod.key] = f"insufficient capacity after {out.solve_attempts} attempts"
                break
            to_solve = retry
        for pod, _ in self.nominated:
            out.unschedulable.pop(pod.key, None)

    def _volume_topology(
        self, moving: Sequence[Pod]
    ) -> tuple[dict[str, tuple[NodeSelectorRequirement, ...]], dict[str, str]]:
        """Node requirements of the pods' PersistentVolumeClaims, and the pods refused for their claims
        (:func:`~nodesmith.services.provisioning.capacity.volume_topology`). The storage objects are listed only
        when some pod to solve mounts a claim; when they cannot be read, such pods wait for a later
        pass rather than land in a zone their volumes are not in.
        """
        with_claims = [p for p in (*self.pending, *moving) if p.pvc_names]
        if not with_claims:
            return {}, {}
        try:
            context = self.cluster.volume_context()
        except KubernetesError as exc:
            self.out.errors.append(f"list PersistentVolumeClaims, PersistentVolumes and StorageClasses: {exc}")
            return {}, {p.key: f"cannot read its PersistentVolumeClaims: {exc}" for p in with_claims}
        return volume_topology(pending=self.pending, moving=moving, context=context)

    def _solve_once(self, pods: list[Pod]) -> list[Pod]:
        """One solve and its launches; returns the pods whose NodeClaim hit a capacity error."""
        out = self.out
        unavailable = self.launcher.unavailable
        own: dict[int, list[InstanceType]] = {}  # by catalogue identity: pools of one node class share a list
        per_pool: dict[str, list[InstanceType]] = {}
        for np in self.pools:
            catalogue = self.pool_catalogues.by_pool[np.name]
            if id(catalogue) not in own:
                own[id(catalogue)] = without_offerings(catalogue, unavailable)
            per_pool[np.name] = own[id(catalogue)]
        inp = SchedulingInput(
            pods=pods,
            nodepools=self.pools,
            instance_types=without_offerings(self.merged, unavailable),
            nodepool_instance_types=per_pool,
            existing_nodes=list(self.existing.values()),
            daemonsets=self.snap.daemonsets,
            nodepool_usage=self.usage,
            volume_requirements=self.volume_requirements,
            existing_bases=kept.bases if (kept := self.options.kept_capacity) is not None else None,
        )
        started = self.clock()
        result = self.solver(inp)
        out.scheduling_duration_seconds += self.clock() - started
        for node_name, placed in result.existing.items():
            node = self.existing.get(node_name)
            if node is not None:
                self.existing[node_name] = replace(node, pods=(*node.pods, *placed))
            out.pods_awaiting_capacity += len(placed)
        out.unschedulable.update(result.unschedulable)
        retry: list[Pod] = []
        for plan, launched in zip(result.nodeclaims, self.creator.launch_all(result.nodeclaims), strict=True):
            if launched is None:
                continue
            if launched.nodeclaim is not None and launched.result is not None:
                self._account(plan, launched.nodeclaim, launched.result)
            elif launched.capacity_error:
                retry.extend(plan.pods)
            else:
                for pod in plan.pods:
                    out.unschedulable[pod.key] = launched.message
        return retry

    def _account(self, plan: NodeClaimPlan, claim: NodeClaim, result: LaunchResult) -> None:
        node = inflight_node(claim, catalogue=self.merged, instance=as_instance(result))
        self.existing[claim.name] = replace(node, pods=plan.pods)
        _charge(self.usage, claim)
        self.out.pods_scheduled += len(plan.pods)
        self.out.new_cost_per_hour += result.price
        key = pool_key(nodeclaim=claim, capacity_type=result.capacity_type)
        self.new_cost_by[key] = self.new_cost_by.get(key, 0.0) + result.price
        self.nominated.extend((p, claim.name) for p in plan.pods)
        self.created.append(claim)

    def finish(self) -> ReconcileOutcome:
        """Tallies, cost, (g) the pod Events and the NodePools' status."""
        out, launcher = self.out, self.launcher
        out.launch_failures = dict(launcher.failures)
        out.offerings_marked_unavailable = len(launcher.unavailable)
        out.nodeclaims_launched = launcher.launched
        out.launched = list(launcher.launched_names)
        out.errors.extend(launcher.errors)
        out.launched_by = dict(launcher.launched_by)
        # a pass that did not list the fleet prices registered nodes by their labels
        labelled = () if self.snap.every_instance else self.nodes
        out.cost_by = cost_by_pool(self.claims, self.snap.instances, self.merged, nodes=labelled)
        for key, price in self.new_cost_by.items():
            out.cost_by[key] = out.cost_by.get(key, 0.0) + price
        out.cost_per_hour = sum(out.cost_by.values())
        out.utilization = nodepool_utilization(self.existing.values())
        post_pod_events(
            cluster=self.cluster,
            pending=self.pending,
            nominated=self.nominated,
            out=out,
            limit=self.options.max_pod_events,
        )
        update_nodepool_statuses(cluster=self.cluster, snap=self.snap, now=self.now, out=out)
        out.snapshot = self.left()
        return out

    def left(self) -> Snapshot:
        """The snapshot as this pass left the cluster (:attr:`ReconcileOutcome.snapshot`): Nodes it deleted left
        out, NodeClaims as it last wrote them, the ones it created and launched added."""
        kept = {nc.name for nc in self.created}
        claims = [*(nc for nc in self.claims if nc.name not in kept), *self.created]
        return replace(self.snap, nodes=list(self.nodes), nodeclaims=claims)


def _charge(usage: dict[str, Resources], nodeclaim: NodeClaim) -> None:
    for pool, held in nodepool_usage([nodeclaim]).items():
        acc = usage.setdefault(pool, {})
        for name, amount in held.items():
            acc[name] = acc.get(name, 0) + amount
