"""How ``nodesmith simulate`` turns manifests into the scheduler's input.

Which pods are pending, what existing nodes carry (bound pods and the DaemonSet pods that would run
there), what NodePools already use for their limits, and what an existing node costs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodesmith.adapters.manifests import load_manifest_text
from nodesmith.cli.simulate import build_scheduling_input

if TYPE_CHECKING:
    from nodesmith.core.model import InstanceType
    from nodesmith.core.scheduling.types import ExistingNode

POOL = """\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      startupTaints: [{key: example.com/booting, effect: NoSchedule}]
      requirements: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]
---
"""


def _node(name: str, *, pool: str | None = "default", taints: str = "[]", cpu: str = "4") -> str:
    pool_label = f"karpenter.sh/nodepool: {pool}, karpenter.sh/initialized: 'true', " if pool else ""
    return f"""\
apiVersion: v1
kind: Node
metadata:
  name: {name}
  labels: {{{pool_label}node.kubernetes.io/instance-type: m5.xlarge, topology.kubernetes.io/zone: us-east-1a,
           karpenter.sh/capacity-type: on-demand, kubernetes.io/arch: amd64, kubernetes.io/os: linux}}
spec: {{taints: {taints}}}
status:
  capacity: {{cpu: "{cpu}", memory: 16Gi, pods: "58"}}
  allocatable: {{cpu: 3920m, memory: 14Gi, pods: "58"}}
---
"""


def _pod(name: str, *, node: str | None = None, cpu: str = "1", extra: str = "", namespace: str = "default") -> str:
    bound = f"nodeName: {node}, " if node else ""
    return f"""\
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {namespace}{extra}}}
spec: {{{bound}containers: [{{name: a, image: x, resources: {{requests: {{cpu: "{cpu}"}}}}}}]}}
---
"""


DAEMONSET = """\
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: kube-system}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers: [{name: agent, image: x, resources: {requests: {cpu: 250m}}}]
---
"""


def _by_name(nodes: object) -> dict[str, ExistingNode]:
    return {n.name: n for n in nodes}  # type: ignore[attr-defined]


def test_pending_pods_are_unbound_non_daemonset_live_pods_marked_unschedulable(
    small_catalogue: list[InstanceType],
) -> None:
    owned = ", ownerReferences: [{apiVersion: apps/v1, kind: DaemonSet, name: agent, uid: u1, controller: true}]"
    text = POOL + _node("node-a") + _pod("pending") + _pod("bound", node="node-a") + _pod("daemon", extra=owned)
    text += "apiVersion: v1\nkind: Pod\nmetadata: {name: done, namespace: default}\n"
    text += "spec: {containers: [{name: a, image: x}]}\nstatus: {phase: Succeeded}\n"
    sched = build_scheduling_input(load_manifest_text(text), small_catalogue)
    assert [p.key for p in sched.pods] == ["default/pending"]
    assert sched.pods[0].unschedulable, "simulate treats every unbound pod as rejected by kube-scheduler"


def test_existing_node_carries_bound_pods_and_the_daemonset_pods_that_would_run_there(
    small_catalogue: list[InstanceType],
) -> None:
    tainted = "[{key: dedicated, value: db, effect: NoSchedule}]"
    text = POOL + DAEMONSET + _node("node-a") + _node("node-b", taints=tainted) + _pod("web", node="node-a")
    nodes = _by_name(build_scheduling_input(load_manifest_text(text), small_catalogue).existing_nodes)

    on_a = {p.key: p for p in nodes["node-a"].pods}
    assert set(on_a) == {"default/web", "kube-system/agent-node-a"}
    agent = on_a["kube-system/agent-node-a"]
    assert agent.is_daemonset and agent.node_name == "node-a" and agent.requests["cpu"] == 250
    # node-b's taint is not tolerated by the DaemonSet: its pod would not run there.
    assert nodes["node-b"].pods == ()


def test_daemonset_pod_already_bound_to_a_node_is_not_added_twice(small_catalogue: list[InstanceType]) -> None:
    owned = ", ownerReferences: [{apiVersion: apps/v1, kind: DaemonSet, name: agent, uid: u1, controller: true}]"
    text = POOL + DAEMONSET + _node("node-a") + _pod("agent-x1", node="node-a", extra=owned, namespace="kube-system")
    nodes = _by_name(build_scheduling_input(load_manifest_text(text), small_catalogue).existing_nodes)
    assert [p.key for p in nodes["node-a"].pods] == ["kube-system/agent-x1"]


def test_daemonset_selecting_other_nodes_adds_nothing(small_catalogue: list[InstanceType]) -> None:
    selective = DAEMONSET.replace("    spec:\n", "    spec:\n      nodeSelector: {kubernetes.io/arch: arm64}\n", 1)
    nodes = _by_name(
        build_scheduling_input(load_manifest_text(POOL + selective + _node("node-a")), small_catalogue).existing_nodes
    )
    assert nodes["node-a"].pods == ()


def test_nodepool_usage_sums_the_capacity_and_count_of_its_nodes(small_catalogue: list[InstanceType]) -> None:
    text = POOL + _node("node-a", cpu="4") + _node("node-b", cpu="8") + _node("unmanaged", pool=None, cpu="16")
    sched = build_scheduling_input(load_manifest_text(text), small_catalogue)
    assert dict(sched.nodepool_usage) == {
        "default": {"cpu": 12000, "memory": 32 * 2**30, "pods": 116, "nodes": 2},
    }


def test_existing_node_fields_come_from_its_labels_pool_and_the_catalogue(small_catalogue: list[InstanceType]) -> None:
    cordoned = _node("node-a").replace("spec: {taints: []}", "spec: {taints: [], unschedulable: true}")
    text = POOL + cordoned + _node("unmanaged", pool=None)
    nodes = _by_name(build_scheduling_input(load_manifest_text(text), small_catalogue).existing_nodes)

    managed = nodes["node-a"]
    assert managed.nodepool == "default" and managed.initialized and managed.unschedulable
    assert [t.key for t in managed.startup_taints] == ["example.com/booting"]
    assert managed.labels["kubernetes.io/hostname"] == "node-a"
    assert managed.price == 0.192  # m5.xlarge on-demand in us-east-1a
    assert managed.allocatable["cpu"] == 3920

    other = nodes["unmanaged"]
    assert other.nodepool is None and other.initialized and other.startup_taints == ()
