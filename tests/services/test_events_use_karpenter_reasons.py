"""Kubernetes Events carry the reasons Karpenter users already filter on (``kubectl get events
--field-selector reason=...``), on the objects Karpenter puts them on.

Provisioning: ``Nominated`` and ``FailedScheduling`` (with Nodesmith's explanation) on pods,
``Launched``, ``Registered`` and ``Initialized`` on the NodeClaim. Interruption and drain:
``SpotInterrupted`` and ``TerminatingOnInterruption`` on the node, ``Evicted`` on each evicted pod,
``Disrupted`` on a pod deleted for the deadline, ``FailedDraining`` on a node whose drain ran out of
time. Disruption: ``DisruptionBlocked`` on a node a ``karpenter.sh/do-not-disrupt`` pod protects.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reconcile_fakes import FakeCloud, FakeCluster, make_nodeclass, make_nodepool, make_pod, node_for

from nodesmith.core.interruption import parse_message
from nodesmith.services.drain import cordon_node, drain_node
from nodesmith.services.interrupt import handle_interruption
from nodesmith.services.provisioning.reconcile import reconcile

if TYPE_CHECKING:
    from types import ModuleType

EVENTS = Path(__file__).resolve().parents[1] / "events"


def load_fakes() -> ModuleType:
    name = "nodesmith_tests_interruption_fakes"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).parent / "interruption_fakes.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


fakes = load_fakes()


def _events(cluster: Any, kind: str) -> dict[str, list[str]]:
    """Reason -> messages of the Events on objects of ``kind`` (reconcile fakes: (kind, name, reason, message))."""
    out: dict[str, list[str]] = {}
    for k, _name, reason, message in cluster.events:
        if k == kind:
            out.setdefault(reason, []).append(message)
    return out


def test_provisioning_posts_nominated_failed_scheduling_launched_registered_initialized() -> None:
    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])
    cluster.pods = [make_pod("inflate-0"), make_pod("huge", cpu="512")]  # no instance type has 512 vCPUs
    cloud = FakeCloud()
    reconcile(cluster=cluster, cloud=cloud, cluster_name="test", now=1000.0)

    pods = _events(cluster, "Pod")
    (claim,) = cluster.nodeclaims.values()
    assert pods["Nominated"] == [f"Pod should schedule on: nodeclaim/{claim.name}"]
    (explanation,) = pods["FailedScheduling"]
    assert explanation.startswith("Failed to schedule pod, ") and len(explanation) > len("Failed to schedule pod, ")
    assert "Launched" in _events(cluster, "NodeClaim")

    instance = next(i for i in cloud.instances.values() if i.provider_id == claim.status.provider_id)
    cluster.nodes.append(node_for(instance, claim, ready=True))
    reconcile(cluster=cluster, cloud=cloud, cluster_name="test", now=1001.0)

    claims = _events(cluster, "NodeClaim")
    assert [m.split(",")[1].strip() for m in claims["Registered"]] == ["Type: Registered"]
    assert [m.split(",")[1].strip() for m in claims["Initialized"]] == ["Type: Initialized"]


def test_a_pass_posts_its_pod_events_side_by_side_up_to_the_limit() -> None:
    """Like client-go's recorder, a pass does not wait for one Event before the next: two posts are in
    flight at once (each waits for the other here), and the limit still holds."""
    import threading

    from nodesmith.services.provisioning.reconcile import ReconcileOutcome
    from nodesmith.services.provisioning.outcome import post_pod_events

    cluster = FakeCluster()
    together = threading.Barrier(2, timeout=5)  # a second post never starts if they go one after another
    record = cluster.record_event

    def in_flight_with_another(**kwargs: Any) -> None:
        together.wait()
        record(**kwargs)

    cluster.record_event = in_flight_with_another  # type: ignore[method-assign]
    pods = [make_pod(f"p-{i}") for i in range(3)]
    out = ReconcileOutcome(unschedulable={pods[2].key: "no instance type fits"})

    post_pod_events(cluster=cluster, pending=pods, nominated=[(pods[0], "nc-a"), (pods[1], "nc-a")], out=out, limit=2)

    assert sorted(_events(cluster, "Pod")) == ["Nominated"] and len(_events(cluster, "Pod")["Nominated"]) == 2


def test_a_registered_and_initialized_nodeclaim_is_passed_through_untouched() -> None:
    """Every pass links NodeClaims to their nodes; one already Initialized is neither copied nor written."""
    from nodesmith.services.provisioning.lifecycle import LifecycleOutcome, link_nodes

    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])
    cluster.pods = [make_pod("inflate-0")]
    cloud = FakeCloud()
    reconcile(cluster=cluster, cloud=cloud, cluster_name="test", now=1000.0)
    (claim,) = cluster.nodeclaims.values()
    instance = next(i for i in cloud.instances.values() if i.provider_id == claim.status.provider_id)
    cluster.nodes.append(node_for(instance, claim, ready=True))
    reconcile(cluster=cluster, cloud=cloud, cluster_name="test", now=1001.0)
    (linked,) = cluster.nodeclaims.values()
    assert linked.is_true("Initialized")
    written = len(cluster.events)

    (out,) = link_nodes(
        cluster=cluster, nodeclaims=[linked], nodes=cluster.nodes, now=1002.0, outcome=LifecycleOutcome()
    )

    assert out is linked and len(cluster.events) == written


def _interruption_world(**cluster_kwargs: Any) -> tuple[Any, Any, Any]:
    clock = fakes.FakeClock()
    cluster = fakes.FakeCluster(clock=clock, nodes=[fakes.make_node("node-a", "i-1234567890abcdef0")], **cluster_kwargs)
    cloud = fakes.FakeCloud([fakes.make_instance("i-1234567890abcdef0")])
    return clock, cluster, cloud


def _spot_message(event_time: str = "2026-11-22T06:00:00Z") -> Any:
    body = (EVENTS / "spot_interruption_warning.json").read_text().replace("2026-11-22T06:00:00Z", event_time)
    return parse_message(body)


def test_a_spot_interruption_posts_its_node_events_and_evicted_on_each_pod() -> None:
    clock, cluster, cloud = _interruption_world(
        pods=[fakes.make_pod("web-1", grace=0), fakes.make_pod("web-2", grace=0)], instant_termination=True
    )
    handle_interruption(
        message=_spot_message(),
        cluster=cluster,
        cloud=cloud,
        cluster_name=fakes.CLUSTER,
        rebalance_action="cordon",
        now=clock.wall(),
        drain_budget_seconds=60,
        sleep=clock.sleep,
        clock=clock,
    )
    node_reasons = [reason for kind, name, reason, _ in cluster.events if kind == "Node" and name == "node-a"]
    assert node_reasons[:2] == ["SpotInterrupted", "TerminatingOnInterruption"]
    evicted = sorted(name for kind, name, reason, _ in cluster.events if kind == "Pod" and reason == "Evicted")
    assert evicted == ["web-1", "web-2"]


def test_a_pod_deleted_for_the_deadline_gets_disrupted_not_evicted() -> None:
    # The warning is handled 110 s after it was sent: a pod with 30 s of grace cannot be evicted in time.
    clock, cluster, _ = _interruption_world(pods=[fakes.make_pod("slow", grace=30)], pdb_blocks={"default/slow": -1})
    message = _spot_message()
    cordon_node(cluster=cluster, node_name="node-a")
    result = drain_node(
        cluster=cluster,
        node=cluster.nodes["node-a"],
        now=message.event_time + 110,
        deadline=message.deadline,
        budget_seconds=30,
        sleep=clock.sleep,
        clock=clock,
    )
    assert result.force_deleted == 1
    pod_events = [(reason, type_) for kind, name, reason, type_ in cluster.events if kind == "Pod" and name == "slow"]
    assert pod_events == [("Disrupted", "Normal")]


def test_a_drain_that_runs_out_of_budget_posts_failed_draining_on_the_node() -> None:
    guarded = fakes.make_pod("guarded", grace=0)
    clock, cluster, _ = _interruption_world(pods=[guarded], pdb_blocks={"default/guarded": -1})
    cordon_node(cluster=cluster, node_name="node-a")
    result = drain_node(
        cluster=cluster,
        node=cluster.nodes["node-a"],
        now=clock.wall(),
        deadline=None,
        budget_seconds=2,
        sleep=clock.sleep,
        clock=clock,
    )
    assert not result.complete and result.blocked == 1
    assert [(k, n, r, t) for k, n, r, t in cluster.events] == [("Node", "node-a", "FailedDraining", "Warning")]


def test_a_do_not_disrupt_pod_blocks_disruption_with_disruption_blocked() -> None:
    from nodesmith.services.disruption.service import disrupt

    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])
    cluster.pods = [make_pod("keep-me", annotations={"karpenter.sh/do-not-disrupt": "true"})]
    cloud = FakeCloud()
    reconcile(cluster=cluster, cloud=cloud, cluster_name="test", now=1000.0)
    (claim,) = cluster.nodeclaims.values()
    instance = next(i for i in cloud.instances.values() if i.provider_id == claim.status.provider_id)
    node = node_for(instance, claim, ready=True)
    cluster.nodes.append(node)
    cluster.now = cloud.now = 1001.0
    reconcile(cluster=cluster, cloud=cloud, cluster_name="test", now=1001.0)
    cluster.pods = [replace(p, node_name=node.name, unschedulable=False, phase="Running") for p in cluster.pods]
    cluster.nodepools = [make_nodepool(labels={"team": "payments"})]  # drifted: a candidate but for the pod

    disrupt(cluster=cluster, cloud=cloud, cluster_name="test", now=1100.0, sleep=lambda _s: None, clock=lambda: 1100.0)

    blocked = _events(cluster, "Node").get("DisruptionBlocked", [])
    assert blocked and "do-not-disrupt" in blocked[0]
