"""A cluster already full of running pods, written straight into the emulator's store: for scale benchmarks that
measure one reconcile pass with the simulated kubelet and kube-scheduler stopped.

:func:`create_ready_nodes` registers the Node of every :class:`~nodesmith.sim.fleet.FleetNode` as the simulated
kubelet and a reconcile pass would leave it (Ready, the NodeClaim's labels, ``karpenter.sh/registered`` and
``karpenter.sh/initialized``, Karpenter's ``karpenter.sh/termination`` finalizer); :func:`bind_running_pods` puts
pods of ReplicaSets on those nodes, Running and Ready; :func:`add_pending_pods` adds pods the kube-scheduler marked
``PodScheduled=False, reason=Unschedulable``. Quantities are Kubernetes quantity strings. :func:`fill` builds the
whole world from them: the demo's NodePool and EC2NodeClass, the fleet, its Nodes and pods.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodesmith.core.labels import LABEL_INITIALIZED, LABEL_REGISTERED
from nodesmith.core.termination import TERMINATION_FINALIZER
from nodesmith.sim.fleet import M5_LARGE, launch_fleet
from nodesmith.sim.kube.timefmt import rfc3339
from nodesmith.sim.kubelet import MANAGED_ANNOTATION

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nodesmith.sim.fleet import FleetNode, Shape
    from nodesmith.sim.kube.store import Store

__all__ = ["FullCluster", "add_pending_pods", "bind_running_pods", "create_ready_nodes", "demo_nodepool_docs", "fill"]

_CLAIMS = "nodeclaims.karpenter.sh"
_PAUSE = "public.ecr.aws/eks-distro/kubernetes/pause:3.9"


def create_ready_nodes(
    store: Store, fleet: Sequence[FleetNode], *, shape: Shape = M5_LARGE, kubelet_managed: bool = False
) -> int:
    """Create the Ready, registered Node of every node of ``fleet`` (its NodeClaim must exist, as
    :func:`~nodesmith.sim.fleet.launch_fleet` leaves it); returns how many were created. ``kubelet_managed`` marks
    them as the simulated kubelet's own (:data:`~nodesmith.sim.kubelet.MANAGED_ANNOTATION`), for a world whose
    kubelet runs: it then keeps them (and takes them away with their instance) instead of registering them again."""
    stamp = rfc3339(time.time())
    annotations = {MANAGED_ANNOTATION: "true"} if kubelet_managed else {}
    for node in fleet:
        claim = store.get(_CLAIMS, node.nodeclaim)
        labels = {
            **(claim["metadata"].get("labels") or {}),
            "node.kubernetes.io/instance-type": shape.instance_type,
            "topology.kubernetes.io/zone": node.zone,
            "topology.kubernetes.io/region": node.zone[:-1],
            "kubernetes.io/hostname": node.node_name,
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
            LABEL_REGISTERED: "true",
            LABEL_INITIALIZED: "true",
        }
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady",
                 "message": "kubelet is posting ready status",
                 "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}  # fmt: skip
        store.create("nodes", {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node.node_name, "labels": labels, "annotations": dict(annotations),
                         "finalizers": [TERMINATION_FINALIZER]},
            "spec": {"providerID": node.provider_id},
            "status": {"capacity": dict(shape.capacity), "allocatable": dict(shape.allocatable),
                       "conditions": [ready],
                       "addresses": [{"type": "InternalDNS", "address": node.node_name},
                                     {"type": "Hostname", "address": node.node_name}]},
        })  # fmt: skip
    return len(fleet)


def _pod(name: str, app: str, owner_uid: str, *, cpu: str, memory: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": app},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": app,
                                          "uid": owner_uid, "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"containers": [{"name": "app", "image": _PAUSE,
                                 "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
                 "terminationGracePeriodSeconds": 30},
    }  # fmt: skip


def bind_running_pods(
    store: Store, fleet: Sequence[FleetNode], *, pods: int, cpu: str, memory: str = "256Mi", replicas: int = 20
) -> int:
    """``pods`` Running, Ready pods of ReplicaSets ``app-00000``, ``app-00001``, ... (``replicas`` pods each)
    requesting ``cpu``/``memory``, spread round-robin over ``fleet``'s nodes; returns how many were created."""
    stamp = rfc3339(time.time())
    owners: dict[str, str] = {}
    for number in range(pods):
        app = f"app-{number // max(1, replicas):05d}"
        owner = owners.setdefault(app, str(uuid.uuid4()))
        doc = _pod(f"{app}-{number % max(1, replicas):03d}", app, owner, cpu=cpu, memory=memory)
        doc["spec"]["nodeName"] = fleet[number % len(fleet)].node_name
        doc["status"] = {
            "phase": "Running",
            "conditions": [{"type": t, "status": "True", "lastTransitionTime": stamp}
                           for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")],
        }  # fmt: skip
        store.create("pods", doc)
    return pods


def add_pending_pods(store: Store, *, pods: int, cpu: str = "1", memory: str = "512Mi", app: str = "pending") -> int:
    """``pods`` pods of one ReplicaSet ``app`` requesting ``cpu``/``memory``, unbound and marked
    ``PodScheduled=False, reason=Unschedulable`` as the kube-scheduler marks a pod no node can take; returns how
    many were created."""
    stamp, owner = rfc3339(time.time()), str(uuid.uuid4())
    for number in range(pods):
        doc = _pod(f"{app}-{number:05d}", app, owner, cpu=cpu, memory=memory)
        doc["status"] = {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                            "message": "0/1 nodes are available", "lastTransitionTime": stamp}],
        }  # fmt: skip
        store.create("pods", doc)
    return pods


_MANIFESTS = Path(__file__).resolve().parent / "manifests"


@dataclass(frozen=True, slots=True)
class FullCluster:
    """The cluster :func:`fill` builds: ``nodes`` Ready m5.large spot nodes, ``pods`` Running pods spread evenly
    over them and sized so they fill the nodes' allocatable CPU, and ``pending`` unschedulable pods requesting
    ``pending_cpu`` (a Kubernetes quantity) each."""

    nodes: int
    pods: int
    pending: int = 0
    pending_cpu: str = "1"

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.pods < 0 or self.pending < 0:
            raise ValueError(
                f"a full cluster needs nodes >= 1, pods >= 0 and pending >= 0 (got nodes={self.nodes}, "
                f"pods={self.pods}, pending={self.pending})"
            )

    @property
    def pods_per_node(self) -> int:
        """Running pods per node (rounded up)."""
        return max(1, -(-self.pods // self.nodes))

    @property
    def running_pod_cpu(self) -> str:
        """Each Running pod's CPU request: an equal share of m5.large's allocatable millicores, 10m granular."""
        allocatable = int(M5_LARGE.allocatable["cpu"].removesuffix("m"))
        return f"{max(10, (allocatable // self.pods_per_node) // 10 * 10)}m"


def demo_nodepool_docs() -> list[dict[str, Any]]:
    """The demo's NodePool and EC2NodeClass (``sim/manifests/nodepool.yaml``), without the NodePool's ``limits``
    (a full cluster would be over the demo's CPU limit)."""
    import yaml

    docs = [d for d in yaml.safe_load_all((_MANIFESTS / "nodepool.yaml").read_text()) if d]
    next(d["spec"] for d in docs if d["kind"] == "NodePool").pop("limits", None)
    return docs


def fill(
    *, store: Store, ec2: Any, cluster_name: str, shape: FullCluster, kubelet_managed: bool = False
) -> dict[str, Any]:
    """Build ``shape`` in ``store`` (the emulator's) and ``ec2`` (a boto3 client of the embedded EC2): the NodePool
    and EC2NodeClass of :func:`demo_nodepool_docs`, the fleet (:func:`~nodesmith.sim.fleet.launch_fleet`), its
    Ready Nodes (``kubelet_managed``: see :func:`create_ready_nodes`), the Running pods and the pending ones.
    Returns ``{"running_pod_cpu", "pods_per_node"}``."""
    for doc in demo_nodepool_docs():
        store.apply(doc)
    fleet = launch_fleet(ec2=ec2, store=store, cluster_name=cluster_name, count=shape.nodes)
    create_ready_nodes(store, fleet, kubelet_managed=kubelet_managed)
    bind_running_pods(store, fleet, pods=shape.pods, cpu=shape.running_pod_cpu)
    add_pending_pods(store, pods=shape.pending, cpu=shape.pending_cpu)
    return {"running_pod_cpu": shape.running_pod_cpu, "pods_per_node": shape.pods_per_node}
