"""Creating and launching the NodeClaims a reconcile pass planned, several at a time.

:class:`NodeClaimCreator` turns each scheduling plan (:class:`~nodesmith.core.scheduling.types.NodeClaimPlan`) into
a NodeClaim named after its NodePool, creates it through the Kubernetes API and launches it with the pass's
:class:`~nodesmith.services.provisioning.launch.Launcher`, as Karpenter's provisioner does in ``CreateNodeClaims``
(``[core]:pkg/controllers/provisioning/provisioner.go``).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from pydantic import ValidationError

from nodesmith.core.errors import ConflictError, KubernetesError
from nodesmith.core.ports import Instance
from nodesmith.services.breakdown import pool_key
from nodesmith.services.parallel import map_ordered
from nodesmith.services.provisioning.launch import LaunchOutcome
from nodesmith.services.provisioning.nodeclaims import build_nodeclaim, nodeclaim_name, plan_seed

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from nodesmith.core.api.ec2nodeclass import EC2NodeClass
    from nodesmith.core.api.nodepool import NodePool
    from nodesmith.core.ports import Cluster, LaunchResult
    from nodesmith.core.scheduling.types import NodeClaimPlan
    from nodesmith.services.provisioning.launch import Launcher
    from nodesmith.services.provisioning.outcome import ReconcileOutcome
    from nodesmith.services.provisioning.overlays import PoolCatalogues

__all__ = ["LAUNCH_WORKERS", "NodeClaimCreator", "as_instance", "viable_plan"]

LAUNCH_WORKERS = 16
"""NodeClaims of one pass created and launched at a time (Karpenter parallelizes the same step)."""


class NodeClaimCreator:
    """Create and launch the NodeClaims of one pass's plans.

    ``pools`` maps NodePool names to the NodePools plans may name (the pass adds static NodePools to it);
    ``nodeclasses`` the EC2NodeClasses by name; ``pool_catalogues`` gives the overlay annotations a NodeClaim
    carries. ``taken`` holds the NodeClaim names in use (set by the pass before each batch, grown by each
    creation). Tallies and errors go to ``out`` under :attr:`lock`, as launches run in parallel; ``now`` (epoch
    seconds) seeds the names.
    """

    def __init__(
        self,
        *,
        cluster: Cluster,
        launcher: Launcher,
        pools: Mapping[str, NodePool],
        nodeclasses: Mapping[str, EC2NodeClass],
        pool_catalogues: PoolCatalogues,
        out: ReconcileOutcome,
        now: float,
    ) -> None:
        self.cluster = cluster
        self.launcher = launcher
        self.pools = pools
        self.nodeclasses = nodeclasses
        self.pool_catalogues = pool_catalogues
        self.out = out
        self.now = now
        self.taken: set[str] = set()
        self.lock = threading.Lock()  # the pass's tallies, written by parallel launches

    def launch_all(self, plans: Sequence[NodeClaimPlan]) -> list[LaunchOutcome | None]:
        """:meth:`_create_and_launch` for every plan, :data:`LAUNCH_WORKERS` at a time, results in plan order.

        Karpenter's provisioner creates a pass's NodeClaims in parallel
        (``[core]:pkg/controllers/provisioning/provisioner.go``, ``CreateNodeClaims`` with
        ``workqueue.ParallelizeUntil``): one CreateFleet takes seconds, and in an interruption burst
        a dozen replacements launched one after another would take most of the two-minute notice.
        A plan whose NodePool is unknown, or whose NodeClaim could not be built or created, gives None (the
        reason is in ``out.errors``).
        """
        return map_ordered(
            lambda ip: self._create_and_launch(plan=ip[1], index=ip[0]),
            list(enumerate(plans)),
            workers=LAUNCH_WORKERS,
            name="launch",
        )

    def _create_and_launch(self, *, plan: NodeClaimPlan, index: int) -> LaunchOutcome | None:
        """Create the NodeClaim for ``plan`` and launch it; None when it could not even be created."""
        out = self.out
        pool = self.pools.get(plan.nodepool)
        if pool is None:
            return None
        with self.launcher.lock:
            viable = viable_plan(plan, set(self.launcher.unavailable))
        if not viable:
            # An earlier launch in this pass exhausted these offerings: re-solve without a NodeClaim.
            return LaunchOutcome(nodeclaim=None, capacity_error=True, message="offerings failed in this pass")
        seed = plan_seed(plan, now=self.now, index=index) + f"|{out.solve_attempts}"
        for _ in range(3):
            with self.lock:
                name = nodeclaim_name(nodepool=plan.nodepool, seed=seed, taken=self.taken)
                self.taken.add(name)
            try:
                draft = build_nodeclaim(
                    plan=plan,
                    nodepool=pool,
                    name=name,
                    nodeclass=self.nodeclasses.get(pool.spec.template.spec.node_class_ref.name),
                )
                draft.metadata.annotations.update(self.pool_catalogues.annotations(plan))
            except ValidationError as exc:
                with self.lock:
                    out.errors.append(f"NodePool {plan.nodepool}: cannot build a NodeClaim: {exc}")
                return None
            try:
                created = self.cluster.create_nodeclaim(nodeclaim=draft)
            except ConflictError:
                continue
            except KubernetesError as exc:
                with self.lock:
                    out.errors.append(f"create NodeClaim {name}: {exc}")
                return None
            launched = self.launcher.launch(created)
            kind = launched.result.capacity_type if launched.result is not None else plan.capacity_type
            key = pool_key(nodeclaim=created, capacity_type=kind)
            with self.lock:
                out.nodeclaims_created += 1
                out.created_by[key] = out.created_by.get(key, 0) + 1
            return launched
        with self.lock:
            out.errors.append(f"NodePool {plan.nodepool}: no free NodeClaim name after 3 tries")
        return None


def viable_plan(plan: NodeClaimPlan, unavailable: set[tuple[str, str, str]]) -> bool:
    """True when some offering of the plan has not failed in this pass."""
    for it in plan.instance_types:
        for o in it.offerings:
            if not o.available or (it.name, o.zone, o.capacity_type) in unavailable:
                continue
            if (not plan.zones or o.zone in plan.zones) and (
                not plan.capacity_types or o.capacity_type in plan.capacity_types
            ):
                return True
    return False


def as_instance(result: LaunchResult) -> Instance:
    """The instance a launch answered with, as the pass counts it until EC2 lists it (state ``pending``)."""
    return Instance(
        instance_id=result.instance_id,
        instance_type=result.instance_type,
        zone=result.zone,
        capacity_type=result.capacity_type,
        state="pending",
        launch_time=0.0,
        image_id=result.image_id,
    )
