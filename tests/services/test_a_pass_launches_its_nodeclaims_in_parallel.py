"""A reconcile pass creates and launches its NodeClaims in parallel, as Karpenter's provisioner does: one
CreateFleet takes seconds, and an interruption burst's replacements launched one after another would use
up most of the two-minute notice."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from reconcile_fakes import FakeCloud, FakeCluster, make_nodeclass, make_nodepool, make_pod

from nodesmith.core.errors import LaunchError
from nodesmith.services.ports import Ports
from nodesmith.services.provisioning.reconcile import reconcile

if TYPE_CHECKING:
    from nodesmith.core.ports import LaunchRequest, LaunchResult


@dataclass
class RendezvousCloud(FakeCloud):
    """CreateFleet that returns only once three launches are in flight at the same time."""

    barrier: threading.Barrier = field(default_factory=lambda: threading.Barrier(3, timeout=10))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def create(self, *, request: LaunchRequest) -> LaunchResult:
        try:
            self.barrier.wait()
        except threading.BrokenBarrierError as exc:
            raise LaunchError("launches ran one after another", code="Serial") from exc
        with self.lock:  # the fake's own bookkeeping is not thread-safe
            return super().create(request=request)


def test_three_nodeclaims_are_launched_at_the_same_time_and_all_accounted() -> None:
    cloud = RendezvousCloud()
    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])
    cluster.pods = [make_pod(f"big-{n}", cpu="3500m", memory="6Gi") for n in range(3)]  # one 4-vCPU node each

    out = reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=1000.0)

    assert out.launch_failures == {}  # a serial pass breaks the barrier: LaunchError "Serial"
    assert out.nodeclaims_created == 3 and out.nodeclaims_launched == 3
    assert len(set(out.launched)) == 3 and out.pods_scheduled == 3
    assert len({r.nodeclaim_name for r in cloud.requests}) == 3
