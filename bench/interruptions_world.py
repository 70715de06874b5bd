"""The embedded world of ``bench/interruptions.py``: moto and the Kubernetes API emulator with the
simulated scheduler, kubelet and controllers, the shortcuts that keep moto's quadratic paths out of the
measurement (listed in :data:`EMULATOR_SHORTCUTS`), and the set-up: NodePools, nodes with NodeClaims,
Deployments with PodDisruptionBudgets, the state table, and the spot warnings' delivery."""

from __future__ import annotations

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
    "simulated kube-scheduler: a bind to a node cordoned since the scheduler's snapshot is refused (the real "
    "scheduler's informer cache sees the taint within milliseconds; the sim's snapshot here is seconds old)",
    f"simulated scheduler, kubelet and controllers step at most every {SIM_MIN_STEP_SECONDS:g} s",
    "SQS event source mapping: receives until the batch size or the stack's 1 s batching window (or an empty "
    "receive); 5 concurrent invocations at first, 5 more each second (Lambda's 300 per minute)",
]


def _patch_moto() -> None:
    """Take moto's quadratic paths out of the measurement (same answers):

    * SQS: the retention check of every received message reads the retention period instead of all
      queue attributes, and a queue's attributes (whose Approximate* counts scan every message, read on
      every SendMessage) are recomputed at most once a second (and at once after SetQueueAttributes);
    * SQS: a queue's visible messages are found with one clock read per scan, not two per message
      (every waiting long poll rescans the queue on each new message);
    * DynamoDB: a conditional write checks and writes under one lock, atomic as in DynamoDB (moto's
      server threads could otherwise both pass the check of one idempotency record or lease), and a
      Query or Scan reads under the same lock (moto's threads changed a table's items while a Query
      iterated them: a 500, "dictionary changed size during iteration");
    * EC2: an instance's tags are read from the tag store by id instead of filtering every tag of the
      account (done per instance by every DescribeInstances);
    * SQS: a receive copies the queue's in-flight FIFO messages before reading their groups (moto's
      server threads changed the set mid-iteration, a 500 on ReceiveMessage);
    * SQS: a receipt handle is matched without building a list per message, and a delete finds its
      message in one scan of the queue instead of two plus a rebuild (every entry of every
      DeleteMessageBatch and ChangeMessageVisibilityBatch scans the 2,000-odd messages of a burst);
    * server: the backend serving a host name (``ec2.us-east-1.amazonaws.com``) is looked up once per
      name, not by trying moto's few hundred URL patterns on every request under the dispatcher's one
      lock (a tenth of the moto process's CPU at 1,000 nodes, and every request queued behind it);
    * query protocol (EC2, SQS): whether any parameter starts with a prefix is answered by a binary search
      in the request's sorted parameter names, not a scan of them all per structure member (quadratic in
      a CreateFleet's overrides: 13% of the moto process's CPU samples at 1,000 nodes);
    * server: an action's handler is looked up in a per-class list of method names made once, not by
      ``inspect.getmembers`` on every request (5%);
    * SQS: the current time in milliseconds is ``time.time()``, not a ``datetime`` difference, in the
      per-message checks behind a queue's Approximate* counts (5%).
    """
    from moto.ec2.models.core import TaggedEC2Resource
    from moto.ec2.utils import EC2_PREFIX_TO_RESOURCE, get_prefix
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication
    from moto.sqs.models import Queue, SQSBackend

    def valid(self: Any, queue_name: str, message: Any) -> bool:
        queue = self.get_queue(queue_name)
        return bool(int(queue.message_retention_period) + message.sent_timestamp / 1000 > time.time())

    attributes = Queue.attributes.fget  # type: ignore[attr-defined]
    set_attributes = Queue._set_attributes

    def cached_attributes(self: Any) -> dict[str, Any]:
        entry = self.__dict__.get("_bench_attributes")
        if entry is None or time.monotonic() - entry[0] > 1.0:
            entry = (time.monotonic(), attributes(self))
            self.__dict__["_bench_attributes"] = entry
        return dict(entry[1])

    def set_and_forget(self: Any, *args: Any, **kwargs: Any) -> Any:
        self.__dict__.pop("_bench_attributes", None)
        return set_attributes(self, *args, **kwargs)

    def get_tags(self: Any) -> list[dict[str, str]]:
        rid = getattr(self, "id", None)
        if not rid:
            return []
        kind = EC2_PREFIX_TO_RESOURCE.get(get_prefix(rid), "")
        tags = self.ec2_backend.tags.get(rid, {})
        return [{"resource_id": rid, "key": k, "value": v, "resource_type": kind} for k, v in tags.items()]

    from moto.core.utils import unix_time_millis

    def visible_messages(self: Any) -> list[Any]:
        now = unix_time_millis()
        return [m for m in self._messages if now > m.visible_at and not now < m.delayed_until]

    from moto.dynamodb.models import DynamoDBBackend

    write_lock = threading.RLock()

    def atomic(write: Any) -> Any:
        def locked(self: Any, *args: Any, **kwargs: Any) -> Any:
            with write_lock:
                return write(self, *args, **kwargs)

        return locked

    for name in ("put_item", "update_item", "delete_item", "transact_write_items", "query", "scan"):
        setattr(DynamoDBBackend, name, atomic(getattr(DynamoDBBackend, name)))

    def pending_groups(self: Any) -> set[str]:
        return {m.group_id for m in list(self._pending_messages) if m.group_id is not None}

    from moto.sqs.exceptions import ReceiptHandleIsInvalid
    from moto.sqs.models import Message

    def had_handle(self: Any, receipt_handle: str) -> bool:
        return bool(receipt_handle == self.receipt_handle or receipt_handle in self._old_receipt_handles)

    def delete_in_one_scan(self: Any, receipt_handle: str) -> None:
        if receipt_handle in self.deleted_messages:
            return  # already deleted: moto (and SQS) accept it again
        for i, m in enumerate(self._messages):
            if receipt_handle == m.receipt_handle or receipt_handle in m._old_receipt_handles:
                self.pending_messages.discard(m)
                self.deleted_messages.update(m.all_receipt_handles)
                self._messages = self._messages[:i] + self._messages[i + 1 :]  # a new list, as moto assigns one
                return
        raise ReceiptHandleIsInvalid()

    backend_for_host = DomainDispatcherApplication.get_backend_for_host
    backends_by_host: dict[str | None, Any] = {}

    def cached_backend_for_host(self: Any, host: str | None) -> Any:
        if host not in backends_by_host:  # a pure function of the host name: moto's patterns never change
            backends_by_host[host] = backend_for_host(self, host)
        return backends_by_host[host]

    DomainDispatcherApplication.get_backend_for_host = cached_backend_for_host  # type: ignore[method-assign]
    Message.had_receipt_handle = had_handle  # type: ignore[method-assign]
    Queue.delete_message = delete_in_one_scan  # type: ignore[method-assign]
    Queue.pending_message_groups = property(pending_groups)  # type: ignore[assignment, method-assign]
    SQSBackend.is_message_valid_based_on_retention_period = valid  # type: ignore[method-assign]
    Queue.messages = property(visible_messages)  # type: ignore[assignment, method-assign]
    Queue.attributes = property(cached_attributes)  # type: ignore[assignment, method-assign]
    Queue._set_attributes = set_and_forget  # type: ignore[method-assign]
    TaggedEC2Resource.get_tags = get_tags  # type: ignore[method-assign]

    import bisect
    import functools

    import moto.core.responses
    import moto.sqs.models
    from moto.core.parse import QueryParser

    def gonna_recurse(self: Any, query_params: dict[str, Any], prefix: str) -> bool:
        if prefix == "":
            return False
        cached = self.__dict__.get("_bench_keys")
        if cached is None or cached[0] is not query_params or cached[1] != len(query_params):
            cached = (query_params, len(query_params), sorted(query_params))
            self.__dict__["_bench_keys"] = cached
        keys = cached[2]
        at = bisect.bisect_left(keys, prefix)  # the keys starting with prefix, if any, begin here
        return not (at < len(keys) and keys[at].startswith(prefix))

    QueryParser._gonna_recurse = gonna_recurse  # type: ignore[method-assign]
    moto.core.responses.method_names_from_class = functools.cache(moto.core.responses.method_names_from_class)  # type: ignore[attr-defined]
    millis = moto.sqs.models.unix_time_millis  # type: ignore[attr-defined]
    moto.sqs.models.unix_time_millis = lambda dt=None: time.time() * 1000.0 if dt is None else millis(dt)  # type: ignore[attr-defined]


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


def moto_host(cluster_name: str, conn: Any) -> None:
    """``multiprocessing`` target: moto with the bench's shortcuts (:func:`_patch_moto`), seeded for
    ``cluster_name``; sends ``(endpoint_url, environ)`` on ``conn`` and serves until the process is ended."""
    from nodesmith.sim import aws as embedded_aws

    _patch_moto()
    embedded = embedded_aws.start()
    embedded_aws.seed(cluster_name=cluster_name)
    conn.send((embedded.endpoint_url, embedded.environ))
    region = embedded.environ["AWS_DEFAULT_REGION"]
    while True:  # serve the simulated kubelet's instance reads until the process is ended
        if conn.recv() == "instances":
            conn.send(_live_instances(cluster_name, region))


def _live_instances(cluster_name: str, region: str) -> list[dict[str, Any]]:
    """What the adapter's ``list_instances`` DescribeInstances returns (our live instances), read from moto's
    memory in boto3's shape, for :func:`~nodesmith.adapters.aws.instances.instance_from_ec2`, without the
    XML round trip (a kubelet knows its own instance; only the simulation needs the list)."""
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends

    from nodesmith.adapters.aws.instances import LIVE_STATES, NODECLASS_TAG, NODEPOOL_TAG

    backend = ec2_backends[DEFAULT_ACCOUNT_ID][region]
    out: list[dict[str, Any]] = []
    for inst in list(backend.all_instances()):
        tags = dict(backend.tags.get(inst.id, {}))
        if inst.state not in LIVE_STATES or tags.get(f"kubernetes.io/cluster/{cluster_name}") != "owned":
            continue
        if NODEPOOL_TAG not in tags or NODECLASS_TAG not in tags:
            continue
        out.append(
            {
                "InstanceId": inst.id,
                "InstanceType": inst.instance_type,
                "Placement": {"AvailabilityZone": inst.placement.zone},
                "State": {"Name": inst.state},
                "LaunchTime": inst.launch_time,
                "PrivateDnsName": inst.private_dns_name,
                "ImageId": inst.image_id,
                "SubnetId": inst.subnet_id or "",
                "InstanceLifecycle": inst.lifecycle or "",
                "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
            }
        )
    return out


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
        """The demo's world, with moto in a process of its own (:func:`moto_host`), the kubelet's instance list
        cached (moto's tag-filtered DescribeInstances is quadratic in instances x tags), binds refused on nodes
        cordoned since the scheduler's snapshot, and every simulated component stepping at most every
        :data:`SIM_MIN_STEP_SECONDS`."""

        moto: Any = None
        moto_conn: Any = None

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
            conn, lock, store = self.moto_conn, threading.Lock(), self.store

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
    """Spot instances tagged as Nodesmith launched them, spread over the seeded zones; one NodeClaim each."""
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
    name = inst["claim"]
    store.create(
        "nodeclaims.karpenter.sh",
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default", "team": "platform"}},
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
