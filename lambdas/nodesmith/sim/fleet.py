"""A running fleet as Nodesmith would have launched it, built directly: for benchmarks and tests that start from
a full cluster rather than from pending pods.

:func:`launch_fleet` launches instances the way a NodeClaim's launch leaves them: one ``RunInstances`` per
NodeClaim with the tags :func:`~nodesmith.services.provisioning.nodeclaims.instance_tags` gives a ``CreateFleet``
(``kubernetes.io/cluster/<name>=owned``, ``eks:eks-cluster-name``, ``karpenter.sh/nodepool``,
``karpenter.sh/nodeclaim``, ``karpenter.k8s.aws/ec2nodeclass`` and the EC2NodeClass's ``spec.tags``), and creates
each NodeClaim with Karpenter's ``karpenter.sh/termination`` finalizer, the labels a launch adds
(:func:`~nodesmith.services.provisioning.nodeclaims.launched_labels`) and a status with the instance's providerID
and node name, ``Launched``, ``Registered``, ``Initialized`` and ``Ready``. The simulated kubelet then registers
the Nodes (:class:`KubeletInstances` is the view of EC2 it reads); :func:`register_nodes` does to them what the
reconcile pass does on registration (``services/provisioning/lifecycle.py`` ``link_nodes``: the NodeClaim's labels,
``karpenter.sh/registered`` and ``karpenter.sh/initialized``, the finalizer). :func:`deploy` fills the nodes with
Deployments, every n-th behind a PodDisruptionBudget ``maxUnavailable: 1``.

:func:`spot_warning` is an ``EC2 Spot Instance Interruption Warning`` in the shape of the EC2 documentation
(``spot-instance-termination-notices``); :func:`put_spot_warnings` puts them on the default event bus (the
interruption rule routes them to the queue), :func:`send_spot_warnings` straight onto a queue in the envelope
EventBridge delivers.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nodesmith.adapters.aws.instances import instance_from_ec2
from nodesmith.core.api.ec2nodeclass import EC2NodeClass
from nodesmith.core.api.nodeclaim import NodeClaim
from nodesmith.core.labels import LABEL_INITIALIZED, LABEL_REGISTERED
from nodesmith.core.model import instance_id_of
from nodesmith.core.ports import Instance, LaunchResult
from nodesmith.core.termination import TERMINATION_FINALIZER
from nodesmith.services.provisioning.nodeclaims import instance_tags, launched_labels
from nodesmith.sim.kube.timefmt import rfc3339

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from nodesmith.sim.kube.store import Store

__all__ = [
    "M5_LARGE",
    "FleetNode",
    "KubeletInstances",
    "Shape",
    "deploy",
    "launch_fleet",
    "put_spot_warnings",
    "register_nodes",
    "send_spot_warnings",
    "spot_warning",
]

_CLAIMS = "nodeclaims.karpenter.sh"
_ACCOUNT = "123456789012"  # moto's default account


@dataclass(frozen=True, slots=True)
class Shape:
    """An instance type and what a NodeClaim of it reports (Kubernetes quantities)."""

    instance_type: str
    capacity: Mapping[str, str]
    allocatable: Mapping[str, str]


M5_LARGE = Shape(
    "m5.large",
    capacity={"cpu": "2", "memory": "7806Mi", "pods": "29", "ephemeral-storage": "20Gi"},
    allocatable={"cpu": "1930m", "memory": "7124Mi", "pods": "29", "ephemeral-storage": "18Gi"},
)
"""m5.large as the catalogue gives it (EKS AL2023 reservations, 29 pods from its ENIs)."""


@dataclass(frozen=True, slots=True)
class FleetNode:
    """One launched node: its instance, zone, NodeClaim and node name (the instance's private DNS name)."""

    instance_id: str
    zone: str
    nodeclaim: str
    node_name: str

    @property
    def provider_id(self) -> str:
        """``aws:///<zone>/<instance-id>``."""
        return f"aws:///{self.zone}/{self.instance_id}"


def _nodeclaim(name: str, nodepool: Mapping[str, Any], shape: Shape, capacity_type: str) -> dict[str, Any]:
    template = nodepool["spec"]["template"]
    labels = {
        **((template.get("metadata") or {}).get("labels") or {}),
        "karpenter.sh/nodepool": nodepool["metadata"]["name"],
    }
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "labels": labels, "finalizers": [TERMINATION_FINALIZER]},
        "spec": {
            "nodeClassRef": template["spec"]["nodeClassRef"],
            "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [shape.instance_type]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [capacity_type]},
            ],
        },
    }


def launch_fleet(
    *,
    ec2: Any,
    store: Store,
    cluster_name: str,
    count: int,
    nodepool: str = "default",
    shape: Shape = M5_LARGE,
    capacity_type: str = "spot",
    workers: int = 8,
) -> list[FleetNode]:
    """Launch ``count`` instances of ``shape`` for ``nodepool`` (which, and its EC2NodeClass, must be in ``store``)
    with one NodeClaim each, spread over the subnets tagged ``karpenter.sh/discovery=<cluster_name>``, in the
    security groups tagged so (those the EC2NodeClass selects: no node is drifted), on the seeded AL2023 x86_64
    image (see the module docstring). ``ec2`` is a boto3 EC2 client; ``workers`` launches run at once. Returns the
    nodes in launch order."""
    pool_doc = store.get("nodepools.karpenter.sh", nodepool)
    class_name = pool_doc["spec"]["template"]["spec"]["nodeClassRef"]["name"]
    nodeclass = EC2NodeClass.model_validate(store.get("ec2nodeclasses.karpenter.k8s.aws", class_name))
    discovery = [{"Name": "tag:karpenter.sh/discovery", "Values": [cluster_name]}]
    subnets = sorted((s["AvailabilityZone"], s["SubnetId"]) for s in ec2.describe_subnets(Filters=discovery)["Subnets"])
    groups = sorted(g["GroupId"] for g in ec2.describe_security_groups(Filters=discovery)["SecurityGroups"])
    images = ec2.describe_images(Filters=[{"Name": "name", "Values": ["amazon-eks-node-al2023-x86_64-standard-*"]}])
    image_id = images["Images"][0]["ImageId"]

    def launch(number: int) -> FleetNode:
        zone, subnet = subnets[number % len(subnets)]
        doc = _nodeclaim(f"{nodepool}-fleet{number:05d}", pool_doc, shape, capacity_type)
        tags = instance_tags(nodeclaim=NodeClaim.model_validate(doc), nodeclass=nodeclass, cluster_name=cluster_name)
        spot = {"InstanceMarketOptions": {"MarketType": "spot"}} if capacity_type == "spot" else {}
        item = ec2.run_instances(
            ImageId=image_id, InstanceType=shape.instance_type, MinCount=1, MaxCount=1, SubnetId=subnet,
            SecurityGroupIds=groups,
            TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
            **spot,
        )["Instances"][0]  # fmt: skip
        node = FleetNode(item["InstanceId"], zone, doc["metadata"]["name"], item["PrivateDnsName"])
        launched = LaunchResult(instance_id=node.instance_id, instance_type=shape.instance_type, zone=zone,
                                capacity_type=capacity_type, image_id=image_id, price=0.0)  # fmt: skip
        doc["metadata"]["labels"].update(launched_labels(launched))
        store.create(_CLAIMS, doc)
        stamp = rfc3339(time.time())
        conditions = ("Launched", "Registered", "Initialized", "Ready")
        status = {
            "providerID": node.provider_id, "imageID": image_id, "nodeName": node.node_name,
            "capacity": dict(shape.capacity), "allocatable": dict(shape.allocatable),
            "conditions": [{"type": c, "status": "True", "reason": c, "message": "", "lastTransitionTime": stamp}
                           for c in conditions],
        }  # fmt: skip
        store.mutate(_CLAIMS, node.nodeclaim, lambda obj: obj.update(status=status))
        return node

    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="launch") as pool:
        return list(pool.map(launch, range(count)))


def register_nodes(store: Store, fleet: Iterable[FleetNode]) -> int:
    """Give every Ready Node of ``fleet`` the NodeClaim's labels, ``karpenter.sh/registered`` and
    ``karpenter.sh/initialized``, and the ``karpenter.sh/termination`` finalizer (once); returns how many of the
    fleet's Nodes are registered and Ready now."""
    done = 0
    for node in fleet:
        current = store.snapshot("nodes", node.node_name)
        if current is None or (current.get("spec") or {}).get("providerID") != node.provider_id:
            continue
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (current.get("status") or {}).get("conditions") or [])  # fmt: skip
        if not ready:
            continue
        if TERMINATION_FINALIZER not in current["metadata"].get("finalizers", []):
            claim = store.get(_CLAIMS, node.nodeclaim)
            labels = {**claim["metadata"].get("labels", {}), LABEL_REGISTERED: "true", LABEL_INITIALIZED: "true"}

            def edit(obj: dict[str, Any], labels: dict[str, str] = labels) -> None:
                obj["metadata"].setdefault("labels", {}).update(labels)
                obj["metadata"]["finalizers"] = [*obj["metadata"].get("finalizers", []), TERMINATION_FINALIZER]

            store.mutate("nodes", node.node_name, edit)
        done += 1
    return done


def deploy(
    store: Store,
    *,
    pods: int,
    replicas: int = 20,
    pdb_every: int = 4,
    cpu: str = "450m",
    memory: str = "512Mi",
    grace_seconds: int = 30,
    namespace: str = "default",
) -> dict[str, int]:
    """Deployments ``app-0000``, ``app-0001``, ... of up to ``replicas`` pods (``cpu``/``memory`` requests,
    ``terminationGracePeriodSeconds`` ``grace_seconds``) adding up to ``pods``; every ``pdb_every``-th (0: none)
    with more than one replica gets a PodDisruptionBudget ``maxUnavailable: 1``. Returns those (app -> replicas)."""
    budgeted: dict[str, int] = {}
    left, number = pods, 0
    while left > 0:
        count, app = min(replicas, left), f"app-{number:04d}"
        container = {"name": "app", "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.9",
                     "resources": {"requests": {"cpu": cpu, "memory": memory}}}  # fmt: skip
        store.apply({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": app, "namespace": namespace},
            "spec": {"replicas": count, "selector": {"matchLabels": {"app": app}}, "template": {
                "metadata": {"labels": {"app": app}},
                "spec": {"terminationGracePeriodSeconds": grace_seconds, "containers": [container]}}},
        })  # fmt: skip
        if pdb_every and number % pdb_every == 0 and count > 1:
            store.apply({
                "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": app, "namespace": namespace},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": app}}},
            })  # fmt: skip
            budgeted[app] = count
        left -= count
        number += 1
    return budgeted


ENDED_STATES = ("shutting-down", "terminated", "stopping", "stopped")
"""The instance states in which its kubelet no longer runs (EC2 instance lifecycle)."""
STATUS_IDS_PER_CALL = 100
"""The instance ids one ``DescribeInstanceStatus`` accepts (EC2 API reference: at most 100 explicit ids)."""


class KubeletInstances:
    """The simulated kubelet's view of EC2 (its ``instances`` callable): the running and stopping instances.

    A kubelet runs on its instance and stops with it; it never lists the account. So each instance is described by
    id (with its tags) when a NodeClaim first names it; every ``resync_seconds`` the instances known to run are
    asked, :data:`STATUS_IDS_PER_CALL` at a time, which of them ended (``DescribeInstanceStatus`` filtered by
    :data:`ENDED_STATES`: the answer names only those); and an instance running without a Node yet (about to be
    registered, or its Node just deleted) is described again at every call, so no Node is registered for an
    instance terminated meanwhile. :meth:`refresh` re-reads instances at once (one just terminated, whose Node is
    still there). ``ec2`` is a boto3 EC2 client.
    """

    def __init__(self, *, ec2: Any, store: Store, resync_seconds: float = 5.0) -> None:
        self.ec2, self.store, self.resync_seconds = ec2, store, resync_seconds
        self._known: dict[str, Instance] = {}
        self._gone: set[str] = set()
        self._synced = time.monotonic()
        self._lock = threading.Lock()

    def refresh(self, instance_ids: Sequence[str]) -> None:
        """Describe ``instance_ids`` again now."""
        with self._lock:
            self._describe(set(instance_ids))

    def __call__(self) -> list[Instance]:
        with self._lock:
            named = {instance_id_of((c.get("status") or {}).get("providerID")) for c in self.store.objects(_CLAIMS)}
            with_node = {(n.get("spec") or {}).get("providerID") for n in self.store.objects("nodes")}
            stale = {i for i in named if i and i not in self._known and i not in self._gone}
            stale |= {
                i.instance_id for i in self._known.values() if i.state == "running" and i.provider_id not in with_node
            }
            if time.monotonic() - self._synced >= self.resync_seconds:
                self._resync()
            self._describe(stale)
            return list(self._known.values())

    def _resync(self) -> None:
        """The known instances that ended since, from ``DescribeInstanceStatus`` by id, filtered by state."""
        self._synced = time.monotonic()
        ids = sorted(i.instance_id for i in self._known.values() if i.state not in ENDED_STATES)
        ended = [{"Name": "instance-state-name", "Values": list(ENDED_STATES)}]
        for start in range(0, len(ids), STATUS_IDS_PER_CALL):
            chunk = ids[start : start + STATUS_IDS_PER_CALL]
            answer = self.ec2.describe_instance_status(InstanceIds=chunk, IncludeAllInstances=True, Filters=ended)
            for status in answer["InstanceStatuses"]:
                known = self._known.get(status["InstanceId"])
                if known is not None:
                    self._set(known, status["InstanceState"]["Name"])

    def _describe(self, ids: set[str]) -> None:
        ordered = sorted(ids)
        for start in range(0, len(ordered), 200):
            answer = self.ec2.describe_instances(InstanceIds=ordered[start : start + 200])
            for reservation in answer["Reservations"]:
                for item in reservation["Instances"]:
                    instance = instance_from_ec2(item)
                    self._set(instance, instance.state)

    def _set(self, instance: Instance, state: str) -> None:
        if state in ("shutting-down", "terminated"):
            self._known.pop(instance.instance_id, None)
            self._gone.add(instance.instance_id)
        else:
            self._known[instance.instance_id] = dataclasses.replace(instance, state=state)


def spot_warning(instance_id: str, *, region: str = "us-east-1", account: str = _ACCOUNT) -> dict[str, Any]:
    """The ``detail-type``, ``source``, ``resources`` and ``detail`` of a spot interruption warning (what EC2 puts
    on the bus; EventBridge adds the envelope's id, time, account and region)."""
    return {
        "Source": "aws.ec2",
        "DetailType": "EC2 Spot Instance Interruption Warning",
        "Resources": [f"arn:aws:ec2:{region}:{account}:instance/{instance_id}"],
        "Detail": json.dumps({"instance-id": instance_id, "instance-action": "terminate"}),
    }


def put_spot_warnings(events: Any, instance_ids: Sequence[str], *, threads: int = 8) -> dict[str, float]:
    """One spot interruption warning per instance on the default bus (``PutEvents``, 10 entries a call, ``threads``
    callers at once: EC2 sends a burst's warnings at about the same moment); returns instance id -> epoch seconds
    its call returned. ``events`` is a boto3 EventBridge client. Raises ``RuntimeError`` for a refused entry."""
    sent: dict[str, float] = {}

    def put(chunk: Sequence[str]) -> None:
        answer = events.put_events(Entries=[spot_warning(i) for i in chunk])
        if answer.get("FailedEntryCount"):
            raise RuntimeError(f"PutEvents failed: {answer['Entries']}")
        sent.update(dict.fromkeys(chunk, time.time()))

    with ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="put-events") as pool:
        list(pool.map(put, [instance_ids[n : n + 10] for n in range(0, len(instance_ids), 10)]))
    return sent


def send_spot_warnings(
    sqs: Any, queue_url: str, instance_ids: Sequence[str], *, region: str = "us-east-1"
) -> dict[str, float]:
    """Spot interruption warnings straight onto ``queue_url`` in the envelope the EventBridge rule delivers
    (``SendMessageBatch``, 10 a call); returns instance id -> epoch seconds its call returned. Raises
    ``RuntimeError`` for a refused message."""
    sent: dict[str, float] = {}
    for n in range(0, len(instance_ids), 10):
        chunk = instance_ids[n : n + 10]
        entries = []
        for k, iid in enumerate(chunk):
            warning = spot_warning(iid, region=region)
            event = {"version": "0", "id": str(uuid.uuid4()), "detail-type": warning["DetailType"],
                     "source": warning["Source"], "account": _ACCOUNT, "time": rfc3339(time.time()), "region": region,
                     "resources": warning["Resources"], "detail": json.loads(warning["Detail"])}  # fmt: skip
            entries.append({"Id": str(k), "MessageBody": json.dumps(event)})
        answer = sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
        if answer.get("Failed"):
            raise RuntimeError(f"SendMessageBatch failed: {answer['Failed']}")
        sent.update(dict.fromkeys(chunk, time.time()))
    return sent
