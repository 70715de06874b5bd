"""A reconcile pass through the real EC2 adapters against the embedded AWS, with its fault layer injecting what AWS
does under load or short of capacity (issue 36, "Faults survived"). The cluster is the in-memory fake of the other
service tests; every EC2 call goes over HTTP to moto through the fault layer, with the adapters' retry config.

* CreateFleet capacity errors for some overrides: the instance launches on another offering, and the pass and the
  provider's unavailable-offerings cache both learn the failed ones; for every override: the same NodeClaim is
  launched once more on what is left (on-demand) in the same pass; everywhere: the NodeClaim is given up, its pods
  reported, nothing left half-made.
* Throttling: a burst longer than botocore's default attempts is retried through; one that never ends fails the
  launch cleanly (reported by its code, no NodeClaim or instance left).
* DescribeInstances not seeing a fresh instance yet does not make garbage collection delete its NodeClaim or the
  next pass launch a second one, nor a termination finish without terminating it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest
from reconcile_fakes import FakeCluster, make_nodeclass, make_nodepool, make_pod

from nodesmith.adapters.aws.config import CatalogSettings, ClusterConfig, NodeLaunchSettings
from nodesmith.adapters.aws.provider import Ec2CloudProvider
from nodesmith.core.termination import TerminationRequest
from nodesmith.core.timestamps import from_rfc3339
from nodesmith.services.ports import Ports
from nodesmith.services.provisioning.capacity import to_rfc3339
from nodesmith.services.provisioning.reconcile import ReconcileOptions, ReconcileOutcome, reconcile
from nodesmith.services.termination.service import Status, TerminationSettings, run_round
from nodesmith.sim import aws as embedded_aws
from nodesmith.sim.aws_faults import FaultPlan, FleetFaults, fault_counts, set_faults

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from nodesmith.core.api.nodeclaim import NodeClaim

pytestmark = pytest.mark.slow

CLUSTER = "test"  # make_nodeclass selects resources tagged karpenter.sh/discovery=test, role KarpenterNodeRole-test
TYPES = ("m5.large", "c5.large", "m5.xlarge")


@pytest.fixture(scope="module")
def aws() -> Iterator[embedded_aws.EmbeddedAws]:
    running = embedded_aws.start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def world(
    aws: embedded_aws.EmbeddedAws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[FakeCluster, Ec2CloudProvider]]:
    # botocore's backoff and adaptive-rate sleeps are not what these tests check: retries go at once (their
    # number is unchanged)
    monkeypatch.setattr("botocore.retries.standard.ExponentialBackoff.delay_amount", lambda *_: 0.0)
    monkeypatch.setattr("botocore.retries.adaptive.ClientRateLimiter.on_sending_request", lambda *_, **__: None)
    aws.reset()
    seeded = embedded_aws.seed(cluster_name=CLUSTER)
    cloud = Ec2CloudProvider(
        region=aws.region,
        cluster=ClusterConfig(name=CLUSTER, endpoint="https://ABC.gr7.us-east-1.eks.amazonaws.com", ca="Y2EtYnVuZGxl"),
        launch=NodeLaunchSettings(node_role=seeded.node_role_arn, instance_profile=seeded.instance_profile),
        catalog=CatalogSettings(
            price_table=str(embedded_aws.write_price_table(path=tmp_path / "prices.json")),
            use_pricing_api=False,
            instance_type_names=TYPES,
        ),
    )
    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()], pods=[make_pod("inflate-0")])
    try:
        yield cluster, cloud
    finally:
        set_faults(aws, None)


def run(cluster: FakeCluster, cloud: Ec2CloudProvider, now: float) -> ReconcileOutcome:
    cluster.now = now
    return reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name=CLUSTER), now=now)


@dataclass(frozen=True)
class UnseenLaunch:
    """A pass at ``start`` (epoch seconds) launched ``claim`` while DescribeInstances does not show it yet."""

    cluster: FakeCluster
    cloud: Ec2CloudProvider
    start: float
    claim: NodeClaim

    @property
    def instance_id(self) -> str:
        return self.claim.status.provider_id.rsplit("/", 1)[-1]

    def deleted_by_user(self) -> tuple[Ports, TerminationRequest]:
        """``kubectl delete`` of the NodeClaim (kept by its finalizer), and the termination request that follows."""
        self.cluster.delete_nodeclaim(name=self.claim.name)
        request = TerminationRequest(nodeclaim=self.claim.name, instance_id=self.instance_id, reason="Deleted")
        return Ports(cluster=self.cluster, cloud=self.cloud, cluster_name=CLUSTER), request


@pytest.fixture
def unseen_launch(aws: embedded_aws.EmbeddedAws, world: tuple[FakeCluster, Ec2CloudProvider]) -> UnseenLaunch:
    """One NodeClaim launched by a pass, with EC2's DescribeInstances lagging 600 s behind its launches."""
    cluster, cloud = world
    set_faults(aws, FaultPlan(describe_lag_seconds=600))
    start = time.time()
    assert run(cluster, cloud, start).nodeclaims_launched == 1
    [claim] = cluster.nodeclaims.values()
    return UnseenLaunch(cluster=cluster, cloud=cloud, start=start, claim=claim)


def test_a_partial_fleet_launches_on_another_offering_and_marks_the_failed_ones(
    aws: embedded_aws.EmbeddedAws, world: tuple[FakeCluster, Ec2CloudProvider]
) -> None:
    cluster, cloud = world
    set_faults(aws, FaultPlan(seed=3, fleet=FleetFaults(rate=1.0, share=0.5), limits={"fleet_capacity": 1}))

    out = run(cluster, cloud, time.time())

    errored = fault_counts(aws).by_kind["fleet_override_errors"]
    assert errored >= 2  # half of the spot overrides (3 types x 3 zones)
    assert (out.nodeclaims_created, out.nodeclaims_launched, out.launch_failures) == (1, 1, {})
    # the pass learns the errors listed beside the instance, as the provider's cache does
    assert out.offerings_marked_unavailable == errored
    marked = {(t, z, c) for t in TYPES for z in ("us-east-1a", "us-east-1b", "us-east-1c") for c in ("spot",)}
    marked = {o for o in marked if cloud.unavailable.is_unavailable(*o)}
    assert len(marked) == errored
    [instance] = cloud.list_instances()
    assert (instance.instance_type, instance.zone, instance.capacity_type) not in marked


def test_a_fleet_that_launches_nothing_is_tried_again_for_the_same_nodeclaim_on_what_is_left(
    aws: embedded_aws.EmbeddedAws, world: tuple[FakeCluster, Ec2CloudProvider]
) -> None:
    cluster, cloud = world
    fleet = FleetFaults(rate=1.0, launch_nothing=1.0, codes=("InsufficientInstanceCapacity",))
    set_faults(aws, FaultPlan(fleet=fleet, limits={"fleet_capacity_total": 1}))

    out = run(cluster, cloud, time.time())

    assert (out.nodeclaims_created, out.nodeclaims_launched) == (1, 1)
    assert out.launch_failures == {"InsufficientInstanceCapacity": 1}  # the CreateFleet that launched nothing
    assert cluster.deleted_nodeclaims == [] and out.unschedulable == {}
    [instance] = cloud.list_instances()
    assert instance.capacity_type == "on-demand"  # every spot override failed: the retry left spot out
    assert cloud.unavailable.is_unavailable(instance.instance_type, instance.zone, "spot")
    assert fault_counts(aws).by_kind == {"fleet_capacity_total": 1, "fleet_override_errors": 9}


def test_capacity_errors_everywhere_give_the_nodeclaim_up_and_report_its_pods(
    aws: embedded_aws.EmbeddedAws, world: tuple[FakeCluster, Ec2CloudProvider]
) -> None:
    cluster, cloud = world
    set_faults(aws, FaultPlan(fleet=FleetFaults(rate=1.0, launch_nothing=1.0)))

    out = run(cluster, cloud, time.time())

    assert fault_counts(aws).by_kind["fleet_capacity_total"] == 2  # spot, then on-demand, for the one NodeClaim
    assert out.nodeclaims_launched == 0 and sum(out.launch_failures.values()) == 2  # one per CreateFleet
    assert cluster.nodeclaims == {} and cloud.list_instances() == []
    assert set(out.unschedulable) == {"default/inflate-0"}


def test_a_burst_of_throttles_longer_than_botocores_default_attempts_is_retried_through(
    aws: embedded_aws.EmbeddedAws, world: tuple[FakeCluster, Ec2CloudProvider]
) -> None:
    cluster, cloud = world
    set_faults(aws, FaultPlan(throttle={"ec2:CreateFleet": 1.0}, limits={"throttle": 6}))

    out = run(cluster, cloud, time.time())

    assert (out.nodeclaims_launched, out.launch_failures, out.errors) == (1, {}, [])
    assert fault_counts(aws).by_operation == {"throttle ec2:CreateFleet": 6}


def test_throttling_that_never_ends_fails_the_launch_cleanly(
    aws: embedded_aws.EmbeddedAws, world: tuple[FakeCluster, Ec2CloudProvider]
) -> None:
    cluster, cloud = world
    set_faults(aws, FaultPlan(throttle={"ec2:CreateFleet": 1.0}))

    out = run(cluster, cloud, time.time())

    attempts = fault_counts(aws).by_operation["throttle ec2:CreateFleet"]
    assert attempts == 9, attempts  # bounded: the first attempt and the adapters' 8 retries, then one report
    assert out.launch_failures == {"RequestLimitExceeded": 1}
    assert "RequestLimitExceeded" in out.unschedulable["default/inflate-0"]
    assert cluster.nodeclaims == {} and cloud.list_instances() == []


def test_throttles_and_server_errors_on_every_call_leave_the_pass_whole(
    aws: embedded_aws.EmbeddedAws, world: tuple[FakeCluster, Ec2CloudProvider]
) -> None:
    cluster, cloud = world
    set_faults(aws, FaultPlan(seed=36, throttle={"*": 0.2}, server_error={"*": 0.1}))

    out = run(cluster, cloud, time.time())

    assert (out.nodeclaims_launched, out.launch_failures, out.errors) == (1, {}, [])
    assert fault_counts(aws).total > 0


def test_a_fresh_instance_describe_does_not_see_yet_is_neither_collected_nor_launched_again(
    aws: embedded_aws.EmbeddedAws, unseen_launch: UnseenLaunch
) -> None:
    cluster, cloud, claim = unseen_launch.cluster, unseen_launch.cloud, unseen_launch.claim

    # within Karpenter's 10 s before an unlisted instance counts as gone
    second = run(cluster, cloud, unseen_launch.start + 5)

    assert fault_counts(aws).by_kind["describe_hidden"] >= 1  # the pass listed the fleet and did not see it
    assert cluster.nodeclaims.keys() == {claim.name} and cluster.deleted_nodeclaims == []
    assert second.nodeclaims_created == 0 and second.nodeclaims_terminated == 0
    set_faults(aws, None)
    assert [i.state for i in cloud.list_instances()] == ["running"]


def test_a_termination_right_after_launch_waits_for_ec2_to_describe_the_instance(
    aws: embedded_aws.EmbeddedAws, unseen_launch: UnseenLaunch
) -> None:
    cluster, cloud, claim = unseen_launch.cluster, unseen_launch.cloud, unseen_launch.claim
    ports, request = unseen_launch.deleted_by_user()  # moments after launch

    launched = claim.condition("Launched")
    launched_at = from_rfc3339(launched.last_transition_time if launched is not None else None)
    assert launched_at is not None and launched_at >= int(unseen_launch.start)  # when CreateFleet answered

    early = run_round(ports=ports, settings=TerminationSettings(), request=request, now=launched_at + 3, attempt=1)

    assert (early.status, early.retry_after) == (Status.DRAINING, 7)  # tried again once 10 s have passed
    assert claim.name in cluster.nodeclaims and fault_counts(aws).by_kind["describe_not_found"] == 1
    set_faults(aws, None)
    later = run_round(ports=ports, settings=TerminationSettings(), request=request, now=launched_at + 11, attempt=2)
    assert (later.status, later.instance_terminated) == (Status.TERMINATED, True)
    assert claim.name not in cluster.nodeclaims
    assert [i.state for i in cloud.list_instances()] in ([], ["shutting-down"])


def test_a_launch_that_answers_late_in_its_pass_is_stamped_when_it_answered(
    aws: embedded_aws.EmbeddedAws, world: tuple[FakeCluster, Ec2CloudProvider]
) -> None:
    cluster, cloud = world
    set_faults(aws, FaultPlan(describe_lag_seconds=600))
    start = time.time()
    ticks = iter([0.0])  # the pass's clock: it began at 0, and everything after (CreateFleet included) at 8 s
    slow = ReconcileOptions(clock=lambda: next(ticks, 8.0))
    cluster.now = start
    first = reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name=CLUSTER), now=start, options=slow)
    assert first.nodeclaims_launched == 1
    [claim] = cluster.nodeclaims.values()
    launched = next(c for c in claim.status.conditions if c.type == "Launched")
    assert launched.last_transition_time == to_rfc3339(start + 8)

    second = run(cluster, cloud, start + 12)  # 12 s after the pass began, 4 s after EC2 answered

    assert second.nodeclaims_terminated == 0 and cluster.deleted_nodeclaims == []
    assert claim.name in cluster.nodeclaims


def test_a_nodeclaim_whose_instance_ec2_still_does_not_show_goes_with_its_instance(
    aws: embedded_aws.EmbeddedAws, unseen_launch: UnseenLaunch
) -> None:
    cluster, cloud, claim = unseen_launch.cluster, unseen_launch.cloud, unseen_launch.claim

    later = run(cluster, cloud, unseen_launch.start + 30)  # past the 10 s wait, and EC2 still answers NotFound

    assert later.nodeclaims_terminated == 1 and claim.name not in cluster.nodeclaims
    set_faults(aws, None)
    instance = cloud.get_instance(instance_id=unseen_launch.instance_id)
    assert instance is not None and instance.state in {"shutting-down", "terminated"}  # terminated by id, not leaked


def test_a_termination_whose_instance_ec2_still_does_not_show_terminates_it_by_id(
    aws: embedded_aws.EmbeddedAws, unseen_launch: UnseenLaunch
) -> None:
    ports, request = unseen_launch.deleted_by_user()
    now = unseen_launch.start + 30

    done = run_round(ports=ports, settings=TerminationSettings(), request=request, now=now, attempt=3)

    assert done.status is Status.TERMINATED and unseen_launch.claim.name not in unseen_launch.cluster.nodeclaims
    set_faults(aws, None)
    instance = unseen_launch.cloud.get_instance(instance_id=request.instance_id)
    assert instance is not None and instance.state in {"shutting-down", "terminated"}
