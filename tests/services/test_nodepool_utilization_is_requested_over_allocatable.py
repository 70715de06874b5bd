"""NodePool utilisation is the pods' requests over the allocatable of the NodePool's capacity, per
resource, from the scheduler's view after a pass: bound and nominated pods on registered nodes and
in-flight NodeClaims; nodes of no NodePool and pools without capacity report nothing."""

from __future__ import annotations

from nodesmith.core.model import Pod
from nodesmith.core.scheduling.types import ExistingNode
from nodesmith.services.provisioning.utilization import nodepool_utilization

GIB = 2**30


def pod(name: str, *, cpu: int, memory: int) -> Pod:
    return Pod(namespace="default", name=name, uid=name, requests={"cpu": cpu, "memory": memory, "pods": 1})


def node(name: str, pool: str | None, *, cpu: int, memory: int, pods: tuple[Pod, ...] = ()) -> ExistingNode:
    return ExistingNode(
        name=name, labels={}, taints=(), allocatable={"cpu": cpu, "memory": memory}, pods=pods, nodepool=pool
    )


def test_requests_over_allocatable_summed_over_the_pools_nodes() -> None:
    capacity = [
        node("a", "default", cpu=2000, memory=8 * GIB, pods=(pod("p1", cpu=1500, memory=2 * GIB),)),
        node(
            "b",
            "default",
            cpu=2000,
            memory=8 * GIB,
            pods=(pod("p2", cpu=500, memory=GIB), pod("p3", cpu=0, memory=GIB)),
        ),
        node("gpu-1", "gpu", cpu=8000, memory=32 * GIB),  # in flight, nothing nominated yet
        node("mng-1", None, cpu=4000, memory=16 * GIB, pods=(pod("p4", cpu=4000, memory=16 * GIB),)),
    ]
    assert nodepool_utilization(capacity) == {
        "default": {"cpu": 50.0, "memory": 25.0},
        "gpu": {"cpu": 0.0, "memory": 0.0},
    }


def test_a_pool_without_allocatable_reports_nothing() -> None:
    assert nodepool_utilization([node("empty", "default", cpu=0, memory=0)]) == {}
    assert nodepool_utilization([]) == {}
