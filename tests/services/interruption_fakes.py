"""Fakes of the Cluster and CloudProvider ports for interruption and drain tests.

The fake cluster plays the API server and the kubelet: an accepted eviction sets the pod's
``deletionTimestamp`` to now + its grace period, and the pod disappears once the fake clock passes
that time (or at once with ``instant_termination``). PodDisruptionBudgets are modelled by a number
of 429 answers per pod. Every call is recorded in ``calls`` so tests can assert what was done.

Load it by path (see ``load_fakes`` in the tests): the test folders are not packages.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from nodesmith.core.errors import KubernetesError
from nodesmith.core.model import Node, Pod, Taint
from nodesmith.core.ports import Instance, ObjectRef

CLUSTER = "demo"
EVENT_TIME = 1_795_327_200.0  # 2026-11-22T06:00:00Z, the golden events' time


@dataclass
class FakeClock:
    """Monotonic seconds that only move when someone sleeps; ``wall()`` is epoch seconds."""

    t: float = 1000.0
    wall_at_start: float = EVENT_TIME + 5.0
    sleeps: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.t0 = self.t

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.t += seconds

    def wall(self) -> float:
        return self.wall_at_start + (self.t - self.t0)


def make_node(name: str = "node-a", instance_id: str = "i-1234567890abcdef0", zone: str = "us-west-2a") -> Node:
    return Node(name=name, provider_id=f"aws:///{zone}/{instance_id}", ready=True)


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
    ours: bool = True,
    launched_by_us: bool = True,
    nodeclaim: str = "default-abcde",
    state: str = "running",
    zone: str = "us-west-2a",
) -> Instance:
    tags: dict[str, str] = {}
    if ours:
        tags[f"kubernetes.io/cluster/{CLUSTER}"] = "owned"
    if launched_by_us:
        tags["karpenter.sh/nodepool"] = "default"
        tags["karpenter.sh/nodeclaim"] = nodeclaim
    return Instance(
        instance_id=instance_id,
        instance_type="m5.large",
        zone=zone,
        capacity_type="spot",
        state=state,
        launch_time=EVENT_TIME - 3600,
        tags=tags,
    )


class FakeCloud:
    """CloudProvider fake: ``instances`` by id; ``terminate`` moves them to shutting-down."""

    def __init__(self, instances: list[Instance] | None = None, *, fail_get: set[str] | None = None) -> None:
        self.instances = {i.instance_id: i for i in instances or []}
        self.fail_get = fail_get or set()
        self.calls: list[tuple[str, Any]] = []

    def get_instance(self, *, instance_id: str) -> Instance | None:
        self.calls.append(("get_instance", instance_id))
        if instance_id in self.fail_get:
            raise RuntimeError(f"DescribeInstances throttled for {instance_id}")
        return self.instances.get(instance_id)

    def get_instances(self, *, instance_ids: list[str]) -> dict[str, Instance]:
        self.calls.append(("get_instances", tuple(instance_ids)))
        if self.fail_get & set(instance_ids):
            raise RuntimeError("DescribeInstances throttled")
        return {i: self.instances[i] for i in instance_ids if i in self.instances}

    def terminate(self, *, instance_ids: list[str]) -> None:
        self.calls.append(("terminate", tuple(instance_ids)))
        for iid in instance_ids:
            if iid in self.instances:
                self.instances[iid] = replace(self.instances[iid], state="shutting-down")

    def list_instances(self) -> list[Instance]:
        return list(self.instances.values())

    def instance_types(self, **_: Any) -> list[Any]:
        raise NotImplementedError

    def create(self, **_: Any) -> Any:
        raise NotImplementedError


class FakeCluster:
    """Cluster fake playing API server + kubelet on a :class:`FakeClock`."""

    def __init__(
        self,
        *,
        clock: FakeClock,
        nodes: list[Node] | None = None,
        pods: list[Pod] | None = None,
        pdb_blocks: dict[str, int] | None = None,
        instant_termination: bool = False,
        fail_nodes: set[str] | None = None,
    ) -> None:
        self.clock = clock
        self.nodes = {n.name: n for n in nodes or []}
        self.pods = {p.key: p for p in pods or []}
        self.pdb_blocks = dict(pdb_blocks or {})  # pod key -> 429 answers left (-1: forever)
        self.instant_termination = instant_termination
        self.fail_nodes = fail_nodes or set()
        self.nodeclaims: set[str] = set()
        self.nodeclaim_nodes: dict[str, str] = {}  # NodeClaim name -> its status.nodeName (the claim exists)
        self.labelled: dict[str, Any] = {}  # instance id -> its NodeClaim labelled nodesmith.dev/instance-id
        self.fail_nodeclaim_list = False
        self.calls: list[tuple[str, Any]] = []
        self.events: list[tuple[str, str, str, str]] = []  # (kind, name, reason, type)
        self.timeline: list[tuple[str, Any, float]] = []  # (call, argument, wall time)
        self.lost: list[str] = []  # pods removed with their node instead of evicted or deleted

    def _record(self, call: tuple[str, Any]) -> None:
        self.calls.append(call)
        self.timeline.append((call[0], call[1], self.clock.wall()))

    # -- kubelet ---------------------------------------------------------------------------------
    def _reap(self) -> None:
        now = self.clock.wall()
        for key, pod in list(self.pods.items()):
            if pod.deletion_timestamp is not None and pod.deletion_timestamp <= now:
                self.pods.pop(key, None)  # pop: parallel drains may reap the same pod

    # -- reads -----------------------------------------------------------------------------------
    def list_pods(self, *, node_name: str | None = None) -> list[Pod]:
        self._record(("list_pods", node_name))
        if node_name in self.fail_nodes:
            raise KubernetesError(f"list pods on {node_name}: 503", status=503)
        self._reap()
        return [p for p in self.pods.values() if node_name is None or p.node_name == node_name]

    def list_nodes(self) -> list[Node]:
        self._record(("list_nodes", None))
        return list(self.nodes.values())

    def get_node(self, *, name: str) -> Node | None:
        return self.nodes.get(name)

    def get_nodeclaim(self, *, name: str) -> Any:
        """A NodeClaim in ``nodeclaims`` or ``nodeclaim_nodes`` (naming its node there), else None."""
        from nodesmith.core.api.nodeclaim import NodeClaim

        self._record(("get_nodeclaim", name))
        if name not in self.nodeclaims and name not in self.nodeclaim_nodes:
            return None
        ref = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
        return NodeClaim.model_validate(
            {
                "metadata": {"name": name},
                "spec": {"requirements": [], "nodeClassRef": ref},
                "status": {"nodeName": self.nodeclaim_nodes.get(name)},
            }
        )

    # The replacement pass (reconcile's provisioning half) reads these; no NodePools means it plans nothing.
    def list_daemonsets(self) -> list[Any]:
        return []

    def list_pdbs(self) -> list[Any]:
        return []

    def list_nodepools(self) -> list[Any]:
        return []

    def list_ec2nodeclasses(self) -> list[Any]:
        return []

    def list_nodeclaims(self) -> list[Any]:
        return []

    def nodeclaims_for_instances(self, *, instance_ids: list[str]) -> dict[str, Any]:
        self._record(("nodeclaims_for_instances", tuple(instance_ids)))
        if self.fail_nodeclaim_list:
            raise KubernetesError("list nodeclaims: 503")
        return {i: self.labelled[i] for i in instance_ids if i in self.labelled}

    def volume_context(self) -> Any:
        from nodesmith.core.scheduling.volumes import VolumeContext

        return VolumeContext()

    # -- writes ----------------------------------------------------------------------------------
    def taint_and_cordon(self, *, node_name: str, taint: Taint) -> bool:
        self._record(("taint_and_cordon", node_name))
        if node_name in self.fail_nodes:
            raise KubernetesError(f"patch node {node_name}: 503 Service Unavailable", status=503)
        node = self.nodes.get(node_name)
        if node is None:
            return False
        taints = node.taints if taint in node.taints else (*node.taints, taint)
        self.nodes[node_name] = replace(node, taints=taints, unschedulable=True)
        return True

    def untaint_and_uncordon(self, *, node_name: str, taint_key: str) -> bool:
        self._record(("untaint_and_uncordon", node_name))
        node = self.nodes.get(node_name)
        if node is None:
            return False
        taints = tuple(t for t in node.taints if t.key != taint_key)
        self.nodes[node_name] = replace(node, taints=taints, unschedulable=False)
        return True

    def watch_pods(
        self, *, resource_version: str = "", unscheduled_only: bool = True, timeout_seconds: int = 60
    ) -> Any:
        raise NotImplementedError("the interruption path never watches pods")

    def evict(self, *, pod: Pod, grace_period_seconds: int | None = None) -> str:
        self._record(("evict", pod.key))
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
        self._record(("delete_pod", (pod.key, grace_period_seconds)))
        current = self.pods.get(pod.key)
        if current is not None:
            grace = current.termination_grace_period_seconds if grace_period_seconds is None else grace_period_seconds
            self._delete(current, grace)

    def _delete(self, pod: Pod, grace: int) -> None:
        if grace == 0 or self.instant_termination:
            self.pods.pop(pod.key, None)
            return
        at = self.clock.wall() + grace
        if pod.deletion_timestamp is not None:
            at = min(at, pod.deletion_timestamp)  # the API server only shortens a pending deletion
        self.pods[pod.key] = replace(pod, deletion_timestamp=at)

    def delete_node(self, *, name: str) -> None:
        self._record(("delete_node", name))
        self.nodes.pop(name, None)
        for key, pod in list(self.pods.items()):  # the pod garbage collector removes orphaned pods
            if pod.node_name == name:
                if not (pod.is_daemonset or pod.is_mirror or pod.owner_kind == "Node"):
                    self.lost.append(key)  # a workload pod still on the node when it went: not evicted
                self.pods.pop(key, None)

    def delete_nodeclaim(self, *, name: str) -> None:
        self._record(("delete_nodeclaim", name))
        self.nodeclaims.discard(name)
        self.nodeclaim_nodes.pop(name, None)

    def record_event(self, *, ref: ObjectRef, reason: str, message: str, type_: str = "Normal") -> None:
        self._record(("record_event", reason))
        self.events.append((ref.kind, ref.name, reason, type_))

    def label_node(self, **_: Any) -> None:
        raise NotImplementedError

    # -- helpers for assertions --------------------------------------------------------------------
    def count(self, call: str) -> int:
        return sum(1 for name, _ in self.calls if name == call)

    def walls(self, call: str) -> list[float]:
        return [wall for name, _, wall in self.timeline if name == call]

    def args(self, call: str) -> list[Any]:
        return [arg for name, arg in self.calls if name == call]


# -- events and SQS records ------------------------------------------------------------------------

DETAIL_TYPES = {
    "spot": "EC2 Spot Instance Interruption Warning",
    "rebalance": "EC2 Instance Rebalance Recommendation",
    "state": "EC2 Instance State-change Notification",
}


def event(
    instance_id: str,
    *,
    kind: str = "spot",
    event_id: str | None = None,
    time: str = "2026-11-22T06:00:00Z",
    **detail: Any,
) -> dict[str, Any]:
    """An EventBridge event in the documented format for ``instance_id`` (``kind``: spot, rebalance, state)."""
    body: dict[str, Any] = {"instance-id": instance_id}
    if kind == "spot":
        body["instance-action"] = "terminate"
    body.update(detail)
    return {
        "version": "0",
        "id": event_id or f"evt-{instance_id}",
        "detail-type": DETAIL_TYPES[kind],
        "source": "aws.ec2",
        "account": "123456789012",
        "time": time,
        "region": "us-west-2",
        "resources": [f"arn:aws:ec2:us-west-2:123456789012:instance/{instance_id}"],
        "detail": body,
    }


def sqs_record(body: dict[str, Any] | str, *, message_id: str, receive_count: int = 1) -> dict[str, Any]:
    """A Lambda SQS event record carrying ``body``, delivered for the ``receive_count``-th time."""
    import json

    return {
        "messageId": message_id,
        "receiptHandle": f"rh-{message_id}",
        "body": body if isinstance(body, str) else json.dumps(body),
        "attributes": {"ApproximateReceiveCount": str(receive_count), "SentTimestamp": "1795327201000"},
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-west-2:123456789012:nodesmith-interruption",
        "awsRegion": "us-west-2",
    }
