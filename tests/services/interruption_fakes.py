"""Fakes of the Cluster, CloudProvider and TerminationQueue ports for the interruption and termination tests.

The fake cluster plays the API server and the kubelet on a fake clock: a DELETE of a NodeClaim or Node that
carries finalizers only sets its ``deletionTimestamp`` (it goes when its last finalizer is removed); an accepted
eviction sets the pod's ``deletionTimestamp`` to now + its grace period and the pod disappears once the clock
passes it; PodDisruptionBudgets are modelled by a number of 429 answers per pod. Every call is recorded in
``calls``. The fake cloud describes and terminates instances; the fake queue records the requests it is sent.

Load it by path (see ``load_fakes`` in the tests): the test folders are not packages.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodesmith.core.api.nodeclaim import NodeClaim
from nodesmith.core.errors import ConflictError
from nodesmith.core.model import Node, Pod, Taint
from nodesmith.core.ports import Instance, ObjectRef
from nodesmith.core.termination import TERMINATION_FINALIZER
from nodesmith.core.timestamps import to_rfc3339
from nodesmith.services.ports import Ports

if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import ModuleType

    from nodesmith.core.errors import UnavailableOffering
    from nodesmith.core.termination import TerminationRequest

CLUSTER = "demo"
ACCOUNT = "123456789012"
REGION = "us-west-2"
NOW = 1_795_327_200.0  # 2026-11-22T06:00:00Z


def load(name: str = "nodesmith_tests_interruption_fakes") -> ModuleType:
    """This module, loaded by path (the test folders are not packages)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@dataclass
class Clock:
    """Wall-clock epoch seconds that only move when told."""

    now: float = NOW

    def __call__(self) -> float:
        return self.now


def make_node(name: str = "node-a", instance_id: str = "i-1234567890abcdef0", zone: str = "us-west-2a") -> Node:
    return Node(name=name, provider_id=f"aws:///{zone}/{instance_id}", ready=True, finalizers=(TERMINATION_FINALIZER,))


def make_pod(
    name: str,
    *,
    node: str = "node-a",
    namespace: str = "default",
    grace: int = 30,
    owner_kind: str | None = "ReplicaSet",
    priority_class_name: str = "",
    annotations: dict[str, str] | None = None,
    **kwargs: Any,
) -> Pod:
    return Pod(
        namespace=namespace,
        name=name,
        uid=f"uid-{namespace}-{name}",
        node_name=node,
        phase=kwargs.pop("phase", "Running"),
        owner_kind=owner_kind,
        priority_class_name=priority_class_name,
        annotations=annotations or {},
        termination_grace_period_seconds=grace,
        **kwargs,
    )


def make_instance(
    instance_id: str = "i-1234567890abcdef0",
    *,
    tags: dict[str, str] | None = None,
    nodeclaim: str = "default-abcde",
    state: str = "running",
    zone: str = "us-west-2a",
    capacity_type: str = "spot",
    dns: str = "",
) -> Instance:
    """One of our instances (cluster tag ``owned``, ``karpenter.sh/nodepool``, its NodeClaim's name) unless
    ``tags`` says otherwise."""
    if tags is None:
        tags = {
            f"kubernetes.io/cluster/{CLUSTER}": "owned",
            "karpenter.sh/nodepool": "default",
            "karpenter.sh/nodeclaim": nodeclaim,
        }
    return Instance(
        instance_id=instance_id,
        instance_type="m5.large",
        zone=zone,
        capacity_type=capacity_type,
        state=state,
        launch_time=NOW - 3600,
        private_dns_name=dns,
        tags=tags,
    )


def make_claim(
    name: str = "default-abcde",
    *,
    instance_id: str = "i-1234567890abcdef0",
    node: str | None = "node-a",
    zone: str = "us-west-2a",
    grace: str | None = None,
    annotations: dict[str, str] | None = None,
    deleted_at: float | None = None,
    launched: bool = True,
) -> NodeClaim:
    """A NodeClaim of NodePool ``default`` with Karpenter's finalizer, launched for ``instance_id`` and registered as
    ``node`` (``deleted_at``: epoch seconds it was deleted)."""
    spec: dict[str, Any] = {
        "requirements": [],
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
    }
    if grace is not None:
        spec["terminationGracePeriod"] = grace
    meta: dict[str, Any] = {
        "name": name,
        "resourceVersion": "1",
        "uid": f"uid-{name}",
        "labels": {"karpenter.sh/nodepool": "default"},
        "annotations": dict(annotations or {}),
        "finalizers": [TERMINATION_FINALIZER],
    }
    if deleted_at is not None:
        meta["deletionTimestamp"] = to_rfc3339(deleted_at)
    status = {"providerID": f"aws:///{zone}/{instance_id}", "nodeName": node} if launched else {}
    return NodeClaim.model_validate({"metadata": meta, "spec": spec, "status": status})


class FakeCloud:
    """CloudProvider fake: ``instances`` by id; ``terminate`` moves them to shutting-down."""

    def __init__(self, instances: Sequence[Instance] = ()) -> None:
        self.instances = {i.instance_id: i for i in instances}
        self.calls: list[tuple[str, Any]] = []
        self.marked: list[UnavailableOffering] = []

    def get_instance(self, *, instance_id: str) -> Instance | None:
        self.calls.append(("get_instance", instance_id))
        return self.instances.get(instance_id)

    def get_instances(self, *, instance_ids: Sequence[str]) -> dict[str, Instance]:
        self.calls.append(("get_instances", tuple(instance_ids)))
        return {i: self.instances[i] for i in instance_ids if i in self.instances}

    def terminate(self, *, instance_ids: Sequence[str]) -> None:
        self.calls.append(("terminate", tuple(instance_ids)))
        for iid in instance_ids:
            if iid in self.instances:
                self.instances[iid] = replace(self.instances[iid], state="shutting-down")

    def mark_unavailable(self, *, offerings: Sequence[UnavailableOffering]) -> None:
        self.calls.append(("mark_unavailable", tuple(offerings)))
        self.marked += offerings

    def list_instances(self) -> list[Instance]:
        return list(self.instances.values())

    def count(self, call: str) -> int:
        return sum(1 for name, _ in self.calls if name == call)


class FakeQueue:
    """TerminationQueue fake: records what it is sent and how many calls; ``refuse`` makes it report every request
    unsent, ``refuse_only`` the requests of those NodeClaims."""

    def __init__(self) -> None:
        self.sent: list[TerminationRequest] = []
        self.refuse = False
        self.refuse_only: set[str] = set()
        self.calls = 0

    def send(self, *, requests: Sequence[TerminationRequest]) -> list[str]:
        self.calls += 1
        refused = [r for r in requests if self.refuse or r.nodeclaim in self.refuse_only]
        self.sent += [r for r in requests if r not in refused]
        return [f"{r.nodeclaim}: AccessDenied" for r in refused]


@dataclass
class FakeCluster:
    """Cluster fake playing the API server and the kubelet on ``clock`` (see the module docstring)."""

    clock: Clock
    nodes: dict[str, Node] = field(default_factory=dict)
    nodeclaims: dict[str, NodeClaim] = field(default_factory=dict)
    pods: dict[str, Pod] = field(default_factory=dict)
    pdb_blocks: dict[str, int] = field(default_factory=dict)  # pod key -> 429 answers left (-1: forever)
    calls: list[tuple[str, Any]] = field(default_factory=list)
    events: list[tuple[str, str, str, str]] = field(default_factory=list)  # (kind, name, reason, type)

    @classmethod
    def of(
        cls, clock: Clock, *, nodes: Sequence[Node] = (), claims: Sequence[NodeClaim] = (), pods: Sequence[Pod] = ()
    ) -> FakeCluster:
        return cls(
            clock=clock,
            nodes={n.name: n for n in nodes},
            nodeclaims={c.name: c for c in claims},
            pods={p.key: p for p in pods},
        )

    def _reap(self) -> None:
        for key, pod in list(self.pods.items()):
            if pod.deletion_timestamp is not None and pod.deletion_timestamp <= self.clock():
                del self.pods[key]

    # -- reads
    def list_pods(self, *, node_name: str | None = None) -> list[Pod]:
        self.calls.append(("list_pods", node_name))
        self._reap()
        return [p for p in self.pods.values() if node_name is None or p.node_name == node_name]

    def get_node(self, *, name: str) -> Node | None:
        self.calls.append(("get_node", name))
        return self.nodes.get(name)

    def get_nodeclaim(self, *, name: str) -> NodeClaim | None:
        self.calls.append(("get_nodeclaim", name))
        claim = self.nodeclaims.get(name)
        return claim.model_copy(deep=True) if claim is not None else None

    def list_nodes(self) -> list[Node]:
        self.calls.append(("list_nodes", None))
        return list(self.nodes.values())

    def cordoned_node_names(self) -> set[str]:
        return {n.name for n in self.nodes.values() if n.unschedulable}

    # -- NodeClaims
    def _written(self, claim: NodeClaim) -> None:
        claim.metadata.resource_version = str(int(claim.metadata.resource_version or "0") + 1)

    def annotate_nodeclaim(
        self, *, name: str, annotations: dict[str, str], resource_version: str | None = None
    ) -> None:
        self.calls.append(("annotate_nodeclaim", (name, dict(annotations))))
        claim = self.nodeclaims[name]
        if resource_version is not None and resource_version != claim.metadata.resource_version:
            raise ConflictError(f"nodeclaim {name}: the object has been modified", status=409)
        claim.metadata.annotations.update(annotations)
        self._written(claim)

    def delete_nodeclaim(self, *, name: str) -> None:
        self.calls.append(("delete_nodeclaim", name))
        claim = self.nodeclaims.get(name)
        if claim is None:
            return
        if not claim.metadata.finalizers:
            del self.nodeclaims[name]
        elif claim.metadata.deletion_timestamp is None:
            claim.metadata.deletion_timestamp = to_rfc3339(self.clock())
            self._written(claim)

    def remove_nodeclaim_finalizer(self, *, name: str, finalizer: str) -> None:
        self.calls.append(("remove_nodeclaim_finalizer", name))
        claim = self.nodeclaims.get(name)
        if claim is None or finalizer not in claim.metadata.finalizers:
            return
        claim.metadata.finalizers.remove(finalizer)
        self._written(claim)
        if not claim.metadata.finalizers and claim.metadata.deletion_timestamp is not None:
            del self.nodeclaims[name]

    # -- nodes
    def taint_and_cordon(self, *, node_name: str, taint: Taint) -> bool:
        self.calls.append(("taint_and_cordon", node_name))
        node = self.nodes.get(node_name)
        if node is None:
            return False
        taints = node.taints if taint is None or taint in node.taints else (*node.taints, taint)
        self.nodes[node_name] = replace(node, taints=taints, unschedulable=True)
        return True

    def delete_node(self, *, name: str) -> None:
        self.calls.append(("delete_node", name))
        node = self.nodes.get(name)
        if node is None:
            return
        if node.finalizers:
            self.nodes[name] = replace(node, deletion_timestamp=node.deletion_timestamp or self.clock())
            return
        self._remove_node(name)

    def remove_node_finalizer(self, *, name: str, finalizer: str) -> None:
        self.calls.append(("remove_node_finalizer", name))
        node = self.nodes.get(name)
        if node is None or finalizer not in node.finalizers:
            return
        node = replace(node, finalizers=tuple(f for f in node.finalizers if f != finalizer))
        self.nodes[name] = node
        if not node.finalizers and node.deletion_timestamp is not None:
            self._remove_node(name)

    def _remove_node(self, name: str) -> None:
        del self.nodes[name]
        for key, pod in list(self.pods.items()):  # the pod garbage collector
            if pod.node_name == name:
                del self.pods[key]

    # -- pods
    def evict(self, *, pod: Pod, grace_period_seconds: int | None = None) -> str:
        self.calls.append(("evict", pod.key))
        current = self.pods.get(pod.key)
        if current is None:
            return "gone"
        left = self.pdb_blocks.get(pod.key, 0)
        if left != 0:
            self.pdb_blocks[pod.key] = left - 1 if left > 0 else left
            return "blocked"
        self._delete(current, current.termination_grace_period_seconds)
        return "evicted"

    def delete_pod(self, *, pod: Pod, grace_period_seconds: int | None = None) -> None:
        self.calls.append(("delete_pod", (pod.key, grace_period_seconds)))
        current = self.pods.get(pod.key)
        if current is not None:
            grace = current.termination_grace_period_seconds if grace_period_seconds is None else grace_period_seconds
            self._delete(current, grace)

    def _delete(self, pod: Pod, grace: int) -> None:
        if grace == 0:
            del self.pods[pod.key]
            return
        at = self.clock() + grace
        if pod.deletion_timestamp is not None:
            at = min(at, pod.deletion_timestamp)
        self.pods[pod.key] = replace(pod, deletion_timestamp=at)

    def record_event(self, *, ref: ObjectRef, reason: str, message: str, type_: str = "Normal") -> None:
        self.calls.append(("record_event", reason))
        self.events.append((ref.kind, ref.name, reason, type_))

    # -- assertions
    def count(self, call: str) -> int:
        return sum(1 for name, _ in self.calls if name == call)

    def args(self, call: str) -> list[Any]:
        return [arg for name, arg in self.calls if name == call]

    def reasons(self) -> list[str]:
        return [e[2] for e in self.events]


def ports(cluster: FakeCluster, cloud: FakeCloud, queue: FakeQueue | None = None, wake: Any = None) -> Ports:
    return Ports(cluster=cluster, cloud=cloud, cluster_name=CLUSTER, queue=queue, wake=wake)  # type: ignore[arg-type]


# -- events and SQS records --------------------------------------------------------------------------

DETAIL_TYPES = {
    "spot": "EC2 Spot Instance Interruption Warning",
    "rebalance": "EC2 Instance Rebalance Recommendation",
    "state": "EC2 Instance State-change Notification",
}


def event(instance_id: str, *, kind: str = "spot", event_id: str | None = None, **envelope: Any) -> dict[str, Any]:
    """An EventBridge event in the documented format for ``instance_id`` (``kind``: spot, rebalance, state; a
    state change's ``state`` goes in ``envelope``), from our account and region unless ``envelope`` says else."""
    detail: dict[str, Any] = {"instance-id": instance_id}
    if kind == "spot":
        detail["instance-action"] = "terminate"
    if kind == "state":
        detail["state"] = envelope.pop("state", "terminated")
    body = {
        "version": "0",
        "id": event_id or f"evt-{instance_id}",
        "detail-type": DETAIL_TYPES[kind],
        "source": "aws.ec2",
        "account": ACCOUNT,
        "time": "2026-11-22T06:00:00Z",
        "region": REGION,
        "resources": [f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/{instance_id}"],
        "detail": detail,
    }
    body.update(envelope)
    return body


def sqs_record(
    body: dict[str, Any] | str,
    *,
    message_id: str,
    receive_count: int = 1,
    sent: float = NOW,
    queue: str = "interruption",
) -> dict[str, Any]:
    """A Lambda SQS event record carrying ``body``, sent to our ``queue`` at ``sent`` (epoch seconds) and delivered
    for the ``receive_count``-th time."""
    return {
        "messageId": message_id,
        "receiptHandle": f"rh-{message_id}",
        "body": body if isinstance(body, str) else json.dumps(body),
        "attributes": {"ApproximateReceiveCount": str(receive_count), "SentTimestamp": str(int(sent * 1000))},
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": f"arn:aws:sqs:{REGION}:{ACCOUNT}:nodesmith-{queue}",
        "awsRegion": REGION,
    }


class Context:
    """The Lambda context our handlers read."""

    function_name = "nodesmith-interruption"
    function_version = "$LATEST"
    invoked_function_arn = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:nodesmith-interruption"
    memory_limit_in_mb = 512
    aws_request_id = "req-1"
    log_group_name = "/aws/lambda/nodesmith-interruption"
    log_stream_name = "2026/11/22/[$LATEST]abcdef"

    def get_remaining_time_in_millis(self) -> int:
        return 20_000
