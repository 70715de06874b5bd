"""The reconcile pass against in-memory ports: launch for pending pods, no double launch for pods
waiting on in-flight capacity, capacity-error fallback within one call, registration and
initialization, liveness, orphan and instance-gone garbage collection."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from reconcile_fakes import FakeCloud, FakeCluster, make_nodeclass, make_nodepool, make_pod, node_for

from nodesmith.core.errors import KubernetesError
from nodesmith.core.model import Pod, Taint
from nodesmith.core.ports import Instance
from nodesmith.core.scheduling import SchedulingInput, SchedulingResult, solve
from nodesmith.services.ports import Ports
from nodesmith.services.provisioning.reconcile import ReconcileOptions, ReconcileOutcome, reconcile

CLUSTER = "test"
World = tuple[FakeCluster, FakeCloud]


def run(cluster: FakeCluster, cloud: FakeCloud, now: float, *, packing: str = "nodesmith") -> ReconcileOutcome:
    cluster.now = cloud.now = now

    def solver(inp: SchedulingInput) -> SchedulingResult:
        return solve(replace(inp, packing=packing))  # type: ignore[arg-type]

    return reconcile(
        ports=Ports(cluster=cluster, cloud=cloud, cluster_name=CLUSTER),
        now=now,
        options=ReconcileOptions(solver=solver),
    )


@pytest.fixture
def world() -> World:
    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])
    cluster.pods = [make_pod(f"inflate-{i}") for i in range(3)]
    return cluster, FakeCloud()


def only_claim(cluster: FakeCluster):  # type: ignore[no-untyped-def]
    assert len(cluster.nodeclaims) == 1, list(cluster.nodeclaims)
    return next(iter(cluster.nodeclaims.values()))


def failed_launches(cluster: FakeCluster) -> list[str]:
    """NodeClaims deleted after their launch failed: gone at once, finalizer and all (no node to drain, no
    instance to terminate), none left deleting."""
    assert cluster.deleting() == []
    return sorted(cluster.deleted_nodeclaims)


def live_claim(cluster: FakeCluster):  # type: ignore[no-untyped-def]
    """The one NodeClaim not being deleted."""
    live = [nc for nc in cluster.nodeclaims.values() if nc.metadata.deletion_timestamp is None]
    assert len(live) == 1, [nc.name for nc in live]
    return live[0]


def test_pending_pods_get_one_nodeclaim_launched_with_karpenter_metadata(world: World) -> None:
    cluster, cloud = world
    out = run(cluster, cloud, 1000.0)

    assert (out.pods_pending, out.nodeclaims_created, out.nodeclaims_launched, out.pods_scheduled) == (3, 1, 1, 3)
    claim = only_claim(cluster)
    assert claim.name.startswith("default-") and len(claim.name) == len("default-") + 5
    assert claim.metadata.labels["karpenter.sh/nodepool"] == "default"
    assert claim.metadata.labels["team"] == "platform"
    assert claim.metadata.annotations["karpenter.sh/nodepool-hash-version"] == "nodesmith-v1"
    # both drift hashes are stamped, or NodePoolDrifted / NodeClassDrift could never fire
    assert claim.metadata.annotations["karpenter.sh/nodepool-hash"].isdigit()
    assert claim.metadata.annotations["karpenter.k8s.aws/ec2nodeclass-hash"].isdigit()
    assert claim.metadata.annotations["karpenter.k8s.aws/ec2nodeclass-hash-version"] == "nodesmith-v1"
    assert claim.metadata.owner_references[0].name == "default"
    # created with Karpenter's finalizer, so a NodeClaim deleted by anyone is drained before it goes
    assert claim.metadata.finalizers == ["karpenter.sh/termination"]
    types = next(r.values for r in claim.spec.requirements if r.key == "node.kubernetes.io/instance-type")
    assert types[0] == "c5.xlarge"  # 3 CPUs of requests do not fit a 2-vCPU type; cheapest that fits first
    assert claim.spec.resources.requests["cpu"] == "3"
    assert claim.is_true("Launched") and not claim.is_true("Registered")
    assert claim.status.provider_id.startswith("aws:///us-east-1a/i-")
    assert claim.status.allocatable["cpu"] == "3900m"
    # labelled with what was launched (as Karpenter's launch does)
    iid = claim.status.provider_id.rsplit("/", 1)[-1]
    assert {k: claim.metadata.labels.get(k) for k in ("node.kubernetes.io/instance-type", "topology.kubernetes.io/zone",
            "karpenter.sh/capacity-type")} == {
        "node.kubernetes.io/instance-type": "c5.xlarge", "topology.kubernetes.io/zone": "us-east-1a",
        "karpenter.sh/capacity-type": cloud.instances[iid].capacity_type}  # fmt: skip
    request = cloud.requests[0]
    assert request.tags["kubernetes.io/cluster/test"] == "owned"
    assert request.tags["karpenter.sh/nodeclaim"] == claim.name
    assert request.client_token and request.client_token == cloud.requests[0].client_token
    assert out.new_cost_per_hour == pytest.approx(0.17 * 0.3)
    assert out.cost_per_hour == pytest.approx(out.new_cost_per_hour)
    assert cluster.reasons("Pod").count("Nominated") == 3
    assert "Launched" in cluster.reasons("NodeClaim")
    assert out.unschedulable == {}


def test_same_inputs_give_the_same_nodeclaim_name(world: World) -> None:
    cluster, cloud = world
    run(cluster, cloud, 1000.0)
    other = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()], pods=list(cluster.pods))
    run(other, FakeCloud(), 1000.0)
    assert list(other.nodeclaims) == list(cluster.nodeclaims)


def test_pods_waiting_for_an_inflight_nodeclaim_do_not_launch_a_second_one(
    world: World,
) -> None:
    cluster, cloud = world
    run(cluster, cloud, 1000.0)

    out = run(cluster, cloud, 1060.0)  # pods still pending, the node has not registered yet

    assert out.nodeclaims_created == 0 and len(cloud.requests) == 1
    assert out.pods_awaiting_capacity == 3 and out.pods_pending == 3
    assert out.oldest_pending_age_seconds == pytest.approx(160.0)


def test_more_pods_than_the_inflight_nodeclaim_holds_launch_only_the_difference(
    world: World,
) -> None:
    cluster, cloud = world
    run(cluster, cloud, 1000.0)
    cluster.pods += [make_pod(f"late-{i}", cpu="1500m") for i in range(2)]

    out = run(cluster, cloud, 1060.0)

    # Largest pods first (Karpenter's queue order): the in-flight node (3.9 CPUs) takes both 1.5-CPU
    # pods, one new NodeClaim takes the three 1-CPU pods; every pending pod is placed exactly once.
    assert out.nodeclaims_created == 1
    assert (out.pods_awaiting_capacity, out.pods_scheduled) == (2, 3)


def test_spot_capacity_error_falls_back_to_on_demand_within_one_nodeclaim(world: World) -> None:
    cluster, cloud = world
    cloud.ice = {(it.name, o.zone, "spot") for it in cloud.types for o in it.offerings}

    # Karpenter's grouping: one c5.xlarge NodeClaim. Its spot CreateFleet fails everywhere; the same NodeClaim is
    # launched again on what is left (on-demand) in the same pass, before it would be given up.
    out = run(cluster, cloud, 1000.0, packing="karpenter")

    assert out.solve_attempts == 1
    assert out.launch_failures == {"InsufficientInstanceCapacity": 1}  # the spot CreateFleet
    assert (out.nodeclaims_created, out.nodeclaims_launched) == (1, 1)
    assert [sorted(r.capacity_types) for r in cloud.requests] == [["on-demand", "spot"], ["on-demand"]]
    claim = live_claim(cluster)
    assert failed_launches(cluster) == []
    instance = cloud.instances[claim.status.provider_id.rsplit("/", 1)[-1]]
    assert instance.capacity_type == "on-demand"
    assert out.unschedulable == {}
    assert out.offerings_marked_unavailable == len(cloud.marked) > 0  # the spot offerings its first answer named


def test_capacity_error_in_the_heavier_pool_falls_back_to_the_next_nodepool(
    world: World,
) -> None:
    cluster, cloud = world
    c5_only = [
        {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["c5"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
    ]
    cluster.nodepools = [make_nodepool("compute", requirements=c5_only, weight=50), make_nodepool("general")]
    cloud.ice = {
        (it.name, o.zone, o.capacity_type) for it in cloud.types if it.name.startswith("c5") for o in it.offerings
    }

    out = run(cluster, cloud, 1000.0, packing="karpenter")  # the failure count below is for one NodeClaim per pass

    claim = live_claim(cluster)
    assert claim.nodepool_name == "general"
    assert out.pods_scheduled == 3 and out.unschedulable == {}
    # c5.xlarge spot then on-demand (a NodeClaim), c5.large spot then on-demand (another): a failure per CreateFleet.
    assert out.launch_failures == {"InsufficientInstanceCapacity": 4}
    assert len(cloud.requests) == 5
    failed = failed_launches(cluster)
    assert len(failed) == 2 and all(name.startswith("compute-") for name in failed)


def test_capacity_errors_everywhere_leave_the_pods_unschedulable_after_bounded_attempts(
    world: World,
) -> None:
    cluster, cloud = world
    cloud.ice = {(it.name, o.zone, o.capacity_type) for it in cloud.types for o in it.offerings}

    out = run(cluster, cloud, 1000.0)

    assert cluster.nodeclaims == {} and len(failed_launches(cluster)) >= 1  # every NodeClaim created was deleted
    assert out.nodeclaims_launched == 0
    assert out.solve_attempts <= 6
    assert set(out.unschedulable) == {p.key for p in cluster.pods}
    assert cluster.reasons("Pod").count("FailedScheduling") == 3


def test_a_pod_no_type_can_hold_is_reported_with_a_failed_scheduling_event(
    world: World,
) -> None:
    cluster, cloud = world
    cluster.pods = [make_pod("huge", cpu="64")]

    out = run(cluster, cloud, 1000.0)

    assert out.nodeclaims_created == 0
    assert "default/huge" in out.unschedulable
    assert cluster.reasons("Pod") == ["FailedScheduling"]


def test_nodepool_limits_count_existing_nodeclaims(world: World) -> None:
    cluster, cloud = world
    cluster.nodepools = [make_nodepool(limits={"cpu": "5"})]
    run(cluster, cloud, 1000.0)  # 4 vCPU (c5.xlarge) used of 5
    cluster.pods += [make_pod("more", cpu="3")]

    out = run(cluster, cloud, 1010.0)

    assert out.nodeclaims_created == 0
    assert out.unschedulable and all("limits.cpu" in r for r in out.unschedulable.values())


def test_linking_registers_then_initializes_when_the_node_is_ready(world: World) -> None:
    cluster, cloud = world
    cluster.nodepools = [make_nodepool(startup_taints=[{"key": "example.com/agent", "effect": "NoSchedule"}])]
    run(cluster, cloud, 1000.0)
    claim = only_claim(cluster)
    instance = next(iter(cloud.instances.values()))
    agent = Taint(key="example.com/agent", effect="NoSchedule")
    cluster.nodes = [node_for(instance, claim, ready=True, taints=(agent,))]

    out = run(cluster, cloud, 1030.0)

    claim = only_claim(cluster)
    assert out.nodeclaims_registered == 1 and out.nodeclaims_initialized == 0
    assert claim.status.node_name == instance.private_dns_name and claim.is_true("Registered")
    assert not claim.is_true("Initialized")
    assert cluster.nodes[0].labels["karpenter.sh/registered"] == "true"
    # registration gives the Node Karpenter's finalizer, so a Node a user deletes is drained before it goes
    assert cluster.nodes[0].finalizers == ("karpenter.sh/termination",)
    assert out.nodeclaims_created == 0  # the registered node is the capacity the pods wait for

    cluster.nodes = [replace(cluster.nodes[0], taints=())]  # the agent removed its startup taint
    out = run(cluster, cloud, 1040.0)

    claim = only_claim(cluster)
    assert out.nodeclaims_initialized == 1 and claim.is_true("Initialized") and claim.is_true("Ready")
    assert cluster.nodes[0].labels["karpenter.sh/initialized"] == "true"


def test_a_node_that_is_not_ready_is_registered_but_not_initialized(world: World) -> None:
    cluster, cloud = world
    run(cluster, cloud, 1000.0)
    claim = only_claim(cluster)
    cluster.nodes = [node_for(next(iter(cloud.instances.values())), claim, ready=False)]

    out = run(cluster, cloud, 1010.0)

    assert (out.nodeclaims_registered, out.nodeclaims_initialized) == (1, 0)


def test_liveness_deletes_a_nodeclaim_that_never_registers_and_terminates_its_instance(
    world: World,
) -> None:
    cluster, cloud = world
    run(cluster, cloud, 1000.0)
    first = only_claim(cluster).name
    iid = next(iter(cloud.instances))

    out = run(cluster, cloud, 1000.0 + 899)
    assert out.nodeclaims_terminated == 0 and first in cluster.nodeclaims

    out = run(cluster, cloud, 1000.0 + 900)
    assert out.nodeclaims_terminated == 1 and first in cluster.deleted_nodeclaims
    assert iid in cloud.terminated
    assert out.nodeclaims_created == 1  # its pods are still pending: new capacity in the same pass


def test_liveness_deletes_a_nodeclaim_never_launched_within_five_minutes(world: World) -> None:
    cluster, cloud = world
    cluster.pods = []
    run(cluster, cloud, 1000.0)
    stale = _unlaunched_claim(cluster, cloud, created=1000.0)

    out = run(cluster, cloud, 1000.0 + 300)

    assert out.nodeclaims_terminated == 1 and stale in cluster.deleted_nodeclaims
    assert cloud.requests == []


def test_a_nodeclaim_left_unlaunched_by_a_dead_pass_is_launched_or_adopted(
    world: World,
) -> None:
    cluster, cloud = world
    cluster.pods = []
    name = _unlaunched_claim(cluster, cloud, created=1000.0)

    out = run(cluster, cloud, 1010.0)

    assert out.nodeclaims_launched == 1 and cluster.nodeclaims[name].is_true("Launched")
    assert len(cloud.requests) == 1

    # A claim whose instance was launched (tagged with its name) but whose status was never written.
    name2 = _unlaunched_claim(cluster, cloud, created=1020.0)
    cloud.instances["i-adopted"] = Instance(
        instance_id="i-adopted",
        instance_type="c5.large",
        zone="us-east-1b",
        capacity_type="spot",
        state="running",
        launch_time=1021.0,
        tags={"karpenter.sh/nodeclaim": name2},
    )
    out = run(cluster, cloud, 1030.0)

    assert len(cloud.requests) == 1  # no second CreateFleet
    assert cluster.nodeclaims[name2].status.provider_id == "aws:///us-east-1b/i-adopted"
    assert "i-adopted" not in cloud.terminated


def test_orphan_instances_are_terminated_after_the_grace_period(world: World) -> None:
    cluster, cloud = world
    cluster.pods = []
    tags = {"kubernetes.io/cluster/test": "owned", "karpenter.sh/nodepool": "default", "karpenter.sh/nodeclaim": "gone"}
    for iid, launched in (("i-old", 960.0), ("i-young", 990.0)):
        cloud.instances[iid] = Instance(iid, "c5.large", "us-east-1a", "spot", "running", launched, tags=tags)

    out = run(cluster, cloud, 1000.0)

    assert cloud.terminated == ["i-old"] and out.orphans_terminated == 1


def test_a_nodeclaim_whose_instance_is_gone_is_deleted_with_its_node(world: World) -> None:
    cluster, cloud = world
    run(cluster, cloud, 1000.0)
    claim = only_claim(cluster)
    instance = next(iter(cloud.instances.values()))
    cluster.nodes = [node_for(instance, claim, ready=True)]
    run(cluster, cloud, 1010.0)
    cloud.instances[instance.instance_id] = replace(instance, state="terminated")  # e.g. spot reclaimed

    out = run(cluster, cloud, 1020.0)

    assert claim.name in cluster.deleted_nodeclaims and out.nodeclaims_terminated >= 1
    assert instance.private_dns_name in cluster.deleted_nodes
    assert out.nodeclaims_created == 1  # the pods get new capacity right away


def test_an_instance_missing_right_after_launch_is_given_time_to_appear(world: World) -> None:
    cluster, cloud = world
    run(cluster, cloud, 1000.0)
    claim = only_claim(cluster)
    del cloud.instances[claim.status.provider_id.rsplit("/", 1)[-1]]  # not visible yet (eventual consistency)

    out = run(cluster, cloud, 1005.0)
    assert out.nodeclaims_terminated == 0 and claim.name in cluster.nodeclaims

    out = run(cluster, cloud, 1010.0)
    assert out.nodeclaims_terminated == 1 and claim.name in cluster.deleted_nodeclaims


def test_bound_pods_on_registered_nodes_count_against_them(world: World) -> None:
    cluster, cloud = world
    run(cluster, cloud, 1000.0)
    claim = only_claim(cluster)
    instance = next(iter(cloud.instances.values()))
    node = node_for(instance, claim, ready=True)
    cluster.nodes = [node]
    cluster.pods = [replace(p, node_name=node.name, unschedulable=False, phase="Running") for p in cluster.pods]
    cluster.pods.append(make_pod("extra", cpu="1500m"))  # 3.9 allocatable - 3 used < 1.5

    out = run(cluster, cloud, 1010.0)

    assert out.nodeclaims_created == 1 and out.pods_scheduled == 1
    assert out.cost_per_hour == pytest.approx(0.17 * 0.3 + out.new_cost_per_hour)


def test_daemonset_and_terminating_pods_are_not_pending() -> None:
    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])
    cluster.pods = [
        make_pod("ds", owner_kind="DaemonSet"),
        make_pod("leaving", deletion_timestamp=999.0),
        make_pod("mirror", is_mirror=True),
    ]
    out = run(cluster, FakeCloud(), 1000.0)
    assert out.pods_pending == 0 and out.nodeclaims_created == 0


def test_a_missing_nodeclass_is_reported_and_nothing_launches() -> None:
    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[], pods=[make_pod("p")])
    cloud = FakeCloud()
    out = run(cluster, cloud, 1000.0)
    assert cloud.requests == [] and out.errors
    assert out.unschedulable == {"default/p": "no NodePool with a ready EC2NodeClass"}


def _unlaunched_claim(cluster: FakeCluster, cloud: FakeCloud, *, created: float) -> str:
    """Create a NodeClaim through the cluster as a pass would, without launching it."""
    from nodesmith.core.scheduling import SchedulingInput, solve
    from nodesmith.services.provisioning.nodeclaims import build_nodeclaim

    pool = cluster.nodepools[0]
    pod: Pod = make_pod(f"seed-{len(cluster.created)}")
    plan = solve(SchedulingInput(pods=[pod], nodepools=[pool], instance_types=cloud.instance_types())).nodeclaims[0]
    cluster.now = created
    return cluster.create_nodeclaim(
        nodeclaim=build_nodeclaim(plan=plan, nodepool=pool, name=f"default-seed{len(cluster.created)}")
    ).name


def test_a_nodeclaim_whose_labels_cannot_be_written_is_still_launched_and_the_failure_reported(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster, cloud = world

    def refuse(*, name: str, labels: Any) -> None:
        raise KubernetesError(f"patch nodeclaim {name}: 503", status=503)

    monkeypatch.setattr(cluster, "label_nodeclaim", refuse)
    out = run(cluster, cloud, 1000.0)

    claim = only_claim(cluster)
    assert out.nodeclaims_launched == 1 and claim.is_true("Launched")
    assert "topology.kubernetes.io/zone" not in claim.metadata.labels
    assert [e for e in out.errors if "label launched NodeClaim" in e and "503" in e]
