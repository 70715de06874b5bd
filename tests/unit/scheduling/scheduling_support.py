"""Factories for scheduler tests: realistic EC2 instance types, NodePools, pods, nodes, DaemonSets.

Instance types carry the labels Karpenter's AWS provider computes (instance-type, arch, os,
karpenter.k8s.aws/instance-category/-family/-generation/-size/-cpu/-memory) and offerings in three
zones x {spot, on-demand}. Overhead is a simple, fixed approximation of the EKS AMI reservation
(kube-reserved cpu ~ 6% of the first core + 1%/0.5%/0.25% tiers, memory 11 MiB x pods + 255 MiB,
100 MiB eviction threshold), enough to make allocatable < capacity as in reality.
"""

from __future__ import annotations

import re
from typing import Any

from nodesmith.core.api.nodepool import NodePool
from nodesmith.core.model import (
    DaemonSet,
    InstanceType,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Offering,
    Pod,
    Taint,
    Toleration,
)
from nodesmith.core.resources import parse_quantity
from nodesmith.core.scheduling.types import ExistingNode, SchedulingInput

ZONES = ("us-west-2a", "us-west-2b", "us-west-2c")
GIB = 2**30
MIB = 2**20


def kube_reserved_cpu(vcpus: int) -> int:
    """EKS AMI kube-reserved cpu in millicores for ``vcpus`` cores."""
    reserved = 60.0
    if vcpus > 1:
        reserved += 10
    if vcpus > 2:
        reserved += 5 * (min(vcpus, 4) - 2)
    if vcpus > 4:
        reserved += 2.5 * (vcpus - 4)
    return int(reserved)


def make_type(
    name: str,
    vcpus: int,
    memory_gib: float,
    *,
    pods: int = 58,
    arch: str = "amd64",
    gpus: int = 0,
    od_price: float | None = None,
    spot_factor: float = 0.4,
    zones: tuple[str, ...] = ZONES,
    unavailable: frozenset[tuple[str, str]] = frozenset(),
    extra_labels: dict[str, str] | None = None,
) -> InstanceType:
    """An EC2-like instance type. ``unavailable`` holds (zone, capacity type) offerings marked unavailable."""
    family, size = name.split(".", 1)
    match = re.match(r"^([a-z]+)(\d)", family)
    assert match, name
    category, generation = match.group(1), match.group(2)
    memory = int(memory_gib * GIB)
    price = od_price if od_price is not None else round(0.034 * vcpus + 0.0045 * memory_gib + 0.5 * gpus, 4)
    labels = {
        "node.kubernetes.io/instance-type": name,
        "kubernetes.io/arch": arch,
        "kubernetes.io/os": "linux",
        "karpenter.k8s.aws/instance-category": category,
        "karpenter.k8s.aws/instance-family": family,
        "karpenter.k8s.aws/instance-generation": generation,
        "karpenter.k8s.aws/instance-size": size,
        "karpenter.k8s.aws/instance-cpu": str(vcpus),
        "karpenter.k8s.aws/instance-memory": str(int(memory_gib * 1024)),
        **(extra_labels or {}),
    }
    capacity = {"cpu": vcpus * 1000, "memory": memory, "pods": pods, "ephemeral-storage": 20 * GIB}
    if gpus:
        capacity["nvidia.com/gpu"] = gpus
        labels["karpenter.k8s.aws/instance-gpu-count"] = str(gpus)
        labels["karpenter.k8s.aws/instance-gpu-manufacturer"] = "nvidia"
    overhead = {"cpu": kube_reserved_cpu(vcpus), "memory": (11 * pods + 255) * MIB + 100 * MIB}
    offerings = []
    for i, zone in enumerate(zones):
        for ct, factor in (("spot", spot_factor + 0.01 * i), ("on-demand", 1.0)):
            offerings.append(
                Offering(
                    zone=zone, capacity_type=ct, price=round(price * factor, 5), available=(zone, ct) not in unavailable
                )
            )
    return InstanceType(name=name, labels=labels, capacity=capacity, overhead=overhead, offerings=tuple(offerings))


def catalogue() -> list[InstanceType]:
    """A small realistic catalogue: compute, general, memory, Graviton and GPU types."""
    return [
        make_type("c5.large", 2, 4, pods=29, od_price=0.085),
        make_type("c5.xlarge", 4, 8, od_price=0.17),
        make_type("c5.2xlarge", 8, 16, od_price=0.34),
        make_type("c5.4xlarge", 16, 32, pods=234, od_price=0.68),
        make_type("m5.large", 2, 8, pods=29, od_price=0.096),
        make_type("m5.xlarge", 4, 16, od_price=0.192),
        make_type("m5.2xlarge", 8, 32, od_price=0.384),
        make_type("m5.4xlarge", 16, 64, pods=234, od_price=0.768),
        make_type("r5.large", 2, 16, pods=29, od_price=0.126),
        make_type("r5.xlarge", 4, 32, od_price=0.252),
        make_type("m6g.large", 2, 8, pods=29, arch="arm64", od_price=0.077),
        make_type("m6g.xlarge", 4, 16, arch="arm64", od_price=0.154),
        make_type("g4dn.xlarge", 4, 16, pods=29, gpus=1, od_price=0.526),
        make_type("g4dn.12xlarge", 48, 192, pods=234, gpus=4, od_price=3.912),
    ]


def make_nodepool(
    name: str = "default",
    *,
    requirements: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    startup_taints: list[dict[str, str]] | None = None,
    limits: dict[str, str] | None = None,
    weight: int | None = None,
) -> NodePool:
    """A validated karpenter.sh/v1 NodePool (defaults: linux, spot + on-demand)."""
    reqs = (
        requirements
        if requirements is not None
        else [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
        ]
    )
    spec: dict[str, Any] = {
        "template": {
            "metadata": {"labels": labels or {}},
            "spec": {
                "requirements": reqs,
                "taints": taints or [],
                "startupTaints": startup_taints or [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            },
        }
    }
    if limits is not None:
        spec["limits"] = limits
    if weight is not None:
        spec["weight"] = weight
    return NodePool.model_validate(
        {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}
    )


_counter = iter(range(1, 10**9))


def make_pod(
    name: str | None = None,
    *,
    cpu: str = "500m",
    memory: str = "512Mi",
    namespace: str = "default",
    extra: dict[str, int] | None = None,
    node_selector: dict[str, str] | None = None,
    affinity: list[list[tuple[str, str, tuple[str, ...]]]] | None = None,
    tolerations: tuple[Toleration, ...] = (),
    created: float | None = None,
    **kwargs: Any,
) -> Pod:
    """A pending pod (Unschedulable) with ``requests`` including ``pods: 1``.

    ``affinity`` is a list of ORed required node-affinity terms, each a list of (key, operator, values).
    """
    n = next(_counter)
    name = name or f"pod-{n:05d}"
    requests = {
        "cpu": parse_quantity(cpu, resource="cpu"),
        "memory": parse_quantity(memory, resource="memory"),
        "pods": 1,
    }
    requests.update(extra or {})
    terms = tuple(
        NodeSelectorTerm(tuple(NodeSelectorRequirement(k, op, vals) for k, op, vals in term))
        for term in (affinity or [])
    )
    return Pod(
        namespace=namespace,
        name=name,
        uid=f"uid-{name}",
        requests=requests,
        node_selector=node_selector or {},
        required_node_affinity=terms,
        tolerations=tolerations,
        creation_timestamp=created if created is not None else 1000.0 + n,
        **{"unschedulable": True, **kwargs},
    )


def make_node(
    name: str,
    *,
    cpu: str = "4",
    memory: str = "16Gi",
    pods: int = 58,
    zone: str = "us-west-2a",
    labels: dict[str, str] | None = None,
    taints: tuple[Taint, ...] = (),
    bound: tuple[Pod, ...] = (),
    initialized: bool = True,
    unschedulable: bool = False,
    startup_taints: tuple[Taint, ...] = (),
) -> ExistingNode:
    """An existing node with allocatable ``cpu``/``memory``/``pods`` and well-known labels."""
    all_labels = {
        "kubernetes.io/hostname": name,
        "topology.kubernetes.io/zone": zone,
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "m5.xlarge",
        "karpenter.sh/capacity-type": "on-demand",
        "karpenter.sh/nodepool": "default",
        **(labels or {}),
    }
    return ExistingNode(
        name=name,
        labels=all_labels,
        taints=taints,
        allocatable={
            "cpu": parse_quantity(cpu, resource="cpu"),
            "memory": parse_quantity(memory, resource="memory"),
            "pods": pods,
        },
        pods=bound,
        nodepool=all_labels.get("karpenter.sh/nodepool"),
        initialized=initialized,
        unschedulable=unschedulable,
        startup_taints=startup_taints,
    )


def make_daemonset(name: str, *, cpu: str = "100m", memory: str = "128Mi", **pod_kwargs: Any) -> DaemonSet:
    """A DaemonSet whose pod template requests ``cpu``/``memory``."""
    pod = Pod(
        namespace="kube-system",
        name=f"{name}-template",
        requests={
            "cpu": parse_quantity(cpu, resource="cpu"),
            "memory": parse_quantity(memory, resource="memory"),
            "pods": 1,
        },
        owner_kind="DaemonSet",
        owner_name=name,
        **pod_kwargs,
    )
    return DaemonSet(namespace="kube-system", name=name, pod=pod)


def make_input(
    pods: list[Pod],
    *,
    nodepools: list[NodePool] | None = None,
    types: list[InstanceType] | None = None,
    nodes: list[ExistingNode] | None = None,
    daemonsets: list[DaemonSet] | None = None,
    usage: dict[str, dict[str, int]] | None = None,
) -> SchedulingInput:
    """A SchedulingInput with the default catalogue and one default NodePool unless given."""
    return SchedulingInput(
        pods=pods,
        nodepools=nodepools if nodepools is not None else [make_nodepool()],
        instance_types=types if types is not None else catalogue(),
        existing_nodes=nodes or [],
        daemonsets=daemonsets or [],
        nodepool_usage=usage or {},
    )
