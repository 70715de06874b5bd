"""handle_interruption against fake ports: cordon, taint, events, drain with PDB retries, do-not-disrupt,
foreign instances, duplicates, and removal of what will not come back."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from nodesmith.core.drain import DISRUPTED_TAINT
from nodesmith.core.errors import KubernetesError
from nodesmith.core.interruption import InterruptionMessage, MessageKind, parse_message
from nodesmith.services.drain import backoff_seconds, drain_node
from nodesmith.services.interrupt import InstanceStatus, handle_interruption

if TYPE_CHECKING:
    from types import ModuleType

EVENTS = Path(__file__).resolve().parents[1] / "events"


def load_fakes() -> ModuleType:
    name = "nodesmith_tests_interruption_fakes"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("interruption_fakes.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


fakes = load_fakes()
OURS = "i-1234567890abcdef0"


def message(name: str) -> InterruptionMessage:
    return parse_message((EVENTS / name).read_text())


def world(*, pods: list[Any] | None = None, instance: Any = None, **cluster_kwargs: Any) -> tuple[Any, Any, Any]:
    clock = fakes.FakeClock()
    cluster = fakes.FakeCluster(clock=clock, nodes=[fakes.make_node()], pods=pods or [], **cluster_kwargs)
    cluster.nodeclaims.add("default-abcde")
    cloud = fakes.FakeCloud([instance or fakes.make_instance()])
    return clock, cluster, cloud


def run(msg: InterruptionMessage, clock: Any, cluster: Any, cloud: Any, **kwargs: Any) -> Any:
    params: dict[str, Any] = {
        "cluster_name": fakes.CLUSTER,
        "rebalance_action": "cordon",
        "now": clock.wall(),
        "drain_budget_seconds": 60.0,
    }
    params.update(kwargs)
    return handle_interruption(message=msg, cluster=cluster, cloud=cloud, sleep=clock.sleep, clock=clock, **params)


def standard_pods() -> list[Any]:
    return [
        fakes.make_pod("web-1"),
        fakes.make_pod("web-2"),
        fakes.make_pod("coredns", namespace="kube-system", priority_class_name="system-cluster-critical"),
        fakes.make_pod("aws-node", namespace="kube-system", owner_kind="DaemonSet"),
        fakes.make_pod("static", namespace="kube-system", owner_kind="Node", is_mirror=True),
    ]


def test_spot_warning_taints_cordons_evicts_in_tiers_then_removes_the_instance() -> None:
    clock, cluster, cloud = world(pods=standard_pods())
    outcome = run(message("spot_interruption_warning.json"), clock, cluster, cloud)

    node = cluster.nodes.get("node-a")
    assert node is None  # removed after the drain
    assert cluster.args("taint_and_cordon") == ["node-a"]
    assert cluster.args("evict") == ["default/web-1", "default/web-2", "kube-system/coredns"]
    assert ("Node", "node-a", "SpotInterrupted", "Warning") in cluster.events
    assert ("Node", "node-a", "TerminatingOnInterruption", "Warning") in cluster.events
    assert ("terminate", (OURS,)) in cloud.calls
    assert cluster.args("delete_nodeclaim") == ["default-abcde"]

    [inst] = outcome.instances
    assert inst.status is InstanceStatus.REMOVED
    assert inst.cordoned and inst.instance_terminated and inst.node_deleted and inst.nodeclaim_deleted
    assert inst.drain is not None and inst.drain.complete
    assert inst.drain.evicted == 3
    assert inst.drain.skipped == 2  # DaemonSet and mirror pods left alone
    assert (inst.interrupted_offering.instance_type, inst.interrupted_offering.zone) == ("m5.large", "us-west-2a")
    assert outcome.nodes_cordoned == 1 and outcome.pods_evicted == 3 and not outcome.needs_retry


def test_the_node_is_tainted_before_any_pod_is_evicted() -> None:
    clock, cluster, cloud = world(pods=[fakes.make_pod("web-1")])
    run(message("spot_interruption_warning.json"), clock, cluster, cloud)
    order = [name for name, _ in cluster.calls if name in ("taint_and_cordon", "evict")]
    assert order[0] == "taint_and_cordon"


def test_pdb_refusals_are_retried_with_doubling_backoff_until_the_eviction_succeeds() -> None:
    clock, cluster, cloud = world(pods=[fakes.make_pod("web-1")], pdb_blocks={"default/web-1": 3})
    outcome = run(message("spot_interruption_warning.json"), clock, cluster, cloud)

    [inst] = outcome.instances
    assert cluster.args("evict") == ["default/web-1"] * 4
    assert inst.drain.blocked == 1 and inst.drain.blocked_responses == 3 and inst.drain.evicted == 1
    assert clock.sleeps[:3] == pytest.approx([0.1, 0.2, 0.4])
    assert inst.status is InstanceStatus.REMOVED


def test_backoff_doubles_from_100ms_and_is_capped_at_5s() -> None:
    assert [backoff_seconds(n) for n in (1, 2, 3, 4, 7, 20)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 5.0, 5.0])


def test_a_pdb_that_never_allows_leaves_the_drain_incomplete_within_the_budget_and_asks_for_a_retry() -> None:
    clock, cluster, cloud = world(pods=[fakes.make_pod("web-1")], pdb_blocks={"default/web-1": -1})
    outcome = run(message("rebalance_recommendation.json"), clock, cluster, cloud, rebalance_action="drain",
                  drain_budget_seconds=30.0)  # fmt: skip
    [inst] = outcome.instances
    assert inst.status is InstanceStatus.DRAIN_INCOMPLETE
    assert outcome.needs_retry
    assert inst.drain.blocked_pods == ("default/web-1",)
    assert clock.t - clock.t0 <= 30.0 + 1e-9
    assert max(clock.sleeps) <= 5.0 + 1e-9
    assert "budget" in inst.drain.reason
    assert all(c[0] != "terminate" for c in cloud.calls)


def test_do_not_disrupt_pod_is_never_evicted_and_is_force_deleted_only_when_the_deadline_requires() -> None:
    guarded = fakes.make_pod("batch", annotations={"karpenter.sh/do-not-disrupt": "true"}, grace=30)
    clock, cluster, cloud = world(pods=[guarded, fakes.make_pod("web-1", grace=5)])
    outcome = run(message("spot_interruption_warning.json"), clock, cluster, cloud, drain_budget_seconds=200.0)

    assert "default/batch" not in cluster.args("evict")
    [(key, grace)] = cluster.args("delete_pod")
    assert key == "default/batch"
    deadline = fakes.EVENT_TIME + 120
    # deleted no earlier than deadline - grace, with the grace clamped to what is left
    [deleted_at] = cluster.walls("delete_pod")
    assert deadline - 30 <= deleted_at <= deadline - 29
    assert grace == min(30, int(deadline - deleted_at))
    [inst] = outcome.instances
    assert inst.drain.force_deleted == 1 and inst.status is InstanceStatus.REMOVED


def test_do_not_disrupt_pod_blocks_a_drain_without_deadline() -> None:
    guarded = fakes.make_pod("batch", annotations={"karpenter.sh/do-not-disrupt": "true"})
    clock, cluster, cloud = world(pods=[guarded])
    outcome = run(message("rebalance_recommendation.json"), clock, cluster, cloud, rebalance_action="drain",
                  drain_budget_seconds=10.0)  # fmt: skip
    [inst] = outcome.instances
    assert inst.status is InstanceStatus.DRAIN_INCOMPLETE
    assert inst.drain.waiting_pods == ("default/batch",)
    assert cluster.args("evict") == [] and cluster.args("delete_pod") == []


def test_foreign_instance_is_ignored_without_touching_the_cluster() -> None:
    clock, cluster, cloud = world(pods=standard_pods(), instance=fakes.make_instance(ours=False))
    outcome = run(message("spot_interruption_warning.json"), clock, cluster, cloud)
    assert [i.status for i in outcome.instances] == [InstanceStatus.FOREIGN]
    assert outcome.ignored and outcome.ignore_reason == "foreign"
    assert cluster.calls == []


def test_duplicate_event_is_harmless() -> None:
    clock, cluster, cloud = world(pods=standard_pods())
    first = run(message("spot_interruption_warning.json"), clock, cluster, cloud)
    second = run(message("spot_interruption_warning.json"), clock, cluster, cloud)
    assert first.instances[0].status is InstanceStatus.REMOVED
    assert second.instances[0].status is InstanceStatus.REMOVED
    assert second.instances[0].detail == "nodeclaim deleted"  # nothing else left to do
    assert [c for c in cloud.calls if c[0] == "terminate"] == [("terminate", (OURS,))]
    assert cluster.count("evict") == 3


def test_redelivered_message_resumes_the_drain_without_evicting_twice() -> None:
    slow = fakes.make_pod("slow", grace=100)
    clock, cluster, cloud = world(pods=[slow])
    msg = message("state_change_stopping.json")
    first = run(msg, clock, cluster, cloud, drain_budget_seconds=20.0)
    assert first.needs_retry and cluster.nodes["node-a"].taints == (DISRUPTED_TAINT,)
    second = run(msg, clock, cluster, cloud, now=clock.wall(), drain_budget_seconds=200.0)
    assert not second.needs_retry
    assert cluster.args("evict") == ["default/slow"]
    assert second.instances[0].status is InstanceStatus.REMOVED


def test_terminated_instance_has_its_node_and_nodeclaim_removed_without_a_drain() -> None:
    clock, cluster, cloud = world(pods=standard_pods(), instance=fakes.make_instance(state="terminated"))
    outcome = run(message("state_change_terminated.json"), clock, cluster, cloud)
    [inst] = outcome.instances
    assert inst.status is InstanceStatus.REMOVED
    assert inst.node_deleted and inst.nodeclaim_deleted and not inst.instance_terminated
    assert cluster.count("evict") == 0
    assert ("Node", "node-a", "InstanceTerminating", "Warning") in cluster.events


def test_terminated_instance_whose_node_is_gone_still_loses_its_nodeclaim() -> None:
    clock, cluster, cloud = world(instance=fakes.make_instance(state="terminated"))
    cluster.nodes.clear()
    outcome = run(message("state_change_terminated.json"), clock, cluster, cloud)
    assert outcome.instances[0].status is InstanceStatus.REMOVED
    assert cluster.args("delete_nodeclaim") == ["default-abcde"]
    assert ("NodeClaim", "default-abcde", "InstanceTerminating", "Warning") in cluster.events


def test_instance_not_launched_by_nodesmith_is_drained_but_left_to_its_owner() -> None:
    clock, cluster, cloud = world(pods=[fakes.make_pod("web-1")], instance=fakes.make_instance(launched_by_us=False))
    outcome = run(message("spot_interruption_warning.json"), clock, cluster, cloud)
    [inst] = outcome.instances
    assert inst.status is InstanceStatus.DRAINED
    assert all(c[0] != "terminate" for c in cloud.calls)
    assert cluster.count("delete_node") == 0


@pytest.mark.parametrize(
    ("setting", "status", "cordons", "events"),
    [
        ("ignore", InstanceStatus.IGNORED, 0, []),
        ("event", InstanceStatus.EVENT_ONLY, 0, ["SpotRebalanceRecommendation"]),
        ("cordon", InstanceStatus.CORDONED, 1, ["SpotRebalanceRecommendation"]),
    ],
)
def test_rebalance_recommendation_follows_the_setting(
    setting: Any, status: Any, cordons: int, events: list[str]
) -> None:
    clock, cluster, cloud = world(pods=standard_pods())
    outcome = run(message("rebalance_recommendation.json"), clock, cluster, cloud, rebalance_action=setting)
    assert [i.status for i in outcome.instances] == [status]
    assert cluster.count("taint_and_cordon") == cordons
    assert [e[2] for e in cluster.events] == events
    assert cluster.count("evict") == 0 and all(c[0] != "terminate" for c in cloud.calls)


def test_rebalance_drain_never_terminates_the_instance() -> None:
    clock, cluster, cloud = world(pods=[fakes.make_pod("web-1")])
    outcome = run(message("rebalance_recommendation.json"), clock, cluster, cloud, rebalance_action="drain")
    assert outcome.instances[0].status is InstanceStatus.DRAINED
    assert all(c[0] != "terminate" for c in cloud.calls) and "node-a" in cluster.nodes


def test_unknown_instance_with_no_node_is_ignored() -> None:
    clock, cluster, cloud = world()
    cloud.instances.clear()
    cluster.nodes.clear()
    outcome = run(message("spot_interruption_warning.json"), clock, cluster, cloud)
    assert [i.status for i in outcome.instances] == [InstanceStatus.UNKNOWN_INSTANCE]
    assert cluster.count("taint_and_cordon") == 0


def test_node_of_an_instance_ec2_has_forgotten_is_removed() -> None:
    clock, cluster, cloud = world(pods=[fakes.make_pod("web-1")])
    cloud.instances.clear()  # terminated long ago: DescribeInstances no longer lists it
    outcome = run(message("state_change_terminated.json"), clock, cluster, cloud)
    assert [i.status for i in outcome.instances] == [InstanceStatus.REMOVED]
    assert cluster.args("delete_node") == ["node-a"] and cluster.count("evict") == 0


def test_scheduled_change_handles_every_named_instance() -> None:
    clock = fakes.FakeClock()
    nodes = [fakes.make_node("node-1", "i-abcd1111"), fakes.make_node("node-2", "i-abcd2222")]
    pods = [fakes.make_pod("a", node="node-1"), fakes.make_pod("b", node="node-2")]
    cluster = fakes.FakeCluster(clock=clock, nodes=nodes, instant_termination=True, pods=pods)
    cloud = fakes.FakeCloud(
        [fakes.make_instance("i-abcd1111", nodeclaim="nc-1"), fakes.make_instance("i-abcd2222", nodeclaim="nc-2")]
    )
    outcome = run(message("health_scheduled_change_ec2.json"), clock, cluster, cloud)
    assert [i.status for i in outcome.instances] == [InstanceStatus.REMOVED, InstanceStatus.REMOVED]
    assert sorted(e[1] for e in cluster.events if e[2] == "InstanceUnhealthy") == ["node-1", "node-2"]
    assert cluster.args("delete_nodeclaim") == ["nc-1", "nc-2"]


def test_transient_api_error_on_cordon_propagates_so_the_message_is_retried() -> None:
    clock, cluster, cloud = world(pods=standard_pods(), fail_nodes={"node-a"})
    with pytest.raises(KubernetesError):
        run(message("spot_interruption_warning.json"), clock, cluster, cloud)


def test_no_op_message_touches_nothing() -> None:
    clock, cluster, cloud = world(pods=standard_pods())
    outcome = run(message("state_change_running.json"), clock, cluster, cloud)
    assert outcome.kind is MessageKind.NO_OP and outcome.ignored and outcome.ignore_reason == "unhandled_state"
    assert cluster.calls == [] and cloud.calls == []


def test_drain_node_with_zero_budget_still_makes_one_eviction_round_and_returns_without_waiting() -> None:
    """A drain resumed by an invocation that spent its budget before reaching the node still evicts:
    under load at 1,000 nodes, drains that only listed and continued evicted nothing for 90 s."""
    clock, cluster, _ = world(pods=[fakes.make_pod("web-1"), fakes.make_pod("web-2")],
                              pdb_blocks={"default/web-2": -1})  # fmt: skip
    result = drain_node(cluster=cluster, node=cluster.nodes["node-a"], now=clock.wall(), deadline=None,
                        budget_seconds=0.0, sleep=clock.sleep, clock=clock)  # fmt: skip
    assert not result.complete and result.evicted == 1 and result.blocked == 1
    assert cluster.count("evict") == 2 and sum(clock.sleeps) == 0
