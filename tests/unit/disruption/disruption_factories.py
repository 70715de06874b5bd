"""Factories for disruption tests: a realistic EC2 catalogue, NodePools, nodes with their pods,
NodeClaims, EC2NodeClasses and PDBs.

Imported as ``disruption_factories`` (not ``conftest``): test directories share one ``sys.path``, so
a second ``conftest`` module would shadow the scheduler tests' one depending on collection order.

Instance types carry the labels Karpenter's AWS provider computes and offerings in two zones of
us-east-1 for spot and on-demand (on-demand prices are the public us-east-1 Linux prices; spot is a
fixed fraction of them). Overhead approximates the EKS AMI reservation so allocatable < capacity.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from nodesmith.core.api.ec2nodeclass import EC2NodeClass
from nodesmith.core.api.nodeclaim import NodeClaim
from nodesmith.core.api.nodepool import NodePool
from nodesmith.core.disruption.types import ClusterNode
from nodesmith.core.model import InstanceType, LabelSelector, Node, Offering, Pod, PodDisruptionBudget, Taint
from nodesmith.core.resources import parse_quantity

ZONES = ("us-east-1a", "us-east-1b")
GIB = 2**30
MIB = 2**20
NOW = 1_760_000_000.0  # 2025-10-09T08:53:20Z
HOUR = 3600.0
DAY = 86400.0

# (name, vCPUs, memory GiB, max pods, on-demand USD/hour in us-east-1)
CATALOGUE_SPEC: tuple[tuple[str, int, int, int, float], ...] = (
    ("t3.medium", 2, 4, 17, 0.0416),
    ("t3.large", 2, 8, 35, 0.0832),
    ("t3.xlarge", 4, 16, 58, 0.1664),
    ("c5.large", 2, 4, 29, 0.085),
    ("c5.xlarge", 4, 8, 58, 0.17),
    ("c5.2xlarge", 8, 16, 58, 0.34),
    ("c5.4xlarge", 16, 32, 234, 0.68),
    ("c6i.large", 2, 4, 29, 0.085),
    ("c6i.xlarge", 4, 8, 58, 0.17),
    ("c6i.2xlarge", 8, 16, 58, 0.34),
    ("c7i.large", 2, 4, 29, 0.08925),
    ("c7i.xlarge", 4, 8, 58, 0.1785),
    ("m5.large", 2, 8, 29, 0.096),
    ("m5.xlarge", 4, 16, 58, 0.192),
    ("m5.2xlarge", 8, 32, 58, 0.384),
    ("m5.4xlarge", 16, 64, 234, 0.768),
    ("m6i.large", 2, 8, 29, 0.096),
    ("m6i.xlarge", 4, 16, 58, 0.192),
    ("m6i.2xlarge", 8, 32, 58, 0.384),
    ("m7i.large", 2, 8, 29, 0.1008),
    ("m7i.xlarge", 4, 16, 58, 0.2016),
    ("r5.large", 2, 16, 29, 0.126),
    ("r5.xlarge", 4, 32, 58, 0.252),
    ("r6i.large", 2, 16, 29, 0.126),
    ("r6i.xlarge", 4, 32, 58, 0.252),
)
SPOT_FACTOR = 0.35


def kube_reserved_cpu(vcpus: int) -> int:
    """EKS AMI kube-reserved cpu (millicores) for ``vcpus`` cores."""
    reserved = 60.0 + (10 if vcpus > 1 else 0) + 5 * max(0, min(vcpus, 4) - 2) + 2.5 * max(0, vcpus - 4)
    return int(reserved)


def make_type(
    name: str, vcpus: int, memory_gib: int, pods: int, od_price: float, *, spot_factor: float = SPOT_FACTOR
) -> InstanceType:
    """An EC2-like instance type with spot and on-demand offerings in :data:`ZONES`."""
    family, size = name.split(".", 1)
    match = re.match(r"^([a-z]+)(\d)", family)
    assert match, name
    labels = {
        "node.kubernetes.io/instance-type": name,
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "karpenter.k8s.aws/instance-category": match.group(1),
        "karpenter.k8s.aws/instance-family": family,
        "karpenter.k8s.aws/instance-generation": match.group(2),
        "karpenter.k8s.aws/instance-size": size,
        "karpenter.k8s.aws/instance-cpu": str(vcpus),
        "karpenter.k8s.aws/instance-memory": str(memory_gib * 1024),
    }
    capacity = {"cpu": vcpus * 1000, "memory": memory_gib * GIB, "pods": pods, "ephemeral-storage": 20 * GIB}
    overhead = {"cpu": kube_reserved_cpu(vcpus), "memory": (11 * pods + 255) * MIB + 100 * MIB}
    offerings = []
    for i, zone in enumerate(ZONES):
        offerings.append(Offering(zone=zone, capacity_type="on-demand", price=od_price))
        offerings.append(Offering(zone=zone, capacity_type="spot", price=round(od_price * (spot_factor + 0.01 * i), 5)))
    return InstanceType(name=name, labels=labels, capacity=capacity, overhead=overhead, offerings=tuple(offerings))


def catalogue() -> list[InstanceType]:
    """The whole test catalogue (25 types)."""
    return [make_type(*spec) for spec in CATALOGUE_SPEC]


def by_name(name: str) -> InstanceType:
    """One catalogue type by name."""
    for spec in CATALOGUE_SPEC:
        if spec[0] == name:
            return make_type(*spec)
    raise KeyError(name)


def make_nodepool(
    name: str = "default",
    *,
    capacity_types: tuple[str, ...] = ("on-demand",),
    requirements: list[dict[str, Any]] | None = None,
    policy: str = "WhenEmptyOrUnderutilized",
    consolidate_after: str = "0s",
    budgets: list[dict[str, Any]] | None = None,
    expire_after: str = "720h",
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    termination_grace_period: str | None = None,
    nodeclass: str = "default",
) -> NodePool:
    """A validated karpenter.sh/v1 NodePool; budgets default to Karpenter's ``[{nodes: 10%}]``
    unless given (most tests pass ``[{"nodes": "100%"}]`` to see the method, not the budget)."""
    reqs = (
        requirements
        if requirements is not None
        else [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": list(capacity_types)},
            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
        ]
    )
    template_spec: dict[str, Any] = {
        "requirements": reqs,
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": nodeclass},
        "expireAfter": expire_after,
    }
    if taints:
        template_spec["taints"] = taints
    if termination_grace_period:
        template_spec["terminationGracePeriod"] = termination_grace_period
    disruption: dict[str, Any] = {"consolidationPolicy": policy, "consolidateAfter": consolidate_after}
    if budgets is not None:
        disruption["budgets"] = budgets
    return NodePool.model_validate(
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": name},
            "spec": {
                "template": {"metadata": {"labels": labels or {}}, "spec": template_spec},
                "disruption": disruption,
            },
        }
    )


def make_nodeclass(
    name: str = "default", *, ami: str = "ami-0aaaaaaaaaaaaaaa1", user_data: str | None = None, **status: Any
) -> EC2NodeClass:
    """An EC2NodeClass selecting one AMI, subnets and a security group by id."""
    spec: dict[str, Any] = {
        "role": "KarpenterNodeRole",
        "amiSelectorTerms": [{"id": ami}],
        "subnetSelectorTerms": [{"id": "subnet-0aaa"}, {"id": "subnet-0bbb"}],
        "securityGroupSelectorTerms": [{"id": "sg-0aaa"}],
        "amiFamily": "AL2023",
    }
    if user_data is not None:
        spec["userData"] = user_data
    doc: dict[str, Any] = {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": name},
        "spec": spec,
    }
    if status:
        doc["status"] = status
    return EC2NodeClass.model_validate(doc)


_pod_counter = iter(range(1, 10**9))


def make_pod(
    name: str | None = None,
    *,
    cpu: str = "500m",
    memory: str = "512Mi",
    namespace: str = "default",
    node: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    owner_kind: str | None = "ReplicaSet",
    created: float = NOW - DAY,
    started: float | None = None,
    **kwargs: Any,
) -> Pod:
    """A Running pod bound to ``node`` (or a pending, Unschedulable one when ``node`` is None); a bound pod
    started when it was ``created`` unless ``started`` says otherwise."""
    n = next(_pod_counter)
    name = name or f"pod-{n:05d}"
    requests = {
        "cpu": parse_quantity(cpu, resource="cpu"),
        "memory": parse_quantity(memory, resource="memory"),
        "pods": 1,
    }
    return Pod(
        namespace=namespace,
        name=name,
        uid=f"uid-{namespace}-{name}",
        labels=labels or {"app": name},
        annotations=annotations or {},
        requests=requests,
        node_name=node,
        owner_kind=owner_kind,
        owner_name=f"{name}-owner" if owner_kind else None,
        creation_timestamp=created,
        start_time=started if started is not None else (created if node else None),
        **{"phase": "Running" if node else "Pending", "unschedulable": node is None, **kwargs},
    )


def daemon_pod(node: str, *, name: str = "aws-node", cpu: str = "50m", memory: str = "64Mi") -> Pod:
    """A DaemonSet pod running on ``node``."""
    return make_pod(
        f"{name}-{node}", cpu=cpu, memory=memory, namespace="kube-system", node=node, owner_kind="DaemonSet"
    )


def iso(ts: float) -> str:
    """Epoch seconds as an RFC 3339 UTC string."""
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def make_nodeclaim(
    name: str,
    *,
    node: str,
    nodepool: str = "default",
    instance_type: str = "m5.xlarge",
    zone: str = "us-east-1a",
    capacity_type: str = "on-demand",
    created: float = NOW - DAY,
    annotations: dict[str, str] | None = None,
    image_id: str = "ami-0aaaaaaaaaaaaaaa1",
    expire_after: str = "720h",
    conditions: list[dict[str, Any]] | None = None,
    termination_grace_period: str | None = None,
) -> NodeClaim:
    """A launched, registered and initialized NodeClaim bound to ``node``."""
    spec: dict[str, Any] = {
        "requirements": [{"key": "karpenter.sh/nodepool", "operator": "In", "values": [nodepool]}],
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        "expireAfter": expire_after,
    }
    if termination_grace_period:
        spec["terminationGracePeriod"] = termination_grace_period
    conds = (
        conditions
        if conditions is not None
        else [
            {"type": t, "status": "True", "lastTransitionTime": iso(created + 60)}
            for t in ("Launched", "Registered", "Initialized")
        ]
    )
    return NodeClaim.model_validate(
        {
            "metadata": {
                "name": name,
                "creationTimestamp": iso(created),
                "labels": {
                    "karpenter.sh/nodepool": nodepool,
                    "node.kubernetes.io/instance-type": instance_type,
                    "topology.kubernetes.io/zone": zone,
                    "karpenter.sh/capacity-type": capacity_type,
                },
                "annotations": annotations or {},
            },
            "spec": spec,
            "status": {"nodeName": node, "imageID": image_id, "conditions": conds},
        }
    )


def make_node(
    name: str,
    *,
    instance_type: str = "m5.xlarge",
    zone: str = "us-east-1a",
    capacity_type: str = "on-demand",
    nodepool: str | None = "default",
    pods: tuple[Pod, ...] = (),
    pod_specs: list[tuple[str, str]] | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    taints: tuple[Taint, ...] = (),
    created: float = NOW - DAY,
    ready: bool = True,
    nodeclaim: NodeClaim | None = None,
    last_pod_event: float | None = None,
    daemonsets: bool = True,
    **facts: Any,
) -> ClusterNode:
    """A ready, initialized node of ``instance_type`` with its pods (``pod_specs``: (cpu, memory) each).

    The node's allocatable is the instance type's; a DaemonSet pod runs on it unless ``daemonsets``
    is False.
    """
    it = by_name(instance_type)
    all_labels = {
        **it.labels,
        "kubernetes.io/hostname": name,
        "topology.kubernetes.io/zone": zone,
        "karpenter.sh/capacity-type": capacity_type,
        "karpenter.sh/initialized": "true",
        **(labels or {}),
    }
    if nodepool is not None:
        all_labels["karpenter.sh/nodepool"] = nodepool
    bound = list(pods) + [make_pod(cpu=c, memory=m, node=name) for c, m in (pod_specs or [])]
    if daemonsets:
        bound.append(daemon_pod(name))
    node = Node(
        name=name,
        provider_id=f"aws:///{zone}/i-{abs(hash(name)) % 10**12:012d}",
        labels=all_labels,
        annotations=annotations or {},
        taints=taints,
        allocatable=it.allocatable,
        capacity=dict(it.capacity),
        ready=ready,
        creation_timestamp=created,
    )
    return ClusterNode(node=node, pods=tuple(bound), nodeclaim=nodeclaim, last_pod_event_time=last_pod_event, **facts)


def make_pdb(
    name: str, *, app: str, namespace: str = "default", allowed: int | None = None, **spec: Any
) -> PodDisruptionBudget:
    """A PDB selecting ``app=<app>``."""
    return PodDisruptionBudget(
        namespace=namespace,
        name=name,
        selector=LabelSelector(match_labels=(("app", app),)),
        disruptions_allowed=allowed,
        **spec,
    )
