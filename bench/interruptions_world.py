"""The embedded world of ``bench/interruptions.py``: moto (in a process of its own, :mod:`interruptions_moto`)
and the Kubernetes API emulator with the simulated scheduler, kubelet and controllers, the shortcuts taken to
keep the emulators' costs out of the measurement (listed in :data:`EMULATOR_SHORTCUTS`), and the set-up:
NodePools, nodes with NodeClaims, Deployments with PodDisruptionBudgets, the state table, and the spot
warnings' delivery."""

from __future__ import annotations

import gc
import json
import math
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lambdas"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from interruptions_moto import moto_host

INSTANCE_TYPE = "m5.large"
ALLOCATABLE = {"cpu": "1930m", "memory": "7124Mi", "pods": "29", "ephemeral-storage": "18Gi"}
CAPACITY = {"cpu": "2", "memory": "7806Mi", "pods": "29", "ephemeral-storage": "20Gi"}
POD_CPU = "450m"
POD_MEMORY = "512Mi"
REPLICAS = 20
NOTICE_SECONDS = 120.0
POD_GRACE_SECONDS = 30
"""The Deployments' ``terminationGracePeriodSeconds``."""
SCHEDULE_SECONDS = 60.0
DISRUPTED = "karpenter.sh/disrupted"


def _conditions(obj: dict[str, Any]) -> dict[str, str]:
    return {c.get("type", ""): c.get("status", "") for c in (obj.get("status") or {}).get("conditions") or []}


def _now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


TERMINATED: set[str] = set()
"""Instance ids terminated during the run (by the handlers or the bench's EC2 reclaim)."""

SIM_MIN_STEP_SECONDS = 0.5
"""Shortest time between two steps of a simulated scheduler, kubelet or controller (seconds)."""

KUBELET_INSTANCE_CACHE_SECONDS = {"seconds": 1.0}
"""How long the simulated kubelet reuses its instance list at least (seconds; 1, or nodes / 1,000 when larger):
it delays node registration by at most this much."""

KUBELET_INSTANCE_RESYNC_SECONDS = 30.0
"""The simulated kubelet reads the instance list again after this long (seconds) even when no NodeClaim names
an instance it has not seen: every instance leaving goes through :data:`TERMINATED`, so the list only has to
be read for launches."""


EMULATOR_SHORTCUTS = [
    "moto SQS: the retention check per received message reads the retention period, and queue attributes "
    "(scanned on every SendMessage) are recomputed at most once a second (moto's are O(queue) per message)",
    "moto SQS: a receive reads the clock once per queue scan instead of twice per message",
    "moto DynamoDB: conditional writes are atomic (one lock), as DynamoDB's are, and Query and Scan read under "
    "that lock; moto's threads could race",
    "moto EC2: an instance's tags are read by its id (moto filters every tag of the account per instance)",
    "simulated kubelet: reads our live instances from moto's memory (what list_instances' DescribeInstances "
    "returns, without its XML), at most every KUBELET_INSTANCE_CACHE_SECONDS, and only when a launched "
    "NodeClaim names an instance it has not read yet (or every KUBELET_INSTANCE_RESYNC_SECONDS), less the "
    "instances terminated since",
    "moto server: the backend for a host name is looked up once per name, not through every URL pattern on "
    "every request under the dispatcher's lock",
    "moto SQS: a receive copies the in-flight FIFO message set before reading its groups (moto's server "
    "threads changed it mid-iteration: 'Set changed size during iteration')",
    "moto SQS: receipt handles are matched without a list per message, and a delete scans the queue once "
    "(moto scans it twice and rebuilds it, per entry of every DeleteMessageBatch)",
    "moto query protocol: a parameter-prefix check is a binary search in the sorted names, not a scan per "
    "structure member (quadratic in a CreateFleet's overrides)",
    "moto server: an action's handler is found in a method-name list made once per class, not by "
    "inspect.getmembers per request",
    "moto SQS: the clock behind a queue's per-message checks is time.time(), not a datetime difference",
    "moto response serializer: the attribute names to try per (object class, member shape) and the response "
    "transformer per key path are worked out once, not for every attribute of every object of every response",
    "moto EventBridge: a JSONPath expression of a target's input template is compiled once per text, not per "
    "event (moto builds a new parser for each of the default template's eight paths of every event)",
    "simulated kube-scheduler: a bind to a node cordoned since the scheduler's snapshot is refused (the real "
    "scheduler's informer cache sees the taint within milliseconds; the sim's snapshot here is seconds old)",
    f"simulated scheduler, kubelet and controllers step at most every {SIM_MIN_STEP_SECONDS:g} s",
    "SQS event source mapping: receives until the batch size or the stack's 1 s batching window (or an empty "
    "receive); 5 concurrent invocations at first, 5 more each second (Lambda's 300 per minute)",
    "the emulator's and moto's processes freeze the set-up world out of full garbage collections before the "
    "clock starts (gc.freeze), so none walks the 1,000 nodes' objects with the API stopped",
]


class _FreshBindStore:
    """The emulator store as the simulated kube-scheduler sees it, except that a bind to a node that is
    cordoned or tainted ``karpenter.sh/disrupted`` *now* is refused (409), as a scheduler whose cache
    is current would not have chosen it; the pod stays pending for the next step."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def bind(self, name: str, *, namespace: str, node_name: str) -> Any:
        from nodesmith.sim.kube import errors

        node = self._store.snapshot("nodes", node_name)
        spec = (node or {}).get("spec") or {}
        if (
            node is None
            or spec.get("unschedulable")
            or any(t.get("key") == DISRUPTED for t in spec.get("taints") or [])
        ):
            raise errors.conflict("pods", name, "", f"node {node_name} was cordoned after the scheduler's snapshot")
        return self._store.bind(name, namespace=namespace, node_name=node_name)


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of the live process ``pid`` (Linux ``/proc``; 0.0 where unreadable)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _world_class() -> Any:
    from nodesmith.cli.world import EmbeddedWorld

    class BenchWorld(EmbeddedWorld):
        """The demo's world, with moto in a process of its own (:func:`~interruptions_moto.moto_host`), the
        kubelet's instance list cached (moto's tag-filtered DescribeInstances is quadratic in instances x tags),
        binds refused on nodes cordoned since the scheduler's snapshot, and every simulated component stepping
        at most every :data:`SIM_MIN_STEP_SECONDS`."""

        moto: Any = None
        moto_conn: Any = None
        moto_lock = threading.Lock()  # one request at a time on moto_conn

        def freeze_heaps(self) -> None:
            """Freeze the set-up world out of full garbage collections (:func:`gc.freeze`) in this process and the
            moto process, as a long-running server would: each full collection walked the 1,000 nodes' objects
            with the emulator or moto stopped (0.06-0.43 s, every few seconds of a burst). The Kubernetes API
            server and AWS are not Python processes on our cores."""
            gc.freeze()
            with self.moto_lock:
                self.moto_conn.send("freeze")
                self.moto_conn.recv()

        def _start_aws(self) -> Any:
            import multiprocessing

            from nodesmith.adapters.aws.clients import reset_clients
            from nodesmith.sim.aws import EmbeddedAws

            ctx = multiprocessing.get_context("spawn")
            here, there = ctx.Pipe()
            self.moto = ctx.Process(target=moto_host, args=(self.cluster_name, there), name="moto", daemon=True)
            self.moto.start()
            if not here.poll(180):
                raise RuntimeError("the moto process did not start within 180 s")
            endpoint, environ = here.recv()
            self.moto_conn = here
            os.environ.pop("AWS_PROFILE", None)
            self._set_env(environ)
            reset_clients()
            return EmbeddedAws(endpoint_url=endpoint, region=environ["AWS_DEFAULT_REGION"], environ=environ)

        def stop(self) -> None:
            super().stop()
            if self.moto is not None:
                self.moto.terminate()
                self.moto.join(timeout=10)
                self.moto = None

        def _start_components(self) -> None:
            from nodesmith.adapters.aws.instances import instance_from_ec2
            from nodesmith.sim.controllers import SimControllers
            from nodesmith.sim.kube_scheduler import SimScheduler
            from nodesmith.sim.kubelet import SimKubelet
            from nodesmith.sim.runner import Runner

            cache: dict[str, Any] = {"at": -math.inf, "items": [], "known": set()}
            conn, lock, store = self.moto_conn, self.moto_lock, self.store

            def launched_unseen() -> bool:
                """A launched NodeClaim names an instance the list read last did not have running and tagged
                with the NodeClaim's name (what the kubelet registers a Node for)."""
                known = cache["known"]
                for claim in store.objects("nodeclaims.karpenter.sh"):
                    provider_id = (claim.get("status") or {}).get("providerID")
                    if provider_id and (provider_id, claim["metadata"]["name"]) not in known:
                        return True
                return False

            def instances() -> list[Any]:
                age = time.monotonic() - cache["at"]
                if age > KUBELET_INSTANCE_RESYNC_SECONDS or (
                    age > KUBELET_INSTANCE_CACHE_SECONDS["seconds"] and launched_unseen()
                ):
                    with lock:
                        conn.send("instances")
                        cache["items"] = [instance_from_ec2(item) for item in conn.recv()]
                    cache["known"] = {
                        (i.provider_id, i.tags.get("karpenter.sh/nodeclaim"))
                        for i in cache["items"]
                        if i.state == "running"
                    }
                    cache["at"] = time.monotonic()
                # A terminated instance's kubelet is gone: the cache must not let the sim re-register its Node
                # (it did, between our DeleteNode and DeleteNodeClaim, and pods were scheduled onto it).
                return [i for i in cache["items"] if i.instance_id not in TERMINATED]

            components = (
                SimControllers(store=self.store),
                SimScheduler(store=_FreshBindStore(self.store)),  # type: ignore[arg-type]
                SimKubelet(store=self.store, instances=instances, ready_delay=self.ready_delay),
            )
            self._runners = [
                Runner(c, interval=0.5, min_step_seconds=SIM_MIN_STEP_SECONDS).start()  # type: ignore[arg-type]
                for c in components
            ]

    return BenchWorld


def _nodepool_docs() -> list[dict[str, Any]]:
    import yaml

    from nodesmith.cli.world import MANIFESTS

    docs = [d for d in yaml.safe_load_all((MANIFESTS / "nodepool.yaml").read_text()) if d]
    for doc in docs:
        if doc["kind"] == "NodePool":
            doc["spec"].pop("limits", None)  # the demo's 100-CPU limit would cap the replacements
            doc["spec"]["disruption"] = {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"}
    return docs


def _create_table(world: Any) -> str:
    dynamodb = world.client("dynamodb")
    name = "nodesmith-state"
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    return name


def _launch_nodes(world: Any, count: int) -> list[dict[str, Any]]:
    """Spot instances tagged as Nodesmith launched them, spread over the seeded zones; one NodeClaim each, labelled
    with its instance as a launch labels it (``services.nodeclaims.launched_labels``)."""
    ec2 = world.client("ec2")
    subnets = ec2.describe_subnets(Filters=[{"Name": "tag:karpenter.sh/discovery", "Values": [world.cluster_name]}])
    zones = sorted((s["AvailabilityZone"], s["SubnetId"]) for s in subnets["Subnets"])
    image = ec2.describe_images(Filters=[{"Name": "name", "Values": ["amazon-eks-node-al2023-x86_64-standard-*"]}])
    image_id = image["Images"][0]["ImageId"]
    tags = [
        {"Key": f"kubernetes.io/cluster/{world.cluster_name}", "Value": "owned"},
        {"Key": "karpenter.sh/nodepool", "Value": "default"},
        {"Key": "karpenter.k8s.aws/ec2nodeclass", "Value": "default"},
    ]
    launched: list[dict[str, Any]] = []
    for index, (zone, subnet) in enumerate(zones):
        share = count // len(zones) + (1 if index < count % len(zones) else 0)
        if share == 0:
            continue
        answer = ec2.run_instances(
            ImageId=image_id,
            InstanceType=INSTANCE_TYPE,
            MinCount=share,
            MaxCount=share,
            SubnetId=subnet,
            InstanceMarketOptions={"MarketType": "spot"},
            TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
        )
        launched += [{**i, "zone": zone} for i in answer["Instances"]]
    for number, inst in enumerate(launched):
        inst["claim"] = f"default-bench{number:05d}"
        ec2.create_tags(
            Resources=[inst["InstanceId"]],
            Tags=[{"Key": "karpenter.sh/nodeclaim", "Value": inst["claim"]}, {"Key": "Name", "Value": inst["claim"]}],
        )
        _create_claim(world.store, inst, image_id)
    return launched


def _create_claim(store: Any, inst: dict[str, Any], image_id: str) -> None:
    from nodesmith.core.ports import LaunchResult
    from nodesmith.services.nodeclaims import launched_labels

    name = inst["claim"]
    launched = LaunchResult(instance_id=inst["InstanceId"], instance_type=INSTANCE_TYPE, zone=inst["zone"],
                            capacity_type="spot", image_id=image_id, price=0.0)  # fmt: skip
    store.create(
        "nodeclaims.karpenter.sh",
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {
                "name": name,
                "labels": {"karpenter.sh/nodepool": "default", "team": "platform", **launched_labels(launched)},
            },
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [INSTANCE_TYPE]}
                ],
            },
        },
    )
    stamp = _now_rfc3339()

    def status(obj: dict[str, Any]) -> None:
        obj["status"] = {
            "providerID": f"aws:///{inst['zone']}/{inst['InstanceId']}",
            "imageID": image_id,
            "nodeName": inst["PrivateDnsName"],
            "capacity": CAPACITY,
            "allocatable": ALLOCATABLE,
            "conditions": [
                {"type": t, "status": "True", "reason": t, "message": "", "lastTransitionTime": stamp}
                for t in ("Launched", "Registered", "Initialized", "Ready")
            ],
        }

    store.mutate("nodeclaims.karpenter.sh", name, status)


def _deploy(store: Any, total_pods: int, pdb_every: int) -> dict[str, int]:
    """Deployments of up to 20 replicas adding up to ``total_pods``; returns the budgeted ones (app -> replicas)."""
    budgeted: dict[str, int] = {}
    left, number = total_pods, 0
    while left > 0:
        replicas = min(REPLICAS, left)
        app = f"app-{number:04d}"
        store.apply(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": app, "namespace": "default"},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": {"app": app}},
                    "template": {
                        "metadata": {"labels": {"app": app}},
                        "spec": {
                            "terminationGracePeriodSeconds": POD_GRACE_SECONDS,
                            "containers": [
                                {
                                    "name": "app",
                                    "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.9",
                                    "resources": {"requests": {"cpu": POD_CPU, "memory": POD_MEMORY}},
                                }
                            ],
                        },
                    },
                },
            }
        )
        if pdb_every and number % pdb_every == 0 and replicas > 1:
            store.apply(
                {
                    "apiVersion": "policy/v1",
                    "kind": "PodDisruptionBudget",
                    "metadata": {"name": app, "namespace": "default"},
                    "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": app}}},
                }
            )
            budgeted[app] = replicas
        left -= replicas
        number += 1
    return budgeted


def _running(store: Any) -> int:
    return sum(
        1
        for p in store.objects("pods")
        if (p.get("status") or {}).get("phase") == "Running" and _conditions(p).get("Ready") == "True"
    )


def _send_events(world: Any, launched: list[dict[str, Any]]) -> dict[str, float]:
    """``--deliver sqs``: each warning straight onto the queue in the envelope EventBridge delivers
    (SendMessageBatch, 10 a call), skipping moto's PutEvents (about 50 ms per event at 1,000 nodes on this
    machine, which spread the burst over most of a minute); returns instance id -> deadline (monotonic)."""
    import uuid

    sqs = world.client("sqs")
    deadlines: dict[str, float] = {}
    for start in range(0, len(launched), 10):
        chunk = launched[start : start + 10]
        entries = []
        for n, i in enumerate(chunk):
            region = i["zone"][:-1]
            event = {
                "version": "0",
                "id": str(uuid.uuid4()),
                "detail-type": "EC2 Spot Instance Interruption Warning",
                "source": "aws.ec2",
                "account": "123456789012",
                "time": _now_rfc3339(),
                "region": region,
                "resources": [f"arn:aws:ec2:{region}:123456789012:instance/{i['InstanceId']}"],
                "detail": {"instance-id": i["InstanceId"], "instance-action": "terminate"},
            }
            entries.append({"Id": str(n), "MessageBody": json.dumps(event)})
        answer = sqs.send_message_batch(QueueUrl=world.queue_url, Entries=entries)
        if answer.get("Failed"):
            raise RuntimeError(f"SendMessageBatch failed: {answer['Failed']}")
        for i in chunk:
            deadlines[i["InstanceId"]] = time.monotonic() + NOTICE_SECONDS
    return deadlines


def _put_events(world: Any, launched: list[dict[str, Any]], threads: int = 8) -> dict[str, float]:
    """One spot interruption warning per instance on the default bus, ``threads`` PutEvents callers at once
    (EC2 sends them all at the same moment; one caller would spread them over seconds of moto time);
    returns instance id -> deadline (monotonic)."""
    events = world.client("events")
    deadlines: dict[str, float] = {}
    chunks = [launched[start : start + 10] for start in range(0, len(launched), 10)]
    lock = threading.Lock()

    def put(chunk: list[dict[str, Any]]) -> None:
        answer = events.put_events(
            Entries=[
                {
                    "Source": "aws.ec2",
                    "DetailType": "EC2 Spot Instance Interruption Warning",
                    "Resources": [f"arn:aws:ec2:{i['zone'][:-1]}:123456789012:instance/{i['InstanceId']}"],
                    "Detail": json.dumps({"instance-id": i["InstanceId"], "instance-action": "terminate"}),
                }
                for i in chunk
            ]
        )
        if answer.get("FailedEntryCount"):
            raise RuntimeError(f"PutEvents failed: {answer['Entries']}")
        with lock:
            for i in chunk:
                deadlines[i["InstanceId"]] = time.monotonic() + NOTICE_SECONDS

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="put-events") as pool:
        list(pool.map(put, chunks))
    return deadlines
