"""Helpers for the tests that drive the embedded world (moto server, Kubernetes API emulator, simulated
kubelet, scheduler and controllers) through the real handlers: put events on EventBridge or straight on a
queue, deliver the queues as Lambda's event source mappings would, and read back what the handlers did
(objects, instance states, EMF metrics, log lines)."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from nodesmith.cli.world import MANIFESTS
from nodesmith.sim.kube.errors import ApiError

if TYPE_CHECKING:
    from collections.abc import Callable

    from nodesmith.cli.world import EmbeddedWorld

EVENTS = Path(__file__).resolve().parents[1] / "events"
ACCOUNT = "123456789012"  # moto's account: the queues' ARNs name it
REGION = "us-east-1"
DISRUPTED = "karpenter.sh/disrupted"


def until(world: EmbeddedWorld, done: Callable[[], bool], *, timeout: float, terminations: bool = True) -> bool:
    """Reconcile once a second (the schedule, faster) and deliver termination requests until ``done()``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return True
        world.reconcile()
        if terminations:
            world.deliver_terminations()
        world.wait_for(done, timeout=1.0)
    return bool(done())


def app_pods(world: EmbeddedWorld, app: str = "inflate") -> list[dict[str, Any]]:
    """The live pods of ``app`` (not being deleted)."""
    return [
        p
        for p in world.store.objects("pods")
        if (p["metadata"].get("labels") or {}).get("app") == app and not p["metadata"].get("deletionTimestamp")
    ]


def running(world: EmbeddedWorld, app: str = "inflate") -> int:
    """How many of ``app``'s pods run."""
    return sum(1 for p in app_pods(world, app) if (p.get("status") or {}).get("phase") == "Running")


def event_body(name: str, ids: dict[str, str], **envelope: Any) -> dict[str, Any]:
    """The documented event ``tests/events/<name>`` with its instance ids replaced by ``ids`` and envelope fields
    set as EventBridge sets them (our account and region) unless ``envelope`` says otherwise."""
    text = (EVENTS / name).read_text()
    for documented, real in ids.items():
        text = text.replace(documented, real)
    doc: dict[str, Any] = json.loads(text)
    doc.update({"account": ACCOUNT, "region": REGION, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    doc.update(envelope)
    return doc


def put_event(world: EmbeddedWorld, doc: dict[str, Any]) -> None:
    """Put ``doc`` on the default bus as its service would (EventBridge sets id, time, account, region)."""
    answer = world.client("events").put_events(
        Entries=[
            {
                "Source": doc["source"],
                "DetailType": doc["detail-type"],
                "Resources": doc.get("resources", []),
                "Detail": json.dumps(doc["detail"]),
            }
        ]
    )
    assert not answer.get("FailedEntryCount"), answer


def send(world: EmbeddedWorld, queue_url: str, body: dict[str, Any] | str) -> None:
    """Send ``body`` straight to a queue, as anyone allowed ``sqs:SendMessage`` could (a forger)."""
    text = body if isinstance(body, str) else json.dumps(body)
    fifo = (
        {"MessageGroupId": "forged", "MessageDeduplicationId": uuid.uuid4().hex} if queue_url.endswith(".fifo") else {}
    )
    world.client("sqs").send_message(QueueUrl=queue_url, MessageBody=text, **fifo)


def deliver(world: EmbeddedWorld) -> tuple[int, int]:
    """Every interruption batch the event source mapping would invoke until the queue stays empty for 1 s;
    returns (records, records reported failed)."""
    records = failures = 0
    for batch in world.deliver_interruptions(wait_seconds=1):
        records += batch["records"]
        failures += batch["failures"]
    return records, failures


def queue_empty(world: EmbeddedWorld, queue_url: str) -> bool:
    """No message visible or in flight on the queue."""
    attributes = world.client("sqs").get_queue_attributes(
        QueueUrl=queue_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return attributes == {"ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0"}


def emf(world: EmbeddedWorld) -> list[dict[str, Any]]:
    """The EMF documents the handlers printed so far."""
    docs = []
    for line in world.lambda_log.read_text().splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and "_aws" in doc:
            docs.append(doc)
    return docs


def metric_total(world: EmbeddedWorld, name: str) -> float:
    """The sum of metric ``name`` over the EMF documents the handlers printed."""
    total = 0.0
    for doc in emf(world):
        if name in doc:
            value = doc[name]
            total += sum(value) if isinstance(value, list) else float(value)
    return total


def reasons(world: EmbeddedWorld, name: str) -> Counter[str]:
    """How often metric ``name`` was emitted per ``Reason`` dimension value."""
    return Counter(str(doc.get("Reason")) for doc in emf(world) if name in doc)


def log_lines(world: EmbeddedWorld, message: str) -> list[dict[str, Any]]:
    """The JSON log lines whose ``message`` is ``message``."""
    found = []
    for line in world.lambda_log.read_text().splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and doc.get("message") == message:
            found.append(doc)
    return found


def exists(world: EmbeddedWorld, resource: str, name: str, namespace: str | None = None) -> bool:
    """Whether the object exists (being deleted or not)."""
    try:
        world.store.get(resource, name, namespace=namespace)
    except ApiError as exc:
        if exc.code == 404:
            return False
        raise
    return True


def state(world: EmbeddedWorld, instance_id: str) -> str:
    """The instance's EC2 state."""
    reservations = world.client("ec2").describe_instances(InstanceIds=[instance_id])["Reservations"]
    return str(reservations[0]["Instances"][0]["State"]["Name"])


def ours(world: EmbeddedWorld, app: str = "inflate") -> tuple[str, str, str]:
    """(node name, instance id, NodeClaim name) of a node running a pod of ``app``."""
    node_name = next(p["spec"]["nodeName"] for p in app_pods(world, app) if p["spec"].get("nodeName"))
    node = world.store.get("nodes", node_name)
    provider_id = node["spec"]["providerID"]
    claim = next(
        c
        for c in world.store.objects("nodeclaims.karpenter.sh")
        if (c.get("status") or {}).get("providerID") == provider_id
    )
    return node_name, provider_id.rsplit("/", 1)[1], claim["metadata"]["name"]


def untouched(world: EmbeddedWorld, node_name: str, instance_id: str, claim: str | None = None) -> list[str]:
    """What was done to a node, its instance and NodeClaim that should not have been (empty: nothing)."""
    problems = []
    node = world.store.get("nodes", node_name)
    if node["spec"].get("unschedulable"):
        problems.append("node cordoned")
    if any(t.get("key") == DISRUPTED for t in node["spec"].get("taints") or []):
        problems.append("node tainted")
    if node["metadata"].get("deletionTimestamp"):
        problems.append("node deleting")
    if any(p["metadata"].get("deletionTimestamp") for p in world.store.pods_on(node_name)):
        problems.append("pods deleting")
    if claim is not None and world.store.get("nodeclaims.karpenter.sh", claim)["metadata"].get("deletionTimestamp"):
        problems.append("nodeclaim deleting")
    if state(world, instance_id) != "running":
        problems.append(f"instance {state(world, instance_id)}")
    return problems


def run_instance(world: EmbeddedWorld, tags: dict[str, str], *, spot: bool = True) -> dict[str, Any]:
    """A running instance in the cluster's VPC with ``tags`` (another team's, a managed node group's, ...)."""
    ec2 = world.client("ec2")
    subnet = ec2.describe_subnets(Filters=[{"Name": "tag:karpenter.sh/discovery", "Values": [world.cluster_name]}])
    image = ec2.describe_images(Filters=[{"Name": "name", "Values": ["amazon-eks-node-al2023-x86_64-standard-*"]}])
    extra: dict[str, Any] = {"InstanceMarketOptions": {"MarketType": "spot"}} if spot else {}
    instance: dict[str, Any] = ec2.run_instances(
        ImageId=image["Images"][0]["ImageId"], InstanceType="m5.large", MinCount=1, MaxCount=1,
        SubnetId=subnet["Subnets"][0]["SubnetId"],
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
        **extra,
    )["Instances"][0]  # fmt: skip
    return instance


def register_node(world: EmbeddedWorld, instance: dict[str, Any], *, with_pod: str = "") -> str:
    """A Ready Node for ``instance`` (as its kubelet registers it), with one running pod ``with_pod`` bound to it."""
    zone = instance["Placement"]["AvailabilityZone"]
    name = instance["PrivateDnsName"]
    world.store.apply({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"providerID": f"aws:///{zone}/{instance['InstanceId']}"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}],
                   "allocatable": {"cpu": "2", "memory": "8Gi", "pods": "29"}},
    })  # fmt: skip
    if with_pod:
        world.store.apply({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": with_pod, "namespace": "default", "labels": {"app": with_pod}},
            "spec": {"nodeName": name, "containers": [{"name": "c", "image": "pause"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        })  # fmt: skip
    return name


def claim_instance(world: EmbeddedWorld, name: str, instance: dict[str, Any], node_name: str) -> None:
    """A registered NodeClaim ``name`` (with Karpenter's finalizer) whose providerID names ``instance``."""
    zone = instance["Placement"]["AvailabilityZone"]
    world.store.apply({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"},
                     "finalizers": ["karpenter.sh/termination"]},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                 "requirements": [{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"]}]},
    })  # fmt: skip

    def status(obj: dict[str, Any]) -> None:
        obj["status"] = {"providerID": f"aws:///{zone}/{instance['InstanceId']}", "nodeName": node_name}

    world.store.mutate("nodeclaims.karpenter.sh", name, status)


def demo_nodeclass() -> dict[str, Any]:
    """The demo's EC2NodeClass ``default`` (``nodepool.yaml`` among the embedded manifests), as a fresh dict."""
    return next(
        d for d in yaml.safe_load_all((MANIFESTS / "nodepool.yaml").read_text()) if d and d["kind"] == "EC2NodeClass"
    )


def nodeclass_conditions(world: EmbeddedWorld, name: str = "default") -> dict[str, dict[str, Any]]:
    """The ``status.conditions`` of EC2NodeClass ``name``, by type."""
    found = world.store.get("ec2nodeclasses.karpenter.k8s.aws", name)
    return {c["type"]: c for c in (found.get("status") or {}).get("conditions", [])}
