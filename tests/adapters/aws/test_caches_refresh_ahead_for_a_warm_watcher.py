"""A watcher with time to spare refreshes the catalogue and the node class resolution before they
expire (``fresh_for``), so the pass a pending pod triggers never pays for their EC2 reads; a pass that needs a
resolution the warm-up is making waits for it instead of making it again."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

import boto3
from ec2_support import CLUSTER, REGION, nodeclass
from test_catalogue_from_moto import Clock, catalogue, count_calls

from nodesmith.adapters.aws.config import AwsClients, Clocks, NodeLaunchSettings
from nodesmith.adapters.aws.nodeclass import NodeClassResolver

if TYPE_CHECKING:
    from pathlib import Path

    from nodesmith.sim.aws import SeededAws


def test_the_catalogue_is_fetched_again_when_it_would_expire_within_fresh_for(ec2: Any, tmp_path: Path) -> None:
    clock = Clock()
    calls = count_calls(ec2, "DescribeInstanceTypes")
    cat = catalogue(ec2, tmp_path, clock=clock)
    first = cat.instance_types()
    clock.now += 270  # 30 s left of the 5-minute TTL
    cat.data(fresh_for=20.0)
    assert len(calls) == 1  # still fresh for 20 s: nothing fetched
    clock.now += 15  # 15 s left
    cat.data(fresh_for=20.0)
    assert len(calls) == 2  # refreshed ahead of expiry
    clock.now += 20  # past the old expiry, well inside the new one
    assert cat.instance_types() is not first
    assert len(calls) == 2  # the pass reads the refreshed data, no EC2 call on its path


def test_a_resolution_is_redone_when_it_would_expire_within_fresh_for(seeded: SeededAws) -> None:
    now = [0.0]
    resolver = NodeClassResolver(
        cluster_name=CLUSTER,
        kubernetes_version="1.31",
        clients=AwsClients(ec2=boto3.client("ec2", region_name=REGION), ssm=boto3.client("ssm", region_name=REGION)),
        launch=NodeLaunchSettings(instance_profile="p"),
        clocks=Clocks(monotonic=lambda: now[0]),
    )
    first = resolver.resolve(nodeclass=nodeclass())
    now[0] = 30.0
    assert resolver.resolve(nodeclass=nodeclass(), fresh_for=20.0) is first  # 30 s left
    now[0] = 45.0
    ahead = resolver.resolve(nodeclass=nodeclass(), fresh_for=20.0)  # 15 s left: resolved again
    assert ahead is not first
    now[0] = 70.0  # the first result would have expired; the refreshed one has not
    assert resolver.resolve(nodeclass=nodeclass()) is ahead


def test_a_resolution_under_way_is_waited_for_not_repeated(seeded: SeededAws) -> None:
    ec2 = boto3.client("ec2", region_name=REGION)
    resolver = NodeClassResolver(
        cluster_name=CLUSTER,
        kubernetes_version="1.31",
        clients=AwsClients(ec2=ec2, ssm=boto3.client("ssm", region_name=REGION)),
        launch=NodeLaunchSettings(instance_profile="p"),
    )
    calls = count_calls(ec2, "DescribeSubnets")
    asking = threading.Event()

    def slow_subnets(**_: Any) -> None:  # the warm-up's read is still under way when the pass asks
        asking.set()
        time.sleep(0.5)

    ec2.meta.events.register("before-call.ec2.DescribeSubnets", slow_subnets)
    warm_up = threading.Thread(target=lambda: resolver.resolve(nodeclass=nodeclass()))
    warm_up.start()
    assert asking.wait(10)
    parts = resolver.resolution(nodeclass=nodeclass())  # the pass's status update, meanwhile
    warm_up.join(10)
    assert len(calls) == 1  # resolved once: the pass waited and found it cached
    assert parts.subnets and all(check.ok for check in parts.checks)
