"""The simulated kubelet, kube-scheduler and workload controllers on the emulator's store, stepped
with explicit times."""

from __future__ import annotations

from typing import Any

import pytest

from nodesmith.core.ports import Instance
from nodesmith.sim.controllers import SimControllers
from nodesmith.sim.kube import Store
from nodesmith.sim.kube_scheduler import SimScheduler
from nodesmith.sim.kubelet import MANAGED_ANNOTATION, SimKubelet
from nodesmith.sim.runner import Runner

CLAIM = "default-abcde"


@pytest.fixture
def store() -> Store:
    return Store(seed=7)


def launched_claim(store: Store, *, startup_taints: list[dict[str, str]] | None = None) -> None:
    store.create(
        "nodeclaims.karpenter.sh",
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": CLAIM, "labels": {"karpenter.sh/nodepool": "default", "team": "platform"}},
            "spec": {
                "requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}],
                "startupTaints": startup_taints or [],
            },
        },
    )

    def launched(obj: dict[str, Any]) -> None:
        obj["status"] = {
            "providerID": "aws:///us-east-1a/i-0123",
            "capacity": {"cpu": "2", "memory": "4Gi", "pods": "29"},
            "allocatable": {"cpu": "1930m", "memory": "3Gi", "pods": "29"},
        }

    store.mutate("nodeclaims.karpenter.sh", CLAIM, launched)


def instance(*, state: str = "running", claim: str = CLAIM) -> Instance:
    return Instance(
        instance_id="i-0123",
        instance_type="c5.large",
        zone="us-east-1a",
        capacity_type="spot",
        state=state,
        launch_time=0.0,
        private_dns_name="ip-10-0-1-7.ec2.internal",
        tags={"karpenter.sh/nodeclaim": claim},
    )


def ready(node: dict[str, Any]) -> str:
    return next(c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready")


def taint_keys(node: dict[str, Any]) -> set[str]:
    return {t["key"] for t in node["spec"].get("taints") or []}


# -- kubelet ---------------------------------------------------------------------------------------


def test_kubelet_registers_a_node_for_a_launched_instance_then_makes_it_ready(store: Store) -> None:
    launched_claim(store, startup_taints=[{"key": "example.com/agent", "effect": "NoSchedule"}])
    instances = [instance()]
    kubelet = SimKubelet(store=store, instances=lambda: instances, ready_delay=1.0, startup_taint_delay=2.0)

    kubelet.step(100.0)

    node = store.get("nodes", "ip-10-0-1-7.ec2.internal")
    assert node["spec"]["providerID"] == "aws:///us-east-1a/i-0123"
    labels = node["metadata"]["labels"]
    assert labels["karpenter.sh/nodepool"] == "default" and labels["team"] == "platform"
    assert labels["node.kubernetes.io/instance-type"] == "c5.large"
    assert labels["topology.kubernetes.io/zone"] == "us-east-1a"
    assert labels["karpenter.sh/capacity-type"] == "spot"
    assert labels["kubernetes.io/hostname"] == "ip-10-0-1-7.ec2.internal"
    assert node["status"]["allocatable"]["cpu"] == "1930m"
    assert taint_keys(node) == {"dedicated", "example.com/agent", "node.kubernetes.io/not-ready"}
    assert ready(node) == "False"

    kubelet.step(100.5)
    assert ready(store.get("nodes", "ip-10-0-1-7.ec2.internal")) == "False"

    kubelet.step(101.0)
    node = store.get("nodes", "ip-10-0-1-7.ec2.internal")
    assert ready(node) == "True"
    assert taint_keys(node) == {"dedicated", "example.com/agent"}

    kubelet.step(102.0)
    assert taint_keys(store.get("nodes", "ip-10-0-1-7.ec2.internal")) == {"dedicated"}


def test_kubelet_leaves_a_settled_node_alone_until_it_or_its_nodeclaim_is_written(store: Store) -> None:
    launched_claim(store)
    kubelet = SimKubelet(store=store, instances=lambda: [instance()], ready_delay=0.0)
    name = "ip-10-0-1-7.ec2.internal"
    kubelet.step(100.0)
    kubelet.step(100.0)  # Ready: nothing left to do
    version = store.resource_version
    kubelet.step(101.0)
    assert store.resource_version == version

    store.mutate("nodes", name, lambda n: n["status"].update(conditions=[{"type": "Ready", "status": "False"}]))
    kubelet.step(102.0)  # the Node was written: looked at again, and Ready again
    assert ready(store.get("nodes", name)) == "True"

    # a startup taint its NodeClaim now names (the agent's, say) is dropped once the NodeClaim is written
    store.mutate("nodes", name, lambda n: n["spec"]["taints"].append({"key": "agent", "effect": "NoSchedule"}))
    kubelet.step(103.0)
    assert "agent" in taint_keys(store.get("nodes", name))
    store.mutate(
        "nodeclaims.karpenter.sh",
        CLAIM,
        lambda c: c["spec"].update(startupTaints=[{"key": "agent", "effect": "NoSchedule"}]),
    )
    kubelet.step(104.0)
    assert taint_keys(store.get("nodes", name)) == {"dedicated"}


def test_kubelet_waits_for_a_nodeclaim_with_a_launched_status(store: Store) -> None:
    kubelet = SimKubelet(store=store, instances=lambda: [instance(claim="someone-else")])
    kubelet.step(100.0)
    assert store.objects("nodes") == []

    store.create(
        "nodeclaims.karpenter.sh",
        {
            "metadata": {"name": CLAIM},
            "spec": {"requirements": [], "nodeClassRef": {"group": "g", "kind": "k", "name": "n"}},
        },
    )
    SimKubelet(store=store, instances=lambda: [instance()]).step(101.0)  # no status yet
    assert store.objects("nodes") == []


def test_kubelet_takes_the_node_away_when_the_instance_is_gone(store: Store) -> None:
    launched_claim(store)
    instances = [instance()]
    kubelet = SimKubelet(store=store, instances=lambda: instances, ready_delay=0.0, removal_delay=5.0)
    kubelet.step(100.0)
    kubelet.step(100.0)
    store.create("nodes", {"metadata": {"name": "not-ours"}})

    instances[:] = [instance(state="shutting-down")]
    kubelet.step(110.0)
    assert ready(store.get("nodes", "ip-10-0-1-7.ec2.internal")) == "Unknown"

    kubelet.step(115.0)
    assert [n["metadata"]["name"] for n in store.objects("nodes")] == ["not-ours"]


# -- kube-scheduler --------------------------------------------------------------------------------


def add_node(store: Store, name: str, *, cpu: str = "2", ready_: bool = True, taints: list[Any] | None = None,
             labels: dict[str, str] | None = None) -> None:  # fmt: skip
    store.create(
        "nodes",
        {
            "metadata": {"name": name, "labels": labels or {}, "annotations": {MANAGED_ANNOTATION: "true"}},
            "spec": {"taints": taints or []},
            "status": {
                "allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "10"},
                "conditions": [{"type": "Ready", "status": "True" if ready_ else "False"}],
            },
        },
    )


def add_pod(store: Store, name: str, *, cpu: str = "1", **spec: Any) -> None:
    store.create(
        "pods",
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}], **spec},
        },
    )


def pod_state(store: Store, name: str) -> tuple[str | None, str, str]:
    pod = store.get("pods", name, namespace="default")
    scheduled = next((c for c in pod["status"].get("conditions") or [] if c["type"] == "PodScheduled"), {})
    return pod["spec"].get("nodeName"), pod["status"].get("phase", ""), scheduled.get("message", "")


def test_scheduler_binds_fitting_pods_and_marks_the_rest_unschedulable(store: Store) -> None:
    add_node(store, "n1", cpu="2")
    add_pod(store, "a", cpu="1500m")
    add_pod(store, "b", cpu="1")

    assert SimScheduler(store=store).step(10.0) == 1

    assert pod_state(store, "a")[:2] == ("n1", "Running")
    node, phase, message = pod_state(store, "b")
    assert node is None and phase == "Pending"
    assert message == "0/1 nodes are available: 1 Insufficient cpu."
    pod = store.get("pods", "b", namespace="default")
    assert pod["status"]["conditions"][-1]["reason"] == "Unschedulable"


def test_scheduler_honours_taints_selectors_and_readiness(store: Store) -> None:
    add_node(store, "a-tainted", taints=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}])
    add_node(store, "b-not-ready", ready_=False)
    add_node(store, "c-gpu", labels={"accelerator": "gpu"})
    add_pod(store, "plain", nodeSelector={"accelerator": "none"})
    add_pod(store, "ml", tolerations=[{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}])
    add_pod(
        store,
        "gpu",
        affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "accelerator", "operator": "In", "values": ["gpu"]}]}]}}},
    )  # fmt: skip

    SimScheduler(store=store).step(10.0)

    assert pod_state(store, "ml")[0] == "a-tainted"
    assert pod_state(store, "gpu")[0] == "c-gpu"
    node, _, message = pod_state(store, "plain")
    assert node is None
    assert "1 node(s) had untolerated taint {dedicated: ml}" in message
    assert "1 node(s) didn't match Pod's node affinity/selector" in message
    assert message.startswith("0/2 nodes are available")  # the NotReady node is not a candidate


def test_an_unschedulable_pod_is_not_rewritten_when_nothing_changed(store: Store) -> None:
    add_pod(store, "p", cpu="64")
    scheduler = SimScheduler(store=store)
    scheduler.step(10.0)
    version = store.resource_version
    scheduler.step(11.0)
    assert store.resource_version == version


# -- workload controllers --------------------------------------------------------------------------


def deployment(store: Store, replicas: int) -> None:
    store.create(
        "deployments.apps",
        {
            "metadata": {"name": "inflate", "namespace": "default"},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "inflate"}},
                "template": {
                    "metadata": {"labels": {"app": "inflate"}},
                    "spec": {"containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1"}}}]},
                },
            },
        },
    )


def active_pods(store: Store) -> list[dict[str, Any]]:
    return [p for p in store.objects("pods") if not p["metadata"].get("deletionTimestamp")]


def scale(store: Store, replicas: int) -> None:
    store.mutate("deployments.apps", "inflate", lambda d: d["spec"].update(replicas=replicas), namespace="default")


def test_a_deployment_gets_a_replicaset_and_its_pods_and_scales(store: Store) -> None:
    deployment(store, 3)
    controllers = SimControllers(store=store)

    controllers.step(0.0)

    (rs,) = store.objects("replicasets.apps")
    assert rs["metadata"]["ownerReferences"][0]["kind"] == "Deployment"
    pods = active_pods(store)
    assert len(pods) == 3
    assert all(p["metadata"]["labels"]["app"] == "inflate" for p in pods)
    assert all(p["metadata"]["ownerReferences"][0]["name"] == rs["metadata"]["name"] for p in pods)

    scale(store, 5)
    controllers.step(1.0)
    assert len(active_pods(store)) == 5

    add_node(store, "n1", cpu="4")
    SimScheduler(store=store).step(2.0)  # binds 4 of 5
    scale(store, 4)
    controllers.step(3.0)
    remaining = active_pods(store)
    assert len(remaining) == 4 and all(p["spec"].get("nodeName") == "n1" for p in remaining)  # unbound one went
    assert store.get("deployments.apps", "inflate", namespace="default")["status"]["readyReplicas"] == 4


def test_an_evicted_pod_is_replaced(store: Store) -> None:
    deployment(store, 2)
    controllers = SimControllers(store=store)
    controllers.step(0.0)
    victim = active_pods(store)[0]["metadata"]["name"]

    store.evict(victim, namespace="default")
    controllers.step(1.0)

    names = {p["metadata"]["name"] for p in active_pods(store)}
    assert len(names) == 2 and victim not in names


def test_pods_of_a_vanished_node_are_collected_and_replaced(store: Store) -> None:
    deployment(store, 1)
    controllers = SimControllers(store=store)
    controllers.step(0.0)
    add_node(store, "n1")
    SimScheduler(store=store).step(1.0)
    (bound,) = active_pods(store)

    store.delete("nodes", "n1")
    controllers.step(2.0)

    (replacement,) = active_pods(store)
    assert replacement["metadata"]["name"] != bound["metadata"]["name"]
    assert not replacement["spec"].get("nodeName")


def test_runners_drive_a_deployment_to_running_pods_in_the_background(store: Store) -> None:
    add_node(store, "n1", cpu="4")
    deployment(store, 3)
    runners = [Runner(SimControllers(store=store), interval=0.05), Runner(SimScheduler(store=store), interval=0.05)]
    for r in runners:
        r.start()
    try:

        def all_running(s: Store) -> bool:
            pods = s.objects("pods")
            return len(pods) == 3 and all((p.get("status") or {}).get("phase") == "Running" for p in pods)

        assert store.wait_for(all_running, timeout=10.0)
    finally:
        for r in runners:
            r.stop()
