"""The termination use case, one round per delivery (``services/termination/service.py``), on fakes: what the
cluster and EC2 say now decides, never the request; a round drains as Karpenter's terminator does and says when
to come back; the node goes when it is empty, its deadline passed, or its instance is already gone; and the
finalizers come off last."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import interruption_fakes as fakes
import pytest

from nodesmith.core.termination import (
    REQUESTED_AT_ANNOTATION,
    TERMINATION_REASON_ANNOTATION,
    TERMINATION_TIMESTAMP_ANNOTATION,
    TerminationRequest,
)
from nodesmith.core.timestamps import to_rfc3339
from nodesmith.services.termination.service import Status, TerminationSettings, run_round

IID = "i-1234567890abcdef0"
SETTINGS = TerminationSettings(retry_initial_seconds=2.0, retry_max_seconds=10.0, heartbeat_seconds=60.0)


def world(*, pods: list[Any] | None = None, claim: Any = None, instance: Any = None) -> tuple[Any, Any]:
    clock = fakes.Clock()
    claim = (
        claim
        if claim is not None
        else fakes.make_claim(deleted_at=fakes.NOW - 10, annotations={TERMINATION_REASON_ANNOTATION: "Drifted"})
    )
    cluster = fakes.FakeCluster.of(clock, nodes=[fakes.make_node()], claims=[claim], pods=pods or [])
    cloud = fakes.FakeCloud([instance if instance is not None else fakes.make_instance()])
    return cluster, cloud


def round_(
    cluster: Any,
    cloud: Any,
    *,
    attempt: int = 1,
    request: TerminationRequest | None = None,
    settings: TerminationSettings = SETTINGS,
) -> Any:
    request = request or TerminationRequest(nodeclaim="default-abcde", instance_id=IID, reason="Drifted")
    return run_round(
        ports=fakes.ports(cluster, cloud), settings=settings, request=request, now=cluster.clock(), attempt=attempt
    )


def test_a_node_drains_tier_by_tier_then_goes_with_its_finalizers_last() -> None:
    pods = [
        fakes.make_pod("web", grace=10),
        fakes.make_pod("dns", priority_class_name="system-cluster-critical"),
        fakes.make_pod("cni", owner_kind="DaemonSet"),
    ]
    cluster, cloud = world(pods=pods)

    first = round_(cluster, cloud)
    # non-critical first; the critical pod waits for that tier; the DaemonSet pod stays
    assert first.status is Status.DRAINING and first.retry_after == 2
    assert cluster.args("evict") == ["default/web"]
    assert cluster.nodes["node-a"].unschedulable
    assert ("Pod", "web", "Evicted", "Normal") in cluster.events

    cluster.clock.now += 10  # web's grace period ends
    second = round_(cluster, cloud, attempt=2)
    assert second.status is Status.DRAINING and cluster.args("evict") == ["default/web", "default/dns"]

    cluster.clock.now += 30
    done = round_(cluster, cloud, attempt=3)
    assert done.status is Status.TERMINATED and done.reason == "Drifted" and done.instance_terminated
    assert cloud.instances[IID].state == "shutting-down"
    assert "node-a" not in cluster.nodes and "default-abcde" not in cluster.nodeclaims
    # the instance goes first, the NodeClaim's finalizer last
    order = [name for name, _ in cluster.calls if name in ("delete_node", "remove_nodeclaim_finalizer")]
    assert order == ["delete_node", "remove_nodeclaim_finalizer"]
    assert cluster.count("delete_nodeclaim") == 0  # it was being deleted already: no second DELETE
    assert done.seconds_since_deletion == pytest.approx(10 + 10 + 30)


def test_a_round_cordons_a_node_only_when_it_finds_it_uncordoned() -> None:
    # Given a node whose pod a budget holds, so every round finds it still draining
    cluster, cloud = world(pods=[fakes.make_pod("web")])
    cluster.pdb_blocks["default/web"] = -1

    round_(cluster, cloud)
    round_(cluster, cloud, attempt=2)
    # the first round tainted and cordoned it; the second read both and wrote nothing
    assert cluster.count("taint_and_cordon") == 1
    assert cluster.nodes["node-a"].unschedulable

    # an operator uncordons it (kubectl uncordon): the next round cordons it again
    cluster.nodes["node-a"] = replace(cluster.nodes["node-a"], unschedulable=False)
    round_(cluster, cloud, attempt=3)
    assert cluster.count("taint_and_cordon") == 2 and cluster.nodes["node-a"].unschedulable


def test_a_round_that_moved_the_drain_comes_back_soon_however_many_came_before() -> None:
    cluster, cloud = world(pods=[fakes.make_pod("a", grace=0), fakes.make_pod("b", grace=0)])
    cluster.pdb_blocks["default/b"] = 1  # its budget lets it go on the second ask
    assert round_(cluster, cloud, attempt=9).retry_after == 2  # a evicted: progress
    assert round_(cluster, cloud, attempt=10).retry_after == 2  # b evicted now
    assert round_(cluster, cloud, attempt=11).status is Status.TERMINATED


def test_a_pod_behind_a_budget_is_asked_again_after_a_growing_backoff() -> None:
    cluster, cloud = world(pods=[fakes.make_pod("web")])
    cluster.pdb_blocks["default/web"] = -1
    waits = [round_(cluster, cloud, attempt=n).retry_after for n in range(1, 7)]
    assert waits == [2, 4, 8, 10, 10, 10]
    assert cluster.count("delete_pod") == 0 and "default/web" in cluster.pods
    assert cloud.count("terminate") == 0


def test_the_deadline_read_from_the_nodeclaim_forces_what_it_must_and_no_sooner() -> None:
    # Given a spot interruption's deadline 100 s away, and pods with 30 s and 120 s grace periods behind a budget
    claim = fakes.make_claim(
        deleted_at=fakes.NOW, annotations={TERMINATION_TIMESTAMP_ANNOTATION: to_rfc3339(fakes.NOW + 100)}
    )
    pods = [fakes.make_pod("short", grace=30), fakes.make_pod("long", grace=120)]
    cluster, cloud = world(pods=pods, claim=claim)
    cluster.pdb_blocks.update({"default/short": -1, "default/long": -1})

    first = round_(cluster, cloud)
    # the long one cannot finish its grace period by then: deleted now with what is left (100 s), and told so
    assert cluster.args("delete_pod") == [("default/long", 100)]
    assert ("Pod", "long", "Disrupted", "Normal") in cluster.events
    # the short one is asked through the Eviction API, and the next round comes back when it falls due (at 70 s)
    assert first.retry_after == 2 and first.drain is not None and first.drain.next_due == pytest.approx(fakes.NOW + 70)

    cluster.clock.now += 69
    round_(cluster, cloud, attempt=5)
    assert cluster.args("delete_pod") == [("default/long", 100)]  # 1 s early: still not forced
    cluster.clock.now += 2
    round_(cluster, cloud, attempt=6)
    assert cluster.args("delete_pod")[-1] == ("default/short", 29)


def test_a_termination_grace_period_bounds_the_drain_from_the_deletion() -> None:
    claim = fakes.make_claim(deleted_at=fakes.NOW - 3600, grace="1h")
    cluster, cloud = world(pods=[fakes.make_pod("web", grace=30)], claim=claim)
    cluster.pdb_blocks["default/web"] = -1
    out = round_(cluster, cloud)
    # the deadline (deletion + 1h) is now: the pod is deleted with Karpenter's last second of grace, and the node goes
    assert cluster.args("delete_pod") == [("default/web", 1)]
    assert out.status is Status.TERMINATED and out.missed_deadline
    assert cloud.instances[IID].state == "shutting-down"


def test_an_instance_ec2_already_reports_gone_is_not_drained() -> None:
    cluster, cloud = world(pods=[fakes.make_pod("web")], instance=fakes.make_instance(state="terminated"))
    out = round_(cluster, cloud)
    assert out.status is Status.TERMINATED and out.detail == "instance already gone" and not out.instance_terminated
    assert cluster.count("evict") == 0 and cloud.count("terminate") == 0
    assert "node-a" not in cluster.nodes and "default-abcde" not in cluster.nodeclaims


def test_a_nodeclaim_deleted_before_its_launch_just_goes() -> None:
    claim = fakes.make_claim(deleted_at=fakes.NOW, launched=False, node=None)
    cluster, cloud = world(claim=claim)
    out = round_(
        cluster, cloud, request=TerminationRequest(nodeclaim="default-abcde", instance_id="", reason="Deleted")
    )
    assert out.status is Status.TERMINATED and cloud.count("terminate") == 0
    assert "default-abcde" not in cluster.nodeclaims and "node-a" in cluster.nodes


@pytest.mark.parametrize(
    ("claim", "instance", "why"),
    [
        (None, None, "nodeclaim_gone"),
        (fakes.make_claim(), None, "not_deleting"),
        (fakes.make_claim(deleted_at=fakes.NOW, instance_id="i-0fedcba9876543210"), None, "instance_mismatch"),
        (
            fakes.make_claim(deleted_at=fakes.NOW),
            fakes.make_instance(tags={"kubernetes.io/cluster/demo": "shared", "karpenter.sh/nodepool": "default"}),
            "not_owned",
        ),
        (
            fakes.make_claim(deleted_at=fakes.NOW),
            fakes.make_instance(tags={"kubernetes.io/cluster/demo": "owned"}),
            "no_nodepool_tag",
        ),
    ],
    ids=["gone", "not-deleting", "other-instance", "shared", "managed-node-group"],
)
def test_a_request_the_cluster_does_not_back_does_nothing(claim: Any, instance: Any, why: str) -> None:
    clock = fakes.Clock()
    cluster = fakes.FakeCluster.of(
        clock, nodes=[fakes.make_node()], claims=[claim] if claim else [], pods=[fakes.make_pod("web")]
    )
    cloud = fakes.FakeCloud([instance or fakes.make_instance()])
    out = round_(cluster, cloud)
    assert out.status is Status.IGNORED and out.detail == why
    writes = {
        "taint_and_cordon",
        "evict",
        "delete_pod",
        "delete_node",
        "delete_nodeclaim",
        "annotate_nodeclaim",
        "remove_nodeclaim_finalizer",
        "remove_node_finalizer",
    }
    assert [c for c in cluster.calls if c[0] in writes] == [] and cloud.count("terminate") == 0


def test_a_nodeclaim_without_our_finalizer_is_left_to_whoever_holds_it() -> None:
    claim = fakes.make_claim(deleted_at=fakes.NOW)
    claim.metadata.finalizers = ["example.com/other"]
    cluster, cloud = world(claim=claim)
    assert round_(cluster, cloud).detail == "no_finalizer" and cloud.count("terminate") == 0


def test_a_long_drain_refreshes_its_request_and_says_what_holds_it_once_a_minute() -> None:
    claim = fakes.make_claim(deleted_at=fakes.NOW, annotations={REQUESTED_AT_ANNOTATION: to_rfc3339(fakes.NOW)})
    cluster, cloud = world(pods=[fakes.make_pod("web")], claim=claim)
    cluster.pdb_blocks["default/web"] = -1
    round_(cluster, cloud)
    cluster.clock.now += 30
    round_(cluster, cloud)
    assert cluster.count("annotate_nodeclaim") == 0 and "FailedDraining" not in cluster.reasons()
    cluster.clock.now += 31
    round_(cluster, cloud)
    assert cluster.args("annotate_nodeclaim") == [
        ("default-abcde", {REQUESTED_AT_ANNOTATION: to_rfc3339(cluster.clock())})
    ]
    assert cluster.reasons().count("FailedDraining") == 1


def test_a_second_request_after_the_node_went_finds_nothing_to_do() -> None:
    cluster, cloud = world()
    assert round_(cluster, cloud).status is Status.TERMINATED
    again = round_(cluster, cloud)
    assert again.status is Status.IGNORED and again.detail == "nodeclaim_gone"
    assert cloud.count("terminate") == 1


def test_a_node_registered_under_another_name_before_its_nodeclaim_knew_is_still_drained() -> None:
    claim = fakes.make_claim(deleted_at=fakes.NOW, node=None)
    clock = fakes.Clock()
    node = fakes.make_node("ip-10-0-0-1.custom", IID)
    cluster = fakes.FakeCluster.of(clock, nodes=[node], claims=[claim], pods=[fakes.make_pod("web", node=node.name)])
    cloud = fakes.FakeCloud([fakes.make_instance(dns="ip-10-0-0-1.ec2.internal")])
    out = round_(cluster, cloud)
    assert out.status is Status.DRAINING and out.node == "ip-10-0-0-1.custom"
    assert cluster.args("evict") == ["default/web"] and cloud.count("terminate") == 0
    # a registered NodeClaim's node is looked up by name only
    assert round_(*world(pods=[fakes.make_pod("web")])).node == "node-a"
