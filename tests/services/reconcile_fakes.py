"""In-memory Cluster, CloudProvider and TerminationQueue for the service tests, plus small factories.

The fakes follow the ports' contracts (``nodesmith.core.ports``): the cluster stores NodeClaims
like the API server (uid and creationTimestamp on create, status written separately; a DELETE of a
NodeClaim or Node that carries finalizers only sets its ``deletionTimestamp``, and it goes when its
last finalizer is removed), the cloud picks the cheapest allowed offering like CreateFleet
``lowest-price`` and raises ``InsufficientCapacityError`` naming the offerings it could not fill
(marking them unavailable, as the AWS provider's unavailable-offerings cache does), and the queue
records the termination requests sent to it.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from nodesmith.core.api.ec2nodeclass import EC2NodeClass
from nodesmith.core.api.nodepool import NodePool, NodePoolStatus
from nodesmith.core.errors import ConflictError, InsufficientCapacityError, NotFoundError, UnavailableOffering
from nodesmith.core.model import DaemonSet, InstanceType, Node, Offering, Pod, PodDisruptionBudget, Taint
from nodesmith.core.ports import Instance, InstanceFacts, LaunchRequest, LaunchResult, ObjectRef, PodEvent
from nodesmith.core.resources import parse_quantity
from nodesmith.core.scheduling.volumes import VolumeContext
from nodesmith.services.provisioning.capacity import to_rfc3339

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

    from nodesmith.core.api.nodeclaim import NodeClaim
    from nodesmith.core.termination import TerminationRequest

GIB = 2**30
ZONES = ("us-east-1a", "us-east-1b")
_WRITES = threading.Lock()


def make_type(name: str, vcpus: int, memory_gib: int, od_price: float, *, pods: int = 29) -> InstanceType:
    """An EC2-like instance type with spot (30% of on-demand) and on-demand offerings in two zones."""
    family, size = name.split(".", 1)
    labels = {
        "node.kubernetes.io/instance-type": name,
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "karpenter.k8s.aws/instance-category": family[0],
        "karpenter.k8s.aws/instance-family": family,
        "karpenter.k8s.aws/instance-generation": family[1],
        "karpenter.k8s.aws/instance-size": size,
        "karpenter.k8s.aws/instance-cpu": str(vcpus),
    }
    offerings = []
    for i, zone in enumerate(ZONES):
        offerings.append(Offering(zone=zone, capacity_type="spot", price=round(od_price * 0.3 + 0.001 * i, 5)))
        offerings.append(Offering(zone=zone, capacity_type="on-demand", price=od_price))
    return InstanceType(
        name=name,
        labels=labels,
        capacity={"cpu": vcpus * 1000, "memory": memory_gib * GIB, "pods": pods},
        overhead={"cpu": 100, "memory": GIB // 2},
        offerings=tuple(offerings),
    )


def catalogue() -> list[InstanceType]:
    """Four types: c5.large < m5.large < c5.xlarge < m5.xlarge by price."""
    return [
        make_type("c5.large", 2, 4, 0.085),
        make_type("m5.large", 2, 8, 0.096),
        make_type("c5.xlarge", 4, 8, 0.17),
        make_type("m5.xlarge", 4, 16, 0.192),
    ]


def make_nodepool(
    name: str = "default",
    *,
    requirements: list[dict[str, Any]] | None = None,
    weight: int | None = None,
    limits: dict[str, str] | None = None,
    startup_taints: list[dict[str, str]] | None = None,
    labels: dict[str, str] | None = None,
) -> NodePool:
    """A validated NodePool on EC2NodeClass ``default`` (spot and on-demand, linux)."""
    spec: dict[str, Any] = {
        "template": {
            "metadata": {"labels": labels or {"team": "platform"}},
            "spec": {
                "requirements": requirements
                or [
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                    {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                ],
                "startupTaints": startup_taints or [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            },
        }
    }
    if weight is not None:
        spec["weight"] = weight
    if limits is not None:
        spec["limits"] = limits
    return NodePool.model_validate(
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": name, "uid": f"uid-{name}"},
            "spec": spec,
        }
    )


def make_nodeclass(name: str = "default") -> EC2NodeClass:
    """A validated EC2NodeClass (al2023 alias, discovery tags)."""
    return EC2NodeClass.model_validate(
        {
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": name},
            "spec": {
                "role": "KarpenterNodeRole-test",
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test"}}],
                "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test"}}],
            },
        }
    )


_seq = itertools.count(1)


def make_pod(name: str, *, cpu: str = "1", memory: str = "1Gi", created: float = 900.0, **kwargs: Any) -> Pod:
    """A pending pod that kube-scheduler marked Unschedulable (requests include ``pods: 1``)."""
    return Pod(
        namespace="default",
        name=name,
        uid=f"uid-{name}",
        requests={
            "cpu": parse_quantity(cpu, resource="cpu"),
            "memory": parse_quantity(memory, resource="memory"),
            "pods": 1,
        },
        creation_timestamp=created,
        **{"unschedulable": True, "owner_kind": "ReplicaSet", "owner_name": "inflate-abc", **kwargs},
    )


@dataclass
class FakeCluster:
    """The Cluster port over plain lists; ``now`` (epoch seconds) stamps created NodeClaims."""

    now: float = 1000.0
    nodes: list[Node] = field(default_factory=list)
    pods: list[Pod] = field(default_factory=list)
    daemonsets: list[DaemonSet] = field(default_factory=list)
    nodepools: list[NodePool] = field(default_factory=list)
    nodeclasses: list[EC2NodeClass] = field(default_factory=list)
    nodeclaims: dict[str, NodeClaim] = field(default_factory=dict)
    events: list[tuple[str, str, str, str]] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    deleted_nodeclaims: list[str] = field(default_factory=list)
    deleted_nodes: list[str] = field(default_factory=list)
    volumes: VolumeContext = field(default_factory=VolumeContext)
    volume_reads: int = 0

    def list_pods(self, *, node_name: str | None = None) -> list[Pod]:
        return [p for p in self.pods if node_name is None or p.node_name == node_name]

    def list_nodes(self) -> list[Node]:
        return list(self.nodes)

    def list_daemonsets(self) -> list[DaemonSet]:
        return list(self.daemonsets)

    def list_pdbs(self) -> list[PodDisruptionBudget]:
        return []

    def list_nodepools(self) -> list[NodePool]:
        return list(self.nodepools)

    def list_ec2nodeclasses(self) -> list[EC2NodeClass]:
        return list(self.nodeclasses)

    def list_nodeclaims(self) -> list[NodeClaim]:
        return [nc.model_copy(deep=True) for nc in self.nodeclaims.values()]

    def patch_ec2nodeclass_status(self, *, name: str, status: Mapping[str, Any]) -> EC2NodeClass:
        """Merge ``status`` into the stored class's status, as the API server's merge patch does."""
        (position, found), *_ = [(i, nc) for i, nc in enumerate(self.nodeclasses) if nc.name == name]
        doc = found.model_dump(by_alias=True, exclude_none=True, mode="json")
        written = EC2NodeClass.model_validate({**doc, "status": {**(doc.get("status") or {}), **status}})
        self.nodeclasses[position] = written
        return written

    def volume_context(self) -> VolumeContext:
        self.volume_reads += 1
        return self.volumes

    def create_nodeclaim(self, *, nodeclaim: NodeClaim) -> NodeClaim:
        if nodeclaim.name in self.nodeclaims:
            raise ConflictError(f"nodeclaim {nodeclaim.name} exists", status=409)
        stored = nodeclaim.model_copy(deep=True)
        stored.metadata.uid = f"uid-{next(_seq)}"
        stored.metadata.creation_timestamp = to_rfc3339(self.now)
        stored.status = type(stored.status)()  # the status subresource is not written on create
        self.nodeclaims[stored.name] = stored
        self.created.append(stored.name)
        return stored.model_copy(deep=True)

    def update_nodeclaim_status(self, *, nodeclaim: NodeClaim) -> NodeClaim:
        stored = self.nodeclaims[nodeclaim.name]
        stored.status = nodeclaim.status.model_copy(deep=True)
        return stored.model_copy(deep=True)

    def update_nodepool_status(self, *, name: str, status: Mapping[str, Any]) -> None:
        pool = next((p for p in self.nodepools if p.name == name), None)
        if pool is None:
            raise NotFoundError(f"nodepool {name} not found", status=404)
        merged = {**(pool.status.model_dump(by_alias=True, exclude_none=True) if pool.status else {}), **status}
        pool.status = NodePoolStatus.model_validate(merged)

    def label_nodeclaim(self, *, name: str, labels: Mapping[str, str]) -> None:
        if name not in self.nodeclaims:
            raise NotFoundError(f"nodeclaim {name} not found", status=404)
        self.nodeclaims[name].metadata.labels.update(labels)

    def annotate_nodeclaim(
        self, *, name: str, annotations: Mapping[str, str], resource_version: str | None = None
    ) -> None:
        if name not in self.nodeclaims:
            raise NotFoundError(f"nodeclaim {name} not found", status=404)
        claim = self.nodeclaims[name]
        if resource_version is not None and resource_version != claim.metadata.resource_version:
            raise ConflictError(f"nodeclaim {name}: the object has been modified", status=409)
        claim.metadata.annotations.update(annotations)

    def delete_nodeclaim(self, *, name: str) -> None:
        """DELETE: a NodeClaim with finalizers is only marked (``deletionTimestamp``), one without goes."""
        with _WRITES:  # garbage collection deletes from several threads
            claim = self.nodeclaims.get(name)
            if claim is None:
                return
            if claim.metadata.finalizers:
                if claim.metadata.deletion_timestamp is None:
                    claim.metadata.deletion_timestamp = to_rfc3339(self.now)
                return
            del self.nodeclaims[name]
            self.deleted_nodeclaims.append(name)

    def remove_nodeclaim_finalizer(self, *, name: str, finalizer: str) -> None:
        """Remove ``finalizer``; a deleting NodeClaim left with none goes."""
        with _WRITES:
            claim = self.nodeclaims.get(name)
            if claim is None:
                return
            claim.metadata.finalizers = [f for f in claim.metadata.finalizers if f != finalizer]
            if claim.metadata.deletion_timestamp is not None and not claim.metadata.finalizers:
                del self.nodeclaims[name]
                self.deleted_nodeclaims.append(name)

    def deleting(self) -> list[str]:
        """Names of the NodeClaims being deleted (``deletionTimestamp`` set, kept by a finalizer)."""
        return sorted(name for name, nc in self.nodeclaims.items() if nc.metadata.deletion_timestamp is not None)

    def get_node(self, *, name: str) -> Node | None:
        return next((n for n in self.nodes if n.name == name), None)

    def get_nodeclaim(self, *, name: str) -> NodeClaim | None:
        claim = self.nodeclaims.get(name)
        return claim.model_copy(deep=True) if claim is not None else None

    def taint_and_cordon(self, *, node_name: str, taint: Taint) -> bool:
        raise NotImplementedError

    def untaint_and_uncordon(self, *, node_name: str, taint_key: str) -> bool:
        self.nodes = [
            replace(n, taints=tuple(t for t in n.taints if t.key != taint_key), unschedulable=False)
            if n.name == node_name
            else n
            for n in self.nodes
        ]
        return any(n.name == node_name for n in self.nodes)

    def label_node(self, *, node_name: str, labels: Mapping[str, str], finalizers: Sequence[str] = ()) -> None:
        self.nodes = [
            replace(
                n,
                labels={**n.labels, **labels},
                finalizers=(*n.finalizers, *(f for f in dict.fromkeys(finalizers) if f not in n.finalizers)),
            )
            if n.name == node_name
            else n
            for n in self.nodes
        ]

    def cordoned_node_names(self) -> set[str]:
        return {n.name for n in self.nodes if n.unschedulable}

    def evict(self, *, pod: Pod, grace_period_seconds: int | None = None) -> str:
        raise NotImplementedError

    def delete_pod(self, *, pod: Pod, grace_period_seconds: int | None = None) -> None:
        raise NotImplementedError

    def delete_node(self, *, name: str) -> None:
        """DELETE: a Node with finalizers is only marked (``deletionTimestamp``), one without goes."""
        with _WRITES:  # garbage collection deletes from several threads
            node = self.get_node(name=name)
            if node is None:
                return
            if node.finalizers:
                if node.deletion_timestamp is None:
                    self.nodes = [replace(n, deletion_timestamp=self.now) if n.name == name else n for n in self.nodes]
                return
            self.nodes = [n for n in self.nodes if n.name != name]
            self.deleted_nodes.append(name)

    def remove_node_finalizer(self, *, name: str, finalizer: str) -> None:
        """Remove ``finalizer``; a deleting Node left with none goes."""
        with _WRITES:
            node = self.get_node(name=name)
            if node is None:
                return
            left = tuple(f for f in node.finalizers if f != finalizer)
            if node.deletion_timestamp is not None and not left:
                self.nodes = [n for n in self.nodes if n.name != name]
                self.deleted_nodes.append(name)
                return
            self.nodes = [replace(n, finalizers=left) if n.name == name else n for n in self.nodes]

    def record_event(self, *, ref: ObjectRef, reason: str, message: str, type_: str = "Normal") -> None:
        self.events.append((ref.kind, ref.name, reason, message))

    def watch_pods(
        self, *, resource_version: str = "", unscheduled_only: bool = True, timeout_seconds: int = 60
    ) -> Iterator[PodEvent]:
        """A list only: the fake keeps no change feed, so a resumed watch raises (callers retry)."""
        from nodesmith.core.errors import KubernetesError

        if resource_version:
            raise KubernetesError("the fake cluster cannot resume a watch", status=503)
        pods = tuple(p for p in self.pods if not unscheduled_only or p.node_name is None)
        yield PodEvent(type="SYNCED", pods=pods, resource_version="1")

    def reasons(self, kind: str) -> list[str]:
        """Event reasons posted on objects of ``kind``."""
        return [reason for k, _, reason, _ in self.events if k == kind]


@dataclass
class FakeCloud:
    """The CloudProvider port: picks the cheapest allowed offering (spot first when allowed).

    ``ice`` holds ``(type, zone, capacity type)`` that always answer InsufficientInstanceCapacity.
    """

    types: list[InstanceType] = field(default_factory=catalogue)
    ice: set[tuple[str, str, str]] = field(default_factory=set)
    now: float = 1000.0
    cluster_name: str = "test"
    instances: dict[str, Instance] = field(default_factory=dict)
    requests: list[LaunchRequest] = field(default_factory=list)
    terminated: list[str] = field(default_factory=list)
    marked: set[tuple[str, str, str]] = field(default_factory=set)
    facts_read: list[str] = field(default_factory=list)

    def instance_types(self, *, nodeclass: EC2NodeClass | None = None) -> list[InstanceType]:
        out = []
        for it in self.types:
            offerings = tuple(
                replace(o, available=False) if (it.name, o.zone, o.capacity_type) in self.marked else o
                for o in it.offerings
            )
            out.append(replace(it, offerings=offerings))
        return out

    def create(self, *, request: LaunchRequest) -> LaunchResult:
        self.requests.append(request)
        spot = "spot" in request.capacity_types and any(
            o.capacity_type == "spot" and o.available and o.zone in request.zones
            for it in request.instance_types
            for o in it.offerings
        )
        ct = "spot" if spot else "on-demand"
        candidates = sorted(
            (o.price, it.name, o.zone)
            for it in request.instance_types
            for o in it.offerings
            if o.capacity_type == ct
            and o.zone in request.zones
            and o.available
            and (it.name, o.zone, ct) not in self.marked
        )
        failed = []
        for price, name, zone in candidates:
            if (name, zone, ct) in self.ice:
                failed.append(UnavailableOffering(name, zone, ct, "InsufficientInstanceCapacity"))
                continue
            iid = f"i-{len(self.instances) + 1:017x}"
            self.instances[iid] = Instance(
                instance_id=iid,
                instance_type=name,
                zone=zone,
                capacity_type=ct,
                state="running",
                launch_time=self.now,
                private_dns_name=f"ip-10-0-0-{len(self.instances) + 1}.ec2.internal",
                image_id="ami-123",
                tags=dict(request.tags),
            )
            return LaunchResult(iid, name, zone, ct, "ami-123", price)
        self.marked.update((f.instance_type, f.zone, f.capacity_type) for f in failed)
        raise InsufficientCapacityError("all offerings failed", offerings=tuple(failed))

    def list_instances(self) -> list[Instance]:
        # the pass lists the fleet in a thread of its own while it launches: copy before filtering
        return [i for i in list(self.instances.values()) if i.state != "terminated"]

    def get_instance(self, *, instance_id: str) -> Instance | None:
        return self.instances.get(instance_id)

    def get_instances(self, *, instance_ids: Sequence[str]) -> dict[str, Instance]:
        return {i: self.instances[i] for i in instance_ids if i in self.instances}

    def instance_facts(self, *, instance_ids: Sequence[str]) -> dict[str, InstanceFacts]:
        self.facts_read.extend(instance_ids)
        return {i: InstanceFacts.of(self.instances[i]) for i in instance_ids if i in self.instances}

    def terminate(self, *, instance_ids: Sequence[str]) -> None:
        for iid in instance_ids:
            if iid in self.instances:
                self.instances[iid] = replace(self.instances[iid], state="terminated")
                self.terminated.append(iid)

    def mark_unavailable(self, *, offerings: Sequence[UnavailableOffering]) -> None:
        self.marked.update((o.instance_type, o.zone, o.capacity_type) for o in offerings)


@dataclass
class ListingCloud(FakeCloud):
    """A :class:`FakeCloud` that records the clock (``now``) of every listing of the fleet."""

    listings: list[float] = field(default_factory=list)

    def list_instances(self) -> list[Instance]:
        self.listings.append(self.now)
        return super().list_instances()


@dataclass
class FakeQueue:
    """The TerminationQueue port: records every request sent; ``failing`` NodeClaim names are refused."""

    sent: list[TerminationRequest] = field(default_factory=list)
    failing: set[str] = field(default_factory=set)

    def send(self, *, requests: Sequence[TerminationRequest]) -> list[str]:
        problems = [f"{r.nodeclaim}: queue refused it" for r in requests if r.nodeclaim in self.failing]
        self.sent.extend(r for r in requests if r.nodeclaim not in self.failing)
        return problems

    def nodeclaims(self) -> list[str]:
        """The NodeClaims named by the requests sent, in order."""
        return [r.nodeclaim for r in self.sent]


def node_for(instance: Instance, nodeclaim: NodeClaim, *, ready: bool, taints: tuple[Taint, ...] = ()) -> Node:
    """The Node a kubelet would register for ``instance`` (allocatable from the NodeClaim's status)."""
    return Node(
        name=instance.private_dns_name,
        provider_id=instance.provider_id,
        labels={
            **nodeclaim.metadata.labels,
            "node.kubernetes.io/instance-type": instance.instance_type,
            "topology.kubernetes.io/zone": instance.zone,
            "karpenter.sh/capacity-type": instance.capacity_type,
            "kubernetes.io/hostname": instance.private_dns_name,
        },
        taints=taints,
        allocatable=nodeclaim.allocatable_core(),
        ready=ready,
    )


def two_running_nodes() -> tuple[FakeCluster, FakeCloud]:
    """Two registered, initialized nodes launched by two reconcile passes, each running two pods of 1.5 CPU; their
    NodeClaims versioned as the API server returns them (a uid and a ``resourceVersion``)."""
    from nodesmith.services.ports import Ports
    from nodesmith.services.provisioning.reconcile import reconcile

    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])
    cluster.pods = [make_pod(f"inflate-{i}", cpu="1500m") for i in range(4)]
    cloud = FakeCloud()
    for now in (1000.0, 1001.0):
        cluster.now = cloud.now = now
        reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test", queue=None), now=now)
    for i, claim in enumerate(sorted(cluster.nodeclaims.values(), key=lambda c: c.name)):
        inst = next(x for x in cloud.instances.values() if x.provider_id == claim.status.provider_id)
        cluster.nodes.append(node_for(inst, claim, ready=True))
        claim.metadata.resource_version = str(10 + i)
    by_node = [n.name for n in cluster.nodes for _ in range(2)]
    cluster.pods = [
        replace(p, node_name=name, unschedulable=False, phase="Running")
        for p, name in zip(cluster.pods, by_node, strict=True)
    ]
    return cluster, cloud
