"""N simultaneous spot interruptions in the embedded environment: how fast every node is cordoned,
replacements are launched and the pods run again, and whether any pod or PodDisruptionBudget suffered.

World (all in this process): the embedded AWS (``nodesmith.sim.aws``: moto server with EC2, SQS,
EventBridge, DynamoDB), the Kubernetes API emulator (``nodesmith.sim.kube``), the simulated
kube-scheduler, kubelet and Deployment/ReplicaSet controllers (``nodesmith.sim``), and the real
adapters and Lambda handlers. Setup, not timed:

* ``--nodes`` spot ``m5.large`` instances (moto ``RunInstances``) tagged as Nodesmith launched them,
  one NodeClaim each; the simulated kubelet registers their Nodes;
* Deployments of 20 replicas filling every node with ``--pods-per-node`` pods (450m CPU each);
  every ``--pdb-every``-th Deployment has a PodDisruptionBudget ``maxUnavailable: 1``;
* the state table in DynamoDB and the interruption queue fed by the EventBridge rules.

Timed run, from ``t0`` = the moment the bench starts putting the events on EventBridge:

* one real-format ``EC2 Spot Instance Interruption Warning`` per node goes to the default event bus
  (``PutEvents``, 10 entries a call); the rule delivers it to the SQS queue;
* ``--concurrency`` threads do what the Lambda SQS event source mapping does: receive up to 10
  messages (filling the batch for up to the stack's 1 s batching window), invoke the interruption
  handler, delete what it did not report as failed. Every
  ``--duplicate-every``-th message is delivered twice (SQS is at-least-once);
* the reconcile handler runs every 60 s from ``t0 + 60`` (the EventBridge schedule);
* at each event's deadline (event time + 120 s) EC2 reclaims its instance if it is still running
  (the bench terminates it; pods still on the node are lost).

Measured (seconds from ``t0``): ``cordoned_seconds`` when every interrupted node is tainted
``karpenter.sh/disrupted`` and unschedulable; ``replacements_launched_seconds`` when the last NodeClaim
created after ``t0`` was launched; ``pods_running_again_seconds`` when every Deployment pod is
Running and Ready on a node that was not interrupted (null if that never happened before
``--timeout``). ``pods_lost`` = pods still on a node when EC2 reclaimed it + pods deleted
directly (force-deleted for the deadline, bypassing PodDisruptionBudgets). ``pdb_violations``
counts times a budgeted Deployment had fewer healthy pods than the budget allows.
With ``--preload`` every warning is delivered before ``t0`` (the consumers start at ``t0``; each
deadline still counts from its warning's delivery), which takes the emulator's delivery cost out of
the cordon figure without giving the drains more time.
``drains_per_event`` is how many times a drain actually ran per (event, instance) on its first
attempt -- the original message, or its hand-off continuation in a burst -- (target exactly 1,
duplicates included); continuations of long drains are counted apart. ``pods_lost`` also counts
Ready pods removed with their node (the pod garbage collector), never evicted.
``--crash-every n`` kills the invocation draining every n-th instance once, right after its first
evictions' progress was stored (a ``BaseException``, as if Lambda timed out): nothing of that
invocation is acknowledged, and its records come back when the visibility the handler gave them on
start (its remaining time + 5 s, ``ChangeMessageVisibilityBatch`` in moto) ends, not after the
queue's 121 s; ``crash_resume`` reports how many drains resumed from the progress in DynamoDB.

Caveats, also in the output: every "Lambda invocation" is a thread of this one process, sharing
the GIL with moto and the emulator, and the Kubernetes client and caches of one container; real
invocations each have their own CPU (``process_cpu_share`` says how busy the machine's cores were).
Where moto or the simulation is quadratic in the number of nodes, pods or messages, the bench
takes a shortcut with the same answers and lists it in ``emulator_shortcuts``; the handlers,
services and adapters run unchanged.

    python bench/interruptions.py --nodes 100 --json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from collections import Counter
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
SCHEDULE_SECONDS = 60.0
DISRUPTED = "karpenter.sh/disrupted"
BATCHING_WINDOW_SECONDS = 1.0
"""The stack's ``MaximumBatchingWindowInSeconds``: the event source mapping fills a batch for up to this long."""
VISIBILITY_TIMEOUT_SECONDS = 6 * 20 + 1
"""How long a received message stays invisible (the stack's 6 x the 20 s function timeout + the 1 s batching
window; ``--visibility-timeout``): the receive's visibility, which the handler shortens on start to its
remaining time + 5 s, so a killed invocation's records come back after ~25 s."""


def _conditions(obj: dict[str, Any]) -> dict[str, str]:
    return {c.get("type", ""): c.get("status", "") for c in (obj.get("status") or {}).get("conditions") or []}


def _now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Monitor:
    """Follows the emulator's store (a watch subscription) and records when the milestones happen."""

    def __init__(self, *, store: Any, nodes: set[str], initial_claims: set[str], pdb_apps: dict[str, int]) -> None:
        self.store = store
        self.nodes = nodes  # interrupted node names
        self.initial_claims = initial_claims
        self.pdb_apps = pdb_apps  # app -> replicas
        self.t0 = 0.0
        self.cordoned: dict[str, float] = {}
        self.launched: dict[str, float] = {}
        self.pods: dict[str, tuple[str, str, bool]] = {}  # key -> (app, node, healthy)
        self.healthy_by_app: Counter[str] = Counter()
        self.safe = 0  # healthy pods on nodes that were not interrupted
        self.total_pods = 0
        self.all_running_at: float | None = None
        self.violations = 0
        self.in_violation: set[str] = set()
        self.details: list[dict[str, Any]] = []
        self.deleted_while_ready: list[tuple[str, str, bool]] = []  # (pod key, node, node already deleted)
        self.removed_nodes: set[str] = set()
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.errors: list[str] = []
        self.sub = store.subscribe(resources=["nodes", "pods", "nodeclaims.karpenter.sh"])
        for pod in store.objects("pods"):
            self._pod(pod, deleted=False)

    def start(self, t0: float, total_pods: int) -> threading.Thread:
        self.t0 = t0
        self.total_pods = total_pods
        thread = threading.Thread(target=self._run, name="bench-monitor", daemon=True)
        thread.start()
        return thread

    def _run(self) -> None:
        while not self.stop.is_set():
            event = self.sub.get(timeout=0.2)
            if event is None:
                continue
            for ev in [event, *self.sub.drain()]:
                now = time.monotonic() - self.t0
                with self.lock:
                    try:
                        self._handle(ev, now)
                    except Exception as exc:  # a bench bug must not silently stop the measurements
                        self.errors.append(f"{type(exc).__name__}: {exc}")

    def _handle(self, ev: Any, now: float) -> None:
        obj = ev.object
        name = obj["metadata"]["name"]
        if ev.resource == "nodes":
            if ev.type == "DELETED":
                self.removed_nodes.add(name)
                return
            spec = obj.get("spec") or {}
            disrupted = any(t.get("key") == DISRUPTED for t in spec.get("taints") or [])
            if name in self.nodes and name not in self.cordoned and spec.get("unschedulable") and disrupted:
                self.cordoned[name] = now
        elif ev.resource == "nodeclaims.karpenter.sh":
            fresh = name not in self.initial_claims and name not in self.launched and ev.type != "DELETED"
            if fresh and _conditions(obj).get("Launched") == "True":
                self.launched[name] = now
        else:
            self._pod(obj, deleted=ev.type == "DELETED")
            self._check(now)

    def _pod(self, pod: dict[str, Any], *, deleted: bool) -> None:
        """Update the pod's entry and the running totals (healthy per app, healthy on safe nodes)."""
        meta = pod["metadata"]
        key = f"{meta.get('namespace')}/{meta['name']}"
        app = (meta.get("labels") or {}).get("app", "")
        old = self.pods.pop(key, None)
        if deleted and old is not None and old[2]:
            self.deleted_while_ready.append((key, old[1], old[1] in self.removed_nodes))
        if old is not None and old[2]:
            self.healthy_by_app[old[0]] -= 1
            self.safe -= old[1] not in self.nodes
        if deleted or not app:
            return
        node = (pod.get("spec") or {}).get("nodeName") or ""
        healthy = bool(
            not meta.get("deletionTimestamp")
            and (pod.get("status") or {}).get("phase") == "Running"
            and _conditions(pod).get("Ready") == "True"
        )
        self.pods[key] = (app, node, healthy)
        if healthy:
            self.healthy_by_app[app] += 1
            self.safe += node not in self.nodes

    def _check(self, now: float) -> None:
        if self.all_running_at is None and self.safe >= self.total_pods:
            self.all_running_at = now
        for app, replicas in self.pdb_apps.items():
            below = self.healthy_by_app[app] < replicas - 1  # maxUnavailable: 1
            if below and app not in self.in_violation:
                self.violations += 1
                self.in_violation.add(app)
                if len(self.details) < 5:
                    unhealthy = sorted(node for a, node, healthy in self.pods.values() if a == app and not healthy)
                    self.details.append({"t": round(now, 2), "app": app, "healthy": self.healthy_by_app[app],
                                         "unhealthy_on": unhealthy})  # fmt: skip
            elif not below:
                self.in_violation.discard(app)


class LambdaKilled(BaseException):
    """The bench's stand-in for Lambda killing an invocation mid-drain (timeout, out of memory): a
    BaseException, so no handler code catches it and SQS delivers the invocation's records again."""


class Counters:
    """Calls the bench counts by wrapping the real code: drains run, continuations, direct pod deletes;
    and the crash injection: the first progress save of a target instance's drain after at least one
    eviction kills the invocation (:class:`LambdaKilled`), once per target."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.crash_targets: set[str] = set()
        self.crashed: set[str] = set()
        self.resumed_from_progress: dict[str, int] = {}  # instance id -> pods evicted before the crash
        self.drains: Counter[tuple[str, str, int]] = Counter()  # (event, instance, attempt; 0 = first drain)
        self.handed_off = 0
        self.continuations = 0
        self.force_deleted = 0
        self.invocations = 0
        self.failed_records = 0
        self.errors: list[str] = []
        self.replacements: list[Any] = []

    def install(self) -> None:
        from nodesmith.adapters.aws.provider import Ec2CloudProvider
        from nodesmith.adapters.aws.queue import InterruptionQueue
        from nodesmith.adapters.kube.cluster import KubeCluster
        from nodesmith.services import interrupt_batch

        drain, send, delete_pod = interrupt_batch._Batch.drain, InterruptionQueue.send, KubeCluster.delete_pod
        save, hand_off = interrupt_batch._Batch.save, interrupt_batch._Batch.hand_off
        replace_capacity = interrupt_batch._replace
        counters = self

        def counted_replace(fn: Any) -> Any:
            result = replace_capacity(fn)
            with counters.lock:
                counters.replacements.append(result)
            return result

        def counted_drain(self: Any, entry: Any, case: Any) -> Any:
            with counters.lock:
                first = entry.item.continuation is None or entry.item.continuation.handoff
                counters.drains[
                    (entry.item.message.event_id, case.instance_id, 0 if first else entry.item.attempt)
                ] += 1
                crashed = case.instance_id in counters.crashed
            if crashed and self.state is not None:
                prior = self.state.get_drain(instance_id=case.instance_id)
                if (
                    prior is not None
                    and prior.event_id == entry.item.message.event_id
                    and prior.evicted
                    and not prior.done
                ):
                    with counters.lock:
                        counters.resumed_from_progress[case.instance_id] = prior.evicted
            return drain(self, entry, case)

        def counted_hand_off(self: Any, entry: Any, cases: Any) -> Any:
            out = hand_off(self, entry, cases)
            with counters.lock:
                counters.handed_off += len(cases)
            return out

        def crashing_save(self: Any, progress: Any, warnings: list[str]) -> None:
            save(self, progress, warnings)
            iid = progress.instance_id
            if iid in counters.crash_targets and progress.evicted >= 1 and not progress.done:
                with counters.lock:
                    if iid in counters.crashed:
                        return
                    counters.crashed.add(iid)
                raise LambdaKilled(f"invocation killed mid-drain of {iid} after {progress.evicted} evictions")

        def counted_send(self: Any, body: Any, delay_seconds: int) -> str:
            with counters.lock:
                counters.continuations += 1
            return send(self, body, delay_seconds)

        def counted_delete(self: Any, **kwargs: Any) -> None:
            with counters.lock:
                counters.force_deleted += 1
            delete_pod(self, **kwargs)

        terminate = Ec2CloudProvider.terminate

        def noted_terminate(self: Any, *, instance_ids: Any) -> None:
            TERMINATED.update(instance_ids)
            terminate(self, instance_ids=instance_ids)

        Ec2CloudProvider.terminate = noted_terminate  # type: ignore[method-assign]
        interrupt_batch._Batch.drain = counted_drain  # type: ignore[method-assign]
        interrupt_batch._Batch.save = crashing_save  # type: ignore[method-assign]
        interrupt_batch._Batch.hand_off = counted_hand_off  # type: ignore[method-assign]
        InterruptionQueue.send = counted_send  # type: ignore[method-assign]
        KubeCluster.delete_pod = counted_delete  # type: ignore[method-assign]
        interrupt_batch._replace = counted_replace


TERMINATED: set[str] = set()
"""Instance ids terminated during the run (by the handlers or the bench's EC2 reclaim)."""

SIM_MIN_STEP_SECONDS = 0.5
"""Shortest time between two steps of a simulated scheduler, kubelet or controller (seconds)."""

KUBELET_INSTANCE_CACHE_SECONDS = {"seconds": 3.0}
"""How long the simulated kubelet reuses its instance list (seconds; 3, or nodes / 100 when larger): it
delays node registration and NotReady by at most this much, and keeps moto's DescribeInstances of every
instance (serialised as XML) from eating the GIL."""

EMULATOR_SHORTCUTS = [
    "moto SQS: the retention check per received message reads the retention period, and queue attributes "
    "(scanned on every SendMessage) are recomputed at most once a second (moto's are O(queue) per message)",
    "moto EC2: an instance's tags are read by its id (moto filters every tag of the account per instance)",
    "simulated kubelet: EC2 instance list cached max(3 s, nodes / 100 s), less the instances terminated since",
    "simulated kube-scheduler: a bind to a node cordoned since the scheduler's snapshot is refused (the real "
    "scheduler's informer cache sees the taint within milliseconds; the sim's snapshot here is seconds old)",
    "simulated ReplicaSet controller: pods indexed by owner once per step instead of a scan per ReplicaSet",
    f"simulated scheduler, kubelet and controllers step at most every {SIM_MIN_STEP_SECONDS:g} s",
    "SQS event source mapping: receives until 10 messages or the stack's 1 s batching window",
]


def _patch_moto() -> None:
    """Take moto's quadratic paths out of the measurement (same answers):

    * SQS: the retention check of every received message reads the retention period instead of all
      queue attributes, and a queue's attributes (whose Approximate* counts scan every message, read on
      every SendMessage) are recomputed at most once a second (and at once after SetQueueAttributes);
    * EC2: an instance's tags are read from the tag store by id instead of filtering every tag of the
      account (done per instance by every DescribeInstances).
    """
    from moto.ec2.models.core import TaggedEC2Resource
    from moto.ec2.utils import EC2_PREFIX_TO_RESOURCE, get_prefix
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

    SQSBackend.is_message_valid_based_on_retention_period = valid  # type: ignore[method-assign]
    Queue.attributes = property(cached_attributes)  # type: ignore[assignment, method-assign]
    Queue._set_attributes = set_and_forget  # type: ignore[method-assign]
    TaggedEC2Resource.get_tags = get_tags  # type: ignore[method-assign]


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

        node = self._store.find("nodes", node_name)
        spec = (node or {}).get("spec") or {}
        if (
            node is None
            or spec.get("unschedulable")
            or any(t.get("key") == DISRUPTED for t in spec.get("taints") or [])
        ):
            raise errors.conflict("pods", name, "", f"node {node_name} was cordoned after the scheduler's snapshot")
        return self._store.bind(name, namespace=namespace, node_name=node_name)


def _throttled(component: Any) -> Any:
    """``component`` stepping at most every :data:`SIM_MIN_STEP_SECONDS`: the Runner steps on every watch
    event, and in a burst there always is one, so the simulated controllers would otherwise spin on the GIL."""

    class Throttled(type(component)):  # type: ignore[misc]
        def __init__(self) -> None:  # the wrapped component's state is shared, not rebuilt
            self.__dict__ = component.__dict__
            self._last_step = 0.0

        def step(self, now: float) -> Any:
            wait = self._last_step + SIM_MIN_STEP_SECONDS - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            self._last_step = time.monotonic()
            return super().step(now)

    Throttled.__name__ = type(component).__name__
    return Throttled()


def _indexed_controllers(base: Any) -> Any:
    """The simulated Deployment/ReplicaSet controllers with the ReplicaSet loop's pod lookup indexed by owner:
    the same decisions as ``SimControllers._replicaset`` (create or delete to reach spec.replicas, unbound,
    then not ready, then newest deleted first), computed from one pass over the pods per step."""
    from nodesmith.sim import controllers as c

    class Indexed(base):  # type: ignore[misc, valid-type]
        _index: dict[tuple[str, str], list[dict[str, Any]]] | None = None

        def step(self, now: float) -> None:
            self._index = None
            super().step(now)

        def _owned_pods(self, ns: str, uid: str) -> list[dict[str, Any]]:
            if self._index is None:
                index: dict[tuple[str, str], list[dict[str, Any]]] = {}
                for pod in self.store.objects("pods"):
                    owner = c._controller(pod) or {}
                    index.setdefault((pod["metadata"].get("namespace") or "default", owner.get("uid", "")), []).append(
                        pod
                    )
                self._index = index
            return self._index.get((ns, uid), [])

        def _replicaset(self, rs: Any) -> None:
            meta = rs["metadata"]
            ns, uid = meta.get("namespace") or "default", meta.get("uid")
            active = [p for p in self._owned_pods(ns, uid) if c._active(p)]
            diff = c._replicas(rs) - len(active)
            if diff > 0:
                for _ in range(diff):
                    self._create_pod(rs)
            elif diff < 0:
                ranked = sorted(active, key=lambda p: p["metadata"]["name"])
                ranked.sort(key=lambda p: p["metadata"].get("creationTimestamp", ""), reverse=True)
                ranked.sort(key=lambda p: (bool((p.get("spec") or {}).get("nodeName")), c._ready(p)))
                for pod in ranked[:-diff]:
                    self._delete("pods", pod["metadata"]["name"], ns)
                active = ranked[-diff:]
            ready = sum(1 for p in active if c._ready(p))
            replicas = len(active) + max(diff, 0)
            status = {
                "observedGeneration": meta.get("generation", 1),
                "replicas": replicas,
                "readyReplicas": ready,
                "availableReplicas": ready,
                "fullyLabeledReplicas": replicas,
            }
            self._set_status(c._REPLICASETS, rs, status)

    return Indexed


def _world_class() -> Any:
    from nodesmith.cli.world import EmbeddedWorld

    class BenchWorld(EmbeddedWorld):
        """The demo's world, with the kubelet's instance list cached (moto's tag-filtered DescribeInstances is
        quadratic in instances x tags) and the ReplicaSet controller indexing pods once per step."""

        def _start_components(self) -> None:
            from nodesmith.handlers import wiring
            from nodesmith.sim.controllers import SimControllers
            from nodesmith.sim.kube_scheduler import SimScheduler
            from nodesmith.sim.kubelet import SimKubelet
            from nodesmith.sim.runner import Runner

            cloud = wiring.build_cloud(wiring.get_settings())
            cache: dict[str, Any] = {"at": 0.0, "items": []}

            def instances() -> list[Any]:
                if time.monotonic() - cache["at"] > KUBELET_INSTANCE_CACHE_SECONDS["seconds"]:
                    cache["items"] = cloud.list_instances()
                    cache["at"] = time.monotonic()
                # A terminated instance's kubelet is gone: the cache must not let the sim re-register its Node
                # (it did, between our DeleteNode and DeleteNodeClaim, and pods were scheduled onto it).
                return [i for i in cache["items"] if i.instance_id not in TERMINATED]

            components = (
                _indexed_controllers(SimControllers)(store=self.store),
                SimScheduler(store=_FreshBindStore(self.store)),
                SimKubelet(store=self.store, instances=instances, ready_delay=self.ready_delay),
            )
            self._runners = [
                Runner(_throttled(c), interval=0.5).start()  # type: ignore[arg-type]
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
                            "terminationGracePeriodSeconds": 30,
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


def _warm_up() -> None:
    """What a warm Lambda container already has: handlers imported, clients built, the instance-type
    catalogue cached (5 minutes, like Karpenter's). Cold starts are not what this bench measures."""
    import nodesmith.handlers.interruption
    import nodesmith.handlers.reconcile
    import nodesmith.services.reconcile  # noqa: F401 - the replacement pass imports it lazily
    from nodesmith.handlers import wiring

    settings = wiring.get_settings()
    cluster = wiring.build_cluster(settings)
    cloud = wiring.build_cloud(settings)
    for nodeclass in cluster.list_ec2nodeclasses():
        cloud.instance_types(nodeclass=nodeclass)
    wiring.build_idempotency(settings)
    wiring.build_requeue(settings)


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


class Consumer:
    """The SQS event source mapping: receive, invoke the handler, delete what succeeded."""

    def __init__(self, *, world: Any, counters: Counters, duplicate_every: int, stop: threading.Event) -> None:
        self.world = world
        self.counters = counters
        self.duplicate_every = duplicate_every
        self.stop = stop
        self.seen = 0
        self.duplicated: set[str] = set()
        self.killed = 0
        self.visibility_timeout = VISIBILITY_TIMEOUT_SECONDS
        self.lock = threading.Lock()
        self.sqs = world.client("sqs")

    def run(self) -> None:
        from nodesmith.cli.world import LambdaContext
        from nodesmith.handlers.interruption import handler

        arn = "arn:aws:sqs:us-east-1:123456789012:" + self.world.queue_url.rsplit("/", 1)[-1]
        while not self.stop.is_set():
            messages = self._receive(10, wait=1)
            if not messages:
                continue
            window_end = time.monotonic() + BATCHING_WINDOW_SECONDS
            while len(messages) < 10 and time.monotonic() < window_end and not self.stop.is_set():
                messages += self._receive(10 - len(messages), wait=1)  # a long poll, not a busy loop
            self._duplicate(messages)
            records = [
                {
                    "messageId": m["MessageId"],
                    "receiptHandle": m["ReceiptHandle"],
                    "body": m["Body"],
                    "attributes": {"SentTimestamp": str(int(time.time() * 1000))},
                    "messageAttributes": {},
                    "md5OfBody": m.get("MD5OfBody", ""),
                    "eventSource": "aws:sqs",
                    "eventSourceARN": arn,
                    "awsRegion": "us-east-1",
                }
                for m in messages
            ]
            try:
                result = handler(
                    {"Records": records}, LambdaContext(function_name="nodesmith-interruption", timeout_seconds=20)
                )
                failed = {f["itemIdentifier"] for f in result.get("batchItemFailures", [])}
            except LambdaKilled:  # nothing is deleted: records come back when the handler's shortened visibility ends
                with self.lock:
                    self.killed += 1
                continue
            except Exception as exc:  # the invocation failed as a whole: SQS redelivers every record
                failed = {m["MessageId"] for m in messages}
                with self.counters.lock:
                    self.counters.errors.append(f"{type(exc).__name__}: {exc}")
            with self.counters.lock:
                self.counters.invocations += 1
                self.counters.failed_records += len(failed)
            done = [m for m in messages if m["MessageId"] not in failed]
            if done:  # the event source mapping deletes a batch's successes in one DeleteMessageBatch
                self.sqs.delete_message_batch(
                    QueueUrl=self.world.queue_url,
                    Entries=[{"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(done)],
                )

    def _receive(self, count: int, *, wait: int) -> list[dict[str, Any]]:
        return list(
            self.sqs.receive_message(
                QueueUrl=self.world.queue_url,
                MaxNumberOfMessages=count,
                WaitTimeSeconds=wait,
                VisibilityTimeout=self.visibility_timeout,
            ).get("Messages", [])
        )

    def _duplicate(self, messages: list[dict[str, Any]]) -> None:
        """At-least-once delivery: send every n-th original event's body again, unchanged."""
        if not self.duplicate_every:
            return
        for m in messages:
            body = json.loads(m["Body"])
            if "nodesmith-continuation" in body:
                continue
            with self.lock:
                self.seen += 1
                due = self.seen % self.duplicate_every == 0 and body["id"] not in self.duplicated
                if due:
                    self.duplicated.add(body["id"])
            if due:
                self.sqs.send_message(QueueUrl=self.world.queue_url, MessageBody=m["Body"])


def _reclaim(
    world: Any, launched: list[dict[str, Any]], deadlines: dict[str, float], stop: threading.Event
) -> set[str]:
    """EC2 takes back every interrupted instance still running at its deadline; returns the pods lost with them."""
    ec2 = world.client("ec2")
    by_id = {i["InstanceId"]: i for i in launched}
    lost: set[str] = set()
    pending = dict(deadlines)
    while pending and not stop.is_set():
        now = time.monotonic()
        due = [iid for iid, at in pending.items() if at <= now]
        if due:
            running = {
                i["InstanceId"]
                for r in ec2.describe_instances(InstanceIds=due)["Reservations"]
                for i in r["Instances"]
                if i["State"]["Name"] in ("pending", "running")
            }
            names = {by_id[iid]["PrivateDnsName"] for iid in running}
            lost |= {
                f"{p['metadata'].get('namespace')}/{p['metadata']['name']}"
                for p in world.store.objects("pods")
                if (p.get("spec") or {}).get("nodeName") in names and (p["metadata"].get("labels") or {}).get("app")
            }
            if running:
                TERMINATED.update(running)
                ec2.terminate_instances(InstanceIds=sorted(running))
            for iid in due:
                pending.pop(iid)
        stop.wait(0.5)
    return lost


def _schedule(world: Any, t0: float, stop: threading.Event, runs: list[dict[str, Any]]) -> None:
    """The reconcile Lambda's EventBridge schedule: a pass every 60 s from t0 + 60."""
    from nodesmith.cli.world import LambdaContext
    from nodesmith.handlers.reconcile import handler

    tick = t0 + SCHEDULE_SECONDS
    while not stop.wait(max(0.0, tick - time.monotonic())):
        try:
            runs.append(handler({}, LambdaContext(function_name="nodesmith-reconcile", timeout_seconds=900)))
        except Exception as exc:
            runs.append({"error": str(exc)})
        tick += SCHEDULE_SECONDS


def run(args: argparse.Namespace) -> dict[str, Any]:
    os.environ.update(
        {
            "POWERTOOLS_LOG_LEVEL": "ERROR",
            "POWERTOOLS_METRICS_DISABLED": "true",
            "NODESMITH_DISRUPTION": "false",
            "NODESMITH_DRAIN_TIMEOUT_SECONDS": "15",  # the stack's min(drainTimeoutSeconds, timeout - 5) at 20 s
        }
    )
    KUBELET_INSTANCE_CACHE_SECONDS["seconds"] = max(3.0, args.nodes / 100)
    counters = Counters()
    counters.install()
    _patch_moto()
    started = time.monotonic()
    world = _world_class()(ready_delay=1.0).start()
    try:
        from nodesmith.handlers import wiring

        table = _create_table(world)
        os.environ["NODESMITH_STATE_TABLE"] = table
        wiring.reset()
        for doc in _nodepool_docs():
            world.store.apply(doc)
        launched = _launch_nodes(world, args.nodes)
        names = {i["PrivateDnsName"] for i in launched}
        if args.crash_every:
            counters.crash_targets = {i["InstanceId"] for i in launched[:: args.crash_every]}

        def ready() -> int:
            nodes = world.store.objects("nodes")
            return sum(1 for n in nodes if n["metadata"]["name"] in names and _conditions(n).get("Ready") == "True")

        _say(args, f"{len(launched)} instances launched; waiting for their nodes")
        if not world.wait_for(lambda: ready() >= len(names), timeout=600):
            raise RuntimeError("the simulated kubelet did not register every node")
        total_pods = args.nodes * args.pods_per_node
        budgeted = _deploy(world.store, total_pods, args.pdb_every)
        _say(args, f"{len(names)} nodes ready; waiting for {total_pods} pods")
        if not world.wait_for(lambda: _running(world.store) >= total_pods, timeout=900, every=0.5):
            raise RuntimeError(f"only {_running(world.store)} of {total_pods} pods started")
        _warm_up()
        setup_seconds = time.monotonic() - started
        monitor = Monitor(
            store=world.store,
            nodes=names,
            initial_claims={c["metadata"]["name"] for c in world.store.objects("nodeclaims.karpenter.sh")},
            pdb_apps=budgeted,
        )

        stop = threading.Event()
        deliver = _send_events if args.deliver == "sqs" else _put_events
        if args.preload:  # every warning waits in the queue before the clock starts (deadlines run already)
            put_started = time.monotonic()
            deadlines = deliver(world, launched)
            events_put = time.monotonic() - put_started
        t0 = time.monotonic()
        cpu0 = time.process_time()
        monitor.start(t0, total_pods)
        consumer = Consumer(world=world, counters=counters, duplicate_every=args.duplicate_every, stop=stop)
        consumer.visibility_timeout = args.visibility_timeout
        workers = [threading.Thread(target=consumer.run, name=f"esm-{i}", daemon=True) for i in range(args.concurrency)]
        for w in workers:
            w.start()
        if not args.preload:
            deadlines = deliver(world, launched)
            events_put = time.monotonic() - t0
        lost_box: list[set[str]] = []
        reclaimer = threading.Thread(
            target=lambda: lost_box.append(_reclaim(world, launched, deadlines, stop)), name="reclaim", daemon=True
        )
        reclaimer.start()
        ticks: list[dict[str, Any]] = []
        scheduler = threading.Thread(target=_schedule, args=(world, t0, stop, ticks), name="schedule", daemon=True)
        scheduler.start()

        def finished() -> bool:
            with monitor.lock:
                return monitor.all_running_at is not None and names <= monitor.removed_nodes

        deadline = time.monotonic() + args.timeout
        while not finished() and time.monotonic() < deadline:
            time.sleep(1.0)
            with monitor.lock:
                _say(args, f"t={time.monotonic() - t0:6.1f}s cordoned={len(monitor.cordoned)} "
                     f"launched={len(monitor.launched)} safe={monitor.safe}/{total_pods} "
                     f"removed={len(names & monitor.removed_nodes)} invocations={counters.invocations} "
                     f"drains={sum(counters.drains.values())} continuations={counters.continuations} "
                     f"failed={counters.failed_records} errors={(monitor.errors + counters.errors)[:2]} "
                     f"passes={[(r.ran, r.nodeclaims_launched) for r in counters.replacements]}")  # fmt: skip
        stop.set()
        for t in (*workers, reclaimer, scheduler):
            t.join(timeout=120)
        monitor.stop.set()
        end = time.monotonic() - t0
        cpu = time.process_time() - cpu0
        done = finished()
        with monitor.lock:
            reclaimed = lost_box[0] if lost_box else set()
            # Ready pods deleted after their node was: the pod garbage collector removed them, never evicted.
            with_node = {key for key, _, gone in monitor.deleted_while_ready if gone}
            cordoned = max(monitor.cordoned.values()) if len(monitor.cordoned) == len(names) else None
            first_attempts = [
                n for (_, iid, attempt), n in counters.drains.items() if attempt == 0 and iid not in counters.crashed
            ]
            crashed_attempts = [
                n for (_, iid, attempt), n in counters.drains.items() if attempt == 0 and iid in counters.crashed
            ]
            return {
                "nodes": args.nodes,
                "pods": total_pods,
                "pods_behind_pdbs": sum(budgeted.values()),
                "concurrency": args.concurrency,
                "cordoned_seconds": None if cordoned is None else round(cordoned, 2),
                "nodes_cordoned": len(monitor.cordoned),
                "replacements_launched_seconds": round(max(monitor.launched.values()), 2) if monitor.launched else None,
                "replacement_nodeclaims": len(monitor.launched),
                "pods_running_again_seconds": None
                if monitor.all_running_at is None
                else round(monitor.all_running_at, 2),
                "pods_lost": len(reclaimed | with_node) + counters.force_deleted,
                "pods_lost_to_reclaim": len(reclaimed),
                "pods_lost_with_their_node": len(with_node - reclaimed),
                "pods_lost_with_their_node_examples": sorted(
                    f"{key} on {node}" for key, node, gone in monitor.deleted_while_ready if gone
                )[:5],
                "pods_force_deleted": counters.force_deleted,
                "pdb_violations": monitor.violations,
                "drains_per_event": {
                    "min": min(first_attempts, default=0),
                    "max": max(first_attempts, default=0),
                    "events": len(first_attempts),
                    "duplicated_deliveries": len(consumer.duplicated),
                },
                "crash_resume": None
                if not args.crash_every
                else {
                    "targets": len(counters.crash_targets),
                    "invocations_killed": consumer.killed,
                    "drains_killed": len(counters.crashed),
                    "resumed_from_stored_progress": len(counters.resumed_from_progress),
                    "pods_evicted_before_crash_by_resumed_drains": sum(counters.resumed_from_progress.values()),
                    "drains_per_crashed_event": {
                        "min": min(crashed_attempts, default=0),
                        "max": max(crashed_attempts, default=0),
                    },
                    "visibility_timeout_seconds": args.visibility_timeout,
                },
                "events_put_seconds": round(events_put, 2),
                "events_delivered_via": args.deliver,
                "events_preloaded": args.preload,
                "process_cpu_seconds": round(cpu, 1),
                "process_cpu_share": round(cpu / end / (os.cpu_count() or 1), 2),
                "emulator_shortcuts": EMULATOR_SHORTCUTS,
                "pdb_violation_details": monitor.details[:5],
                "continuations": counters.continuations - counters.handed_off,
                "drains_handed_off": counters.handed_off,
                "invocations": counters.invocations,
                "records_failed": counters.failed_records,
                "reconcile_ticks": len(ticks),
                "replacement_passes": {
                    "ran": sum(1 for r in counters.replacements if r.ran),
                    "skipped_lease_held": sum(1 for r in counters.replacements if r.skipped),
                    "failed": sum(1 for r in counters.replacements if r.errors and not r.ran),
                    "nodeclaims_launched": sum(r.nodeclaims_launched for r in counters.replacements),
                },
                "nodes_removed": len(names & monitor.removed_nodes),
                "run_seconds": round(end, 2),
                "setup_seconds": round(setup_seconds, 2),
                "timed_out": not done,
                "note": "one process: handler threads (one per concurrent invocation) share one GIL and "
                f"{os.cpu_count()} cores with moto (EC2, SQS, EventBridge, DynamoDB), the Kubernetes API "
                "emulator and the simulated scheduler/kubelet/controllers; real invocations each have their own CPU",
            }
    finally:
        world.stop()


def _say(args: argparse.Namespace, text: str) -> None:
    if args.verbose:
        print(text, file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--pods-per-node", type=int, default=4)
    parser.add_argument("--pdb-every", type=int, default=4, help="every n-th Deployment gets a PDB (0: none)")
    parser.add_argument("--concurrency", type=int, default=10, help="concurrent handler invocations")
    parser.add_argument("--duplicate-every", type=int, default=10, help="deliver every n-th message twice (0: never)")
    parser.add_argument(
        "--crash-every",
        type=int,
        default=0,
        help="kill the invocation draining every n-th instance once, after its first eviction (0: never)",
    )
    parser.add_argument(
        "--visibility-timeout",
        type=int,
        default=VISIBILITY_TIMEOUT_SECONDS,
        help="seconds a received message stays invisible until the handler shortens it (default: the stack's)",
    )
    parser.add_argument(
        "--deliver",
        choices=["eventbridge", "sqs"],
        default="eventbridge",
        help="put the warnings on EventBridge (its rule feeds the queue) or straight on the queue",
    )
    parser.add_argument(
        "--preload",
        action="store_true",
        help="deliver every warning before the clock starts (their 2 minutes run from delivery)",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the pods to run again")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    parser.add_argument("--verbose", action="store_true", help="progress on stderr")
    args = parser.parse_args()
    real_stdout = sys.stdout
    # What the handlers print (their CloudWatch Logs) goes to stderr with --verbose, else nowhere.
    with Path(os.devnull).open("w") as sink, contextlib.redirect_stdout(sys.stderr if args.verbose else sink):
        result = run(args)
    if args.json:
        print(json.dumps(result, sort_keys=True), file=real_stdout)
    else:
        for key, value in sorted(result.items()):
            print(f"{key:32} {value}", file=real_stdout)


if __name__ == "__main__":
    main()
