"""plan_drain sorts a node's pods like Karpenter's terminator: tiers, skips, do-not-disrupt, deadline force-deletes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodesmith.core.drain import plan_drain
from nodesmith.core.model import Node, Pod, Toleration

NODE = Node(name="node-a", provider_id="aws:///us-west-2a/i-1234567890abcdef0")
NOW = 10_000.0


def pod(name: str, **kwargs: Any) -> Pod:
    defaults: dict[str, Any] = {
        "namespace": "default",
        "uid": f"uid-{name}",
        "node_name": "node-a",
        "phase": "Running",
        "owner_kind": "ReplicaSet",
        "termination_grace_period_seconds": 30,
    }
    defaults.update(kwargs)
    return Pod(name=name, **defaults)


def names(pods: Any) -> list[str]:
    return [p.name for p in pods]


def test_non_critical_pods_are_evicted_before_critical_ones() -> None:
    plan = plan_drain(
        node=NODE,
        pods=[pod("coredns", priority_class_name="system-cluster-critical"), pod("web"), pod("api")],
        now=NOW,
        deadline=None,
    )
    assert names(plan.evict) == ["api", "web"]
    assert names(plan.later) == ["coredns"]
    assert not plan.drained


def test_critical_pods_wait_while_non_critical_ones_are_still_terminating() -> None:
    terminating_web = pod("web", deletion_timestamp=NOW + 20)
    critical = pod("kube-proxy-ish", priority_class_name="system-node-critical")
    plan = plan_drain(node=NODE, pods=[terminating_web, critical], now=NOW, deadline=None)
    assert plan.evict == ()
    assert names(plan.later) == ["kube-proxy-ish"]
    assert names(plan.terminating) == ["web"]

    plan = plan_drain(node=NODE, pods=[critical], now=NOW, deadline=None)
    assert names(plan.evict) == ["kube-proxy-ish"]


def test_a_terminating_critical_pod_does_not_hold_back_the_other_critical_pods() -> None:
    plan = plan_drain(
        node=NODE,
        pods=[
            pod("coredns-1", priority_class_name="system-cluster-critical", deletion_timestamp=NOW + 5),
            pod("coredns-2", priority_class_name="system-cluster-critical"),
        ],
        now=NOW,
        deadline=None,
    )
    assert names(plan.evict) == ["coredns-2"]


@pytest.mark.parametrize(
    ("the_pod", "reason"),
    [
        (pod("fluent-bit", owner_kind="DaemonSet"), "daemonset pod"),
        (pod("kube-apiserver-ish", owner_kind="Node", is_mirror=True), "mirror pod"),
        (pod("job-done", phase="Succeeded"), "terminal (phase Succeeded)"),
        (pod("job-failed", phase="Failed"), "terminal (phase Failed)"),
        (pod("zombie", deletion_timestamp=NOW - 61), "stuck terminating"),
        (pod("tolerant", tolerations=(Toleration(operator="Exists"),)), "tolerates karpenter.sh/disrupted"),
        (
            pod("tolerant-key", tolerations=(Toleration(key="karpenter.sh/disrupted", operator="Exists"),)),
            "tolerates karpenter.sh/disrupted",
        ),
    ],
)
def test_pods_the_drain_leaves_alone_are_skipped_with_a_reason(the_pod: Pod, reason: str) -> None:
    plan = plan_drain(node=NODE, pods=[the_pod], now=NOW, deadline=NOW + 100)
    assert [(s.pod.name, s.reason) for s in plan.skipped] == [(the_pod.name, reason)]
    assert plan.drained
    assert plan.remaining == 0


def test_recently_deleted_pods_are_waited_for_not_evicted_again() -> None:
    plan = plan_drain(node=NODE, pods=[pod("web", deletion_timestamp=NOW - 10)], now=NOW, deadline=None)
    assert names(plan.terminating) == ["web"]
    assert plan.evict == ()
    assert not plan.drained


def test_pods_of_other_nodes_are_ignored() -> None:
    plan = plan_drain(node=NODE, pods=[pod("elsewhere", node_name="node-b")], now=NOW, deadline=None)
    assert plan.drained
    assert plan.skipped == ()


def test_do_not_disrupt_pods_wait_and_block_the_drain_without_a_deadline() -> None:
    guarded = pod("batch", annotations={"karpenter.sh/do-not-disrupt": "true"})
    plan = plan_drain(node=NODE, pods=[guarded], now=NOW, deadline=None)
    assert [(w.pod.name, w.until) for w in plan.waiting] == [("batch", None)]
    assert plan.evict == ()
    assert plan.force_delete == ()
    assert not plan.drained


def test_do_not_disrupt_pods_are_force_deleted_when_their_grace_would_overrun_the_deadline() -> None:
    guarded = pod("batch", annotations={"karpenter.sh/do-not-disrupt": "true"}, termination_grace_period_seconds=30)
    deadline = NOW + 100
    early = plan_drain(node=NODE, pods=[guarded], now=NOW, deadline=deadline)
    assert [(w.pod.name, w.until) for w in early.waiting] == [("batch", deadline - 30)]

    late = plan_drain(node=NODE, pods=[guarded], now=deadline - 29.5, deadline=deadline)
    assert [(f.pod.name, f.grace_period_seconds) for f in late.force_delete] == [("batch", 29)]
    assert late.waiting == ()


def test_only_pods_whose_own_grace_overruns_the_deadline_are_force_deleted() -> None:
    deadline = NOW + 115
    fits = pod("fits", termination_grace_period_seconds=115)
    overruns = pod("slow", termination_grace_period_seconds=300)
    plan = plan_drain(node=NODE, pods=[fits, overruns], now=NOW, deadline=deadline)
    assert names(plan.evict) == ["fits"]
    assert [(f.pod.name, f.grace_period_seconds) for f in plan.force_delete] == [("slow", 115)]


def test_without_a_deadline_nothing_is_force_deleted() -> None:
    plan = plan_drain(node=NODE, pods=[pod("slow", termination_grace_period_seconds=3600)], now=NOW, deadline=None)
    assert names(plan.evict) == ["slow"]
    assert plan.force_delete == ()


def test_after_the_deadline_pods_are_deleted_with_a_second_of_grace_as_karpenter_does() -> None:
    plan = plan_drain(
        node=NODE, pods=[pod("late"), pod("none", termination_grace_period_seconds=0)], now=NOW + 1, deadline=NOW
    )
    assert sorted((f.pod.name, f.grace_period_seconds) for f in plan.force_delete) == [("late", 1), ("none", 0)]


def test_terminating_pods_that_would_outlive_the_deadline_are_deleted_again_with_a_shorter_grace() -> None:
    deadline = NOW + 40
    plan = plan_drain(node=NODE, pods=[pod("slow", deletion_timestamp=NOW + 300)], now=NOW, deadline=deadline)
    assert [(f.pod.name, f.grace_period_seconds) for f in plan.force_delete] == [("slow", 30)]
    assert plan.terminating == ()


def test_do_not_disrupt_duration_protects_only_until_it_expires() -> None:
    young = pod("young", annotations={"karpenter.sh/do-not-disrupt": "5m"}, start_time=NOW - 60)
    old = pod("old", annotations={"karpenter.sh/do-not-disrupt": "5m"}, start_time=NOW - 600)
    plan = plan_drain(node=NODE, pods=[young, old], now=NOW, deadline=None)
    assert [(w.pod.name, w.until) for w in plan.waiting] == [("young", NOW + 240)]
    assert names(plan.evict) == ["old"]


def test_do_not_disrupt_duration_counts_from_the_start_not_the_creation() -> None:
    late_start = pod(
        "late", annotations={"karpenter.sh/do-not-disrupt": "5m"}, creation_timestamp=NOW - 3600, start_time=NOW - 60
    )
    plan = plan_drain(node=NODE, pods=[late_start], now=NOW, deadline=None)
    assert [(w.pod.name, w.until) for w in plan.waiting] == [("late", NOW + 240)]


def test_an_invalid_do_not_disrupt_value_is_evicted_and_reported() -> None:
    odd = pod("odd", annotations={"karpenter.sh/do-not-disrupt": "forever"}, start_time=NOW - 60)
    plan = plan_drain(node=NODE, pods=[odd], now=NOW, deadline=None)
    assert names(plan.evict) == ["odd"] and plan.waiting == ()
    ((flagged, verdict),) = plan.invalid_annotations
    assert flagged.name == "odd" and verdict.value == "forever"


_pods = st.builds(
    pod,
    name=st.text(alphabet="abcdefgh", min_size=1, max_size=6),
    owner_kind=st.sampled_from(["ReplicaSet", "DaemonSet", "Node", None, "StatefulSet"]),
    phase=st.sampled_from(["Running", "Pending", "Succeeded", "Failed"]),
    priority_class_name=st.sampled_from(["", "system-cluster-critical", "system-node-critical", "high"]),
    termination_grace_period_seconds=st.integers(min_value=0, max_value=600),
    deletion_timestamp=st.none() | st.floats(min_value=NOW - 200, max_value=NOW + 600),
    annotations=st.sampled_from([{}, {"karpenter.sh/do-not-disrupt": "true"}, {"karpenter.sh/do-not-disrupt": "1m"}]),
    node_name=st.sampled_from(["node-a", "node-a", "node-b"]),
)


@settings(max_examples=200, deadline=None)
@given(
    pods=st.lists(_pods, max_size=12, unique_by=lambda p: p.name),
    deadline=st.none() | st.floats(min_value=NOW - 50, max_value=NOW + 300),
)
def test_every_pod_of_the_node_lands_in_exactly_one_bucket(pods: list[Pod], deadline: float | None) -> None:
    plan = plan_drain(node=NODE, pods=pods, now=NOW, deadline=deadline)
    buckets = [
        *names(plan.evict),
        *names(plan.later),
        *names(plan.terminating),
        *(f.pod.name for f in plan.force_delete),
        *(w.pod.name for w in plan.waiting),
        *(s.pod.name for s in plan.skipped),
    ]
    assert sorted(buckets) == sorted(p.name for p in pods if p.node_name == "node-a")
    assert all(0 <= f.grace_period_seconds <= f.pod.termination_grace_period_seconds for f in plan.force_delete)
    if plan.evict and plan.later:
        assert all(p.priority_class_name not in ("system-cluster-critical", "system-node-critical") for p in plan.evict)
