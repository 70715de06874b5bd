"""What counts as a pod's requests (init containers, overhead, GPUs), which pods are provisioned for,
and the reasons given when a pod fits nowhere."""

from __future__ import annotations

from typing import Any

from scheduling_support import make_input, make_node, make_nodepool, make_pod, make_type

from nodesmith.core.objects import pod_from_dict
from nodesmith.core.scheduling import solve

TYPES = [make_type("m5.large", 2, 8, pods=29, od_price=0.096), make_type("m5.xlarge", 4, 16, od_price=0.192)]


def pending_pod_json(*, init_cpu: str, app_cpu: str, overhead_cpu: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "initContainers": [{"name": "migrate", "resources": {"requests": {"cpu": init_cpu, "memory": "128Mi"}}}],
        "containers": [
            {"name": "app", "resources": {"requests": {"cpu": app_cpu, "memory": "256Mi"}}},
            {"name": "sidecar", "resources": {"requests": {"cpu": app_cpu, "memory": "256Mi"}}},
        ],
    }
    if overhead_cpu:
        spec["overhead"] = {"cpu": overhead_cpu}
    return {
        "metadata": {"name": "web", "namespace": "shop", "uid": "u-web"},
        "spec": spec,
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }


def test_the_largest_init_container_decides_when_it_exceeds_the_app_containers() -> None:
    pod = pod_from_dict(pending_pod_json(init_cpu="3", app_cpu="500m"))
    (nc,) = solve(make_input([pod], types=TYPES)).nodeclaims
    assert nc.requests["cpu"] == 3000
    assert [t.name for t in nc.instance_types] == ["m5.xlarge"]  # 3 cpu does not fit an m5.large (1.93 allocatable)


def test_pod_overhead_is_added_to_the_requests() -> None:
    pod = pod_from_dict(pending_pod_json(init_cpu="100m", app_cpu="900m", overhead_cpu="250m"))
    (nc,) = solve(make_input([pod], types=TYPES)).nodeclaims
    assert nc.requests["cpu"] == 2050
    assert [t.name for t in nc.instance_types] == ["m5.xlarge"]


def test_gpu_pods_only_get_gpu_instance_types() -> None:
    gpu_pod = make_pod(cpu="1", extra={"nvidia.com/gpu": 1})
    (nc,) = solve(make_input([gpu_pod])).nodeclaims
    assert {t.name for t in nc.instance_types} == {"g4dn.xlarge", "g4dn.12xlarge"}
    two = make_pod(cpu="1", extra={"nvidia.com/gpu": 2})
    (nc,) = solve(make_input([two])).nodeclaims
    assert [t.name for t in nc.instance_types] == ["g4dn.12xlarge"]


def test_gpu_pods_do_not_join_a_nodeclaim_without_gpus() -> None:
    cpu_pod, gpu_pod = make_pod(cpu="2"), make_pod(cpu="1", extra={"nvidia.com/gpu": 1})
    result = solve(make_input([cpu_pod, gpu_pod]))
    for nc in result.nodeclaims:
        if any(p.name == gpu_pod.name for p in nc.pods):
            assert all(t.capacity.get("nvidia.com/gpu", 0) >= 1 for t in nc.instance_types)


def test_only_unschedulable_unbound_non_daemonset_non_mirror_pods_are_provisioned_for() -> None:
    ignored = [
        make_pod("bound", node_name="n1"),
        make_pod("scheduler-has-not-tried", unschedulable=False),
        make_pod("daemon", owner_kind="DaemonSet"),
        make_pod("mirror", is_mirror=True),
        make_pod("static", owner_kind="Node"),
        make_pod("preempting", nominated_node_name="n2"),
    ]
    result = solve(make_input([*ignored, make_pod("real")]))
    assert [p.name for nc in result.nodeclaims for p in nc.pods] == ["real"]
    assert result.unschedulable == {}


def test_reason_names_every_nodepool_and_what_ruled_it_out() -> None:
    pools = [
        make_nodepool("default", requirements=[{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]),
        make_nodepool("gpu", taints=[{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}], weight=10),
    ]
    pod = make_pod(cpu="64")
    result = solve(make_input([pod], nodepools=pools))
    assert result.unschedulable[pod.key] == (
        'nodepool "gpu": pod does not tolerate taint nvidia.com/gpu=true:NoSchedule; '
        'nodepool "default": no instance type has 64 cpu allocatable (largest allows 47.81)'
    )


def test_reason_for_memory_and_for_requirements_and_offerings() -> None:
    huge = make_pod(cpu="1", memory="1000Gi")
    assert (
        "no instance type has 1000Gi memory allocatable (largest allows"
        in solve(make_input([huge])).unschedulable[huge.key]
    )
    arm_gpu = make_pod(node_selector={"kubernetes.io/arch": "arm64"}, extra={"nvidia.com/gpu": 1})
    assert (
        "no instance type satisfying kubernetes.io/arch In [arm64] has 1 nvidia.com/gpu allocatable (largest allows 0)"
        in solve(make_input([arm_gpu])).unschedulable[arm_gpu.key]
    )
    nowhere = make_pod(node_selector={"node.kubernetes.io/instance-type": "x9.huge"})
    reason = solve(make_input([nowhere])).unschedulable[nowhere.key]
    assert reason == 'nodepool "default": no instance type satisfies node.kubernetes.io/instance-type In [x9.huge]'
    gone = make_type("m5.large", 2, 8, unavailable=frozenset({("us-west-2a", "spot"), ("us-west-2a", "on-demand")}))
    zonal = make_pod(node_selector={"topology.kubernetes.io/zone": "us-west-2a"})
    reason = solve(make_input([zonal], types=[gone])).unschedulable[zonal.key]
    assert "no instance type has an available offering in zone topology.kubernetes.io/zone In [us-west-2a]" in reason


def test_a_nodepool_that_allows_no_instance_type_is_reported() -> None:
    pool = make_nodepool("arm", requirements=[{"key": "kubernetes.io/arch", "operator": "In", "values": ["s390x"]}])
    pod = make_pod()
    reason = solve(make_input([pod], nodepools=[pool])).unschedulable[pod.key]
    assert reason.startswith('nodepool "arm": requirements (') and "leave no instance type" in reason


def test_without_nodepools_pods_only_use_existing_nodes() -> None:
    pod = make_pod(cpu="8")
    result = solve(make_input([pod], nodepools=[], nodes=[make_node("small", cpu="2")]))
    assert result.unschedulable[pod.key] == (
        "no NodePool to provision from, and no existing node fits; "
        "existing nodes (1): 1 has too little cpu free (most 2, needs 8)"
    )
