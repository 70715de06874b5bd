"""A reconcile pass counts NodeClaims by (NodePool, capacity type), terminations by their real
reason, and splits the cluster cost by (NodePool, capacity type): the breakdowns the metrics'
``NodePool`` / ``CapacityType`` / ``Reason`` dimensions come from."""

from __future__ import annotations

from dataclasses import replace

import pytest
from reconcile_fakes import node_for
from test_reconcile import World, _unlaunched_claim, only_claim, run, world

__all__ = ["world"]  # the fixture, shared with test_reconcile


def test_a_launch_is_counted_and_costed_under_its_nodepool_and_capacity_type(world: World) -> None:
    cluster, cloud = world
    out = run(cluster, cloud, 1000.0)

    kind = next(iter(cloud.instances.values())).capacity_type
    assert out.created_by == {("default", kind): 1}
    assert out.launched_by == {("default", kind): 1}
    assert out.cost_by == {("default", kind): pytest.approx(out.cost_per_hour)}
    assert out.cost_per_hour > 0


def test_registration_and_initialization_are_counted_under_the_node_nodepool_and_capacity_type(
    world: World,
) -> None:
    cluster, cloud = world
    run(cluster, cloud, 1000.0)
    instance = next(iter(cloud.instances.values()))
    cluster.nodes = [node_for(instance, only_claim(cluster), ready=True)]

    out = run(cluster, cloud, 1010.0)

    key = ("default", instance.capacity_type)
    assert (out.registered_by, out.initialized_by) == ({key: 1}, {key: 1})
    assert out.cost_by == {key: pytest.approx(out.cost_per_hour)}  # the running node still costs


def test_a_nodeclaim_that_never_registers_is_terminated_for_registration_timeout(world: World) -> None:
    cluster, cloud = world
    run(cluster, cloud, 1000.0)
    kind = next(iter(cloud.instances.values())).capacity_type

    out = run(cluster, cloud, 1000.0 + 900)

    assert out.terminated_by == {("RegistrationTimeout", "default", kind): 1}


def test_a_nodeclaim_never_launched_is_terminated_for_launch_timeout(world: World) -> None:
    cluster, cloud = world
    cluster.pods = []
    run(cluster, cloud, 1000.0)
    _unlaunched_claim(cluster, cloud, created=1000.0)

    out = run(cluster, cloud, 1000.0 + 300)

    assert [(reason, pool) for reason, pool, _ in out.terminated_by] == [("LaunchTimeout", "default")]


def test_a_nodeclaim_whose_instance_is_gone_is_garbage_collected(world: World) -> None:
    cluster, cloud = world
    run(cluster, cloud, 1000.0)
    (instance,) = cloud.instances.values()
    cloud.instances[instance.instance_id] = replace(instance, state="terminated")  # reclaimed before it registered

    out = run(cluster, cloud, 1020.0)

    assert out.terminated_by == {("GarbageCollected", "default", instance.capacity_type): 1}
