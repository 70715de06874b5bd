"""Existing capacity is used before anything new is planned (Karpenter addToExistingNode)."""

from __future__ import annotations

from scheduling_support import make_daemonset, make_input, make_node, make_pod

from nodesmith.core.model import Taint, Toleration
from nodesmith.core.scheduling import solve


def test_pods_land_on_an_existing_node_with_room_and_nothing_is_launched() -> None:
    node = make_node("ip-10-0-0-1", cpu="4", memory="16Gi")
    pods = [make_pod(cpu="1", memory="1Gi") for _ in range(3)]
    result = solve(make_input(pods, nodes=[node]))
    assert result.nodeclaims == ()
    assert [p.name for p in result.existing["ip-10-0-0-1"]] == [p.name for p in pods]
    assert result.unschedulable == {}


def test_headroom_is_allocatable_minus_pods_already_bound() -> None:
    bound = make_pod("bound", cpu="3", memory="1Gi")
    node = make_node("n1", cpu="4", memory="16Gi", bound=(bound,))
    fits, spills = make_pod("fits", cpu="1"), make_pod("spills", cpu="1")
    result = solve(make_input([fits, spills], nodes=[node]))
    assert [p.name for p in result.existing["n1"]] == ["fits"]
    assert [p.name for nc in result.nodeclaims for p in nc.pods] == ["spills"]


def test_initialized_nodes_are_tried_before_in_flight_ones_then_by_name() -> None:
    nodes = [
        make_node("a-inflight", initialized=False),
        make_node("c-ready"),
        make_node("b-ready"),
    ]
    result = solve(make_input([make_pod(cpu="1")], nodes=nodes))
    assert list(result.existing) == ["b-ready"]


def test_cordoned_nodes_receive_no_pods() -> None:
    result = solve(make_input([make_pod(cpu="1")], nodes=[make_node("cordoned", unschedulable=True)]))
    assert result.existing == {}
    assert len(result.nodeclaims) == 1


def test_node_taints_must_be_tolerated_but_startup_taints_of_uninitialized_nodes_are_ignored() -> None:
    taint = Taint("example.com/booting", "NoSchedule")
    tainted = make_node("tainted", taints=(taint,))
    booting = make_node("booting", taints=(taint,), initialized=False, startup_taints=(taint,))
    result = solve(make_input([make_pod(cpu="1")], nodes=[tainted, booting]))
    assert list(result.existing) == ["booting"]
    tolerant = make_pod(cpu="1", tolerations=(Toleration(key="example.com/booting", operator="Exists"),))
    assert list(solve(make_input([tolerant], nodes=[tainted])).existing) == ["tainted"]


def test_known_ephemeral_taints_are_ignored_while_a_node_initializes() -> None:
    not_ready = Taint("node.kubernetes.io/not-ready", "NoSchedule")
    result = solve(make_input([make_pod(cpu="1")], nodes=[make_node("new", taints=(not_ready,), initialized=False)]))
    assert list(result.existing) == ["new"]
    result = solve(make_input([make_pod(cpu="1")], nodes=[make_node("old", taints=(not_ready,))]))
    assert result.existing == {}


def test_node_labels_must_satisfy_node_selector_and_any_required_affinity_term() -> None:
    node = make_node("n1", zone="us-west-2b", labels={"team": "payments"})
    wrong = make_pod(node_selector={"team": "search"})
    right = make_pod(affinity=[[("team", "In", ("search",))], [("topology.kubernetes.io/zone", "In", ("us-west-2b",))]])
    result = solve(make_input([wrong, right], nodes=[node], nodepools=[]))
    assert [p.name for p in result.existing["n1"]] == [right.name]
    assert wrong.key in result.unschedulable


def test_daemonsets_not_yet_running_on_a_node_reserve_their_requests() -> None:
    node = make_node("n1", cpu="2", memory="16Gi")
    ds = make_daemonset("logging", cpu="500m")
    pod = make_pod(cpu="1600m")
    assert list(solve(make_input([pod], nodes=[node])).existing) == ["n1"]
    assert solve(make_input([pod], nodes=[node], daemonsets=[ds])).existing == {}
    running = make_pod("logging-x", cpu="500m", owner_kind="DaemonSet", unschedulable=False, node_name="n1")
    node_with_ds = make_node("n1", cpu="2", memory="16Gi", bound=(running,))
    assert solve(make_input([make_pod(cpu="1400m")], nodes=[node_with_ds], daemonsets=[ds])).existing != {}


def test_host_ports_in_use_on_a_node_block_pods_needing_the_same_port() -> None:
    user = make_pod("user", cpu="100m", host_ports=((8080, "TCP", ""),), unschedulable=False, node_name="n1")
    node = make_node("n1", bound=(user,))
    same = make_pod("same", cpu="100m", host_ports=((8080, "TCP", ""),))
    udp = make_pod("udp", cpu="100m", host_ports=((8080, "UDP", ""),))
    result = solve(make_input([same, udp], nodes=[node]))
    assert [p.name for p in result.existing["n1"]] == ["udp"]
    assert [p.name for nc in result.nodeclaims for p in nc.pods] == ["same"]
