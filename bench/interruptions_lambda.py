"""The Lambda side of ``bench/interruptions.py``: the SQS event source mapping (:class:`Consumer`) invoking
the real interruption handler, the counters and crash injection wrapped around the real code
(:class:`Counters`), and :func:`invocations_process`, which runs them in a process of its own, as real
invocations run on their own CPUs apart from the cluster and AWS."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from infra.config import NodesmithConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lambdas"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BATCH_SIZE = 10
"""The stack's event source mapping ``BatchSize`` (``--batch-size``): messages per invocation at most."""
ESM_INITIAL_POLLERS = 5
ESM_POLLERS_PER_SECOND = 5
"""Lambda's SQS scaling: "starts processing five batches at a time with five concurrent invocations", then
"up to 300 more instances per minute" (https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html)."""
BATCHING_WINDOW_SECONDS = 1.0
"""The stack's ``MaximumBatchingWindowInSeconds``: the event source mapping fills a batch for up to this long."""
FUNCTION_TIMEOUT_SECONDS = NodesmithConfig.interruption_timeout_seconds
"""The interruption function's timeout in the stack (seconds, its default), given to each invocation's context."""
VISIBILITY_TIMEOUT_SECONDS = 6 * FUNCTION_TIMEOUT_SECONDS + int(BATCHING_WINDOW_SECONDS)
"""How long a received message stays invisible (the stack's 6 x the function timeout + the batching
window; ``--visibility-timeout``): the receive's visibility, which the handler shortens on start to its
remaining time + 5 s, so a killed invocation's records come back after ~25 s."""


class LambdaKilled(BaseException):
    """The bench's stand-in for Lambda killing an invocation mid-drain (timeout, out of memory): a
    BaseException, so no handler code catches it and SQS delivers the invocation's records again."""


_INVOCATION = threading.local()
"""``id``: the invocation the current thread works for (its pool threads inherit it, see :func:`install_timeouts`)."""
_TIMED_OUT: set[int] = set()
"""Invocations past the function timeout: every AWS or Kubernetes call they still make raises :class:`LambdaKilled`."""


def _check_alive() -> None:
    invocation = getattr(_INVOCATION, "id", None)
    if invocation is not None and invocation in _TIMED_OUT:
        raise LambdaKilled(f"invocation {invocation} ran past the {FUNCTION_TIMEOUT_SECONDS} s function timeout")


def install_timeouts() -> None:
    """Lambda's function timeout for invocations that are threads: once an invocation is past it, every
    AWS call (boto3) and Kubernetes call (the adapter's ``KubeRest``) made for it raises
    :class:`LambdaKilled`, from its own thread or from any pool thread it started (``ThreadPoolExecutor.submit``
    hands the invocation on), so nothing of it reaches AWS or the cluster after its timeout, as after Lambda
    ends it. Python cannot stop a thread, so it unwinds at its next call instead."""
    from concurrent.futures import ThreadPoolExecutor

    from botocore.client import BaseClient

    from nodesmith.adapters.kube.calls import KubeRest

    submit, api_call, request = ThreadPoolExecutor.submit, BaseClient._make_api_call, KubeRest.request

    def inheriting_submit(self: Any, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        invocation = getattr(_INVOCATION, "id", None)
        if invocation is None:
            return submit(self, fn, *args, **kwargs)

        def run(*a: Any, **k: Any) -> Any:
            _INVOCATION.id = invocation
            try:
                return fn(*a, **k)
            finally:
                _INVOCATION.id = None

        return submit(self, run, *args, **kwargs)

    def checked_api_call(self: Any, operation: str, params: Any) -> Any:
        _check_alive()
        return api_call(self, operation, params)

    def checked_request(self: Any, *args: Any, **kwargs: Any) -> Any:
        _check_alive()
        return request(self, *args, **kwargs)

    ThreadPoolExecutor.submit = inheriting_submit  # type: ignore[method-assign]
    BaseClient._make_api_call = checked_api_call
    KubeRest.request = checked_request  # type: ignore[method-assign]


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
        self.drain_runs: dict[tuple[str, str, int], list[tuple[float, int | None]]] = {}  # (start, invocation) per run
        self.handed_off = 0
        self.continuations = 0
        self.force_deleted = 0
        self.invocations = 0
        self.timed_out = 0  # invocations Lambda would have ended at the function timeout (their records come back)
        self.failed_records = 0
        self.wakes_sent = 0  # the interruption batches' asynchronous invokes of the reconcile function
        self.wakes_skipped = 0
        self.wake_passes: list[tuple[float, float, int]] = []  # (monotonic end, seconds, NodeClaims launched)
        self.ended_at_timeout: set[int] = set()  # invocations (all processes) ended at the function timeout
        self.wakes_ended: list[float] = []  # seconds each woken invocation that took the lease ran
        self.errors: list[str] = []
        self.replacements: list[Any] = []
        self.replacement_times: list[tuple[float, float]] = []  # (monotonic end, seconds) per pass that ran
        self.drain_started: dict[tuple[str, str], float] = {}  # (event, instance) -> monotonic first drain start
        self.invocation_seconds: list[float] = []  # wall time of each invocation that returned
        self.calls: Counter[str] = Counter()  # "sqs.ReceiveMessage", "kube GET nodes", ...: what the handlers called
        self.count_calls = False  # only the invocation processes count (not the world's set-up and reclaims)
        self.on_terminate: Any = lambda ids: None
        """Told the instance ids the handlers terminate (the world's kubelet must not see them again)."""

    def install(self) -> None:
        from nodesmith.adapters.aws.provider import Ec2CloudProvider
        from nodesmith.adapters.aws.queue import InterruptionQueue
        from nodesmith.adapters.kube.cluster import KubeCluster
        from nodesmith.services import interrupt_batch

        drain, send, delete_pod = interrupt_batch._Batch.drain, InterruptionQueue.send, KubeCluster.delete_pod
        save, handed_off = interrupt_batch._Batch.save, interrupt_batch._Batch.handed_off
        replace = interrupt_batch._replace
        counters = self

        def counted_replace(replace_capacity: Any, ready_at: float) -> Any:
            result = replace(replace_capacity, ready_at)
            with counters.lock:
                counters.replacements.append(result)
                if result.ran:
                    counters.replacement_times.append((time.monotonic(), result.seconds))
            return result

        def counted_drain(self: Any, entry: Any, case: Any) -> Any:
            with counters.lock:
                first = entry.item.continuation is None or entry.item.continuation.handoff
                counters.drain_started.setdefault((entry.item.message.event_id, case.instance_id), time.monotonic())
                key = (entry.item.message.event_id, case.instance_id, 0 if first else entry.item.attempt)
                counters.drains[key] += 1
                counters.drain_runs.setdefault(key, []).append((time.monotonic(), getattr(_INVOCATION, "id", None)))
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

        def counted_handed_off(self: Any, cases: Any) -> Any:
            out = handed_off(self, cases)
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

        send_batch = InterruptionQueue.send_batch

        def counted_send_batch(self: Any, messages: Any) -> list[str | None]:
            errors = send_batch(self, messages)
            with counters.lock:
                counters.continuations += sum(1 for e in errors if e is None)
            return errors

        def counted_delete(self: Any, **kwargs: Any) -> None:
            with counters.lock:
                counters.force_deleted += 1
            delete_pod(self, **kwargs)

        terminate = Ec2CloudProvider.terminate

        def noted_terminate(self: Any, *, instance_ids: Any) -> None:
            counters.on_terminate(list(instance_ids))
            terminate(self, instance_ids=instance_ids)

        from botocore.client import BaseClient

        from nodesmith.adapters.kube.calls import KubeRest

        api_call, request = BaseClient._make_api_call, KubeRest.request

        def counted_api_call(self: Any, operation: str, params: Any) -> Any:
            name = f"{self.meta.service_model.service_name}.{operation}"
            item = params.get("Item") or params.get("Key") if isinstance(params, dict) else None
            if isinstance(item, dict) and isinstance(item.get("pk"), dict):  # the state table: which record
                name += f" {str(item['pk'].get('S', '')).split('#', 1)[0]}"
            with counters.lock:
                if counters.count_calls:
                    counters.calls[name] += 1
            return api_call(self, operation, params)

        def counted_request(self: Any, method: str, url_path: str, *args: Any, **kwargs: Any) -> Any:
            with counters.lock:
                resource = _resource(url_path)
                if method != "GET":
                    resource = resource.removesuffix(" (list)")
                if counters.count_calls:
                    counters.calls[f"kube {method} {resource}"] += 1
            return request(self, method, url_path, *args, **kwargs)

        BaseClient._make_api_call = counted_api_call
        KubeRest.request = counted_request  # type: ignore[method-assign]
        Ec2CloudProvider.terminate = noted_terminate  # type: ignore[method-assign]
        interrupt_batch._Batch.drain = counted_drain  # type: ignore[method-assign]
        interrupt_batch._Batch.save = crashing_save  # type: ignore[method-assign]
        interrupt_batch._Batch.handed_off = counted_handed_off  # type: ignore[method-assign]
        InterruptionQueue.send = counted_send  # type: ignore[method-assign]
        InterruptionQueue.send_batch = counted_send_batch  # type: ignore[method-assign]
        KubeCluster.delete_pod = counted_delete  # type: ignore[method-assign]
        interrupt_batch._replace = counted_replace  # its parameter keeps _replace's name


def _resource(url_path: str) -> str:
    """The resource (and subresource) a Kubernetes API path names: ``/api/v1/namespaces/d/pods/p/eviction``
    -> ``pods/eviction``; ``/apis/karpenter.sh/v1/nodeclaims/x`` -> ``nodeclaims``; ``/api/v1/nodes`` ->
    ``nodes (list)``."""
    parts = [p for p in url_path.split("?", maxsplit=1)[0].split("/") if p]
    parts = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if len(parts) >= 2 and parts[0] == "namespaces":
        parts = parts[2:]
    return "/".join(parts[:1] + parts[2:3]) + ("" if len(parts) > 1 else " (list)")


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


class AsyncReconcile:
    """The reconcile function's asynchronous invocations (``InvocationType=Event``): the interruption batches'
    wakes (:mod:`nodesmith.adapters.aws.wake`) queue here and one thread runs them in turn through the real
    reconcile handler, as Lambda runs a function with reserved concurrency 1 (its throttled events wait and
    are retried). Each invocation process has one; the reconcile lease keeps them and the scheduled ticks
    from launching twice."""

    def __init__(self, counters: Counters) -> None:
        import queue

        self.counters = counters
        self.events: queue.Queue[float] = queue.Queue()
        self.thread = threading.Thread(target=self._run, name="reconcile-async", daemon=True)

    def wake(self, after: float) -> None:
        with self.counters.lock:
            self.counters.wakes_sent += 1
        self.events.put(after)
        if not self.thread.is_alive():
            with contextlib.suppress(RuntimeError):  # started by another wake meanwhile
                self.thread.start()

    def _run(self) -> None:
        from nodesmith.adapters.aws.wake import provision_event
        from nodesmith.cli.world import LambdaContext
        from nodesmith.handlers import reconcile
        from nodesmith.handlers.reconcile import handler

        provision_only = reconcile._provision_only

        profile_dir = os.environ.get("BENCH_PROFILE_WAKES")  # a directory: one cProfile dump per woken pass

        def timed() -> Any:  # every pass of a woken invocation: its first, the burst watch's and the reruns
            began = time.monotonic()
            if profile_dir:
                import cProfile

                with cProfile.Profile() as profile:
                    out = provision_only()
                profile.dump_stats(Path(profile_dir) / f"wake-{os.getpid()}-{began:.3f}.prof")
            else:
                out = provision_only()
            with self.counters.lock:
                self.counters.wake_passes.append(
                    (time.monotonic(), time.monotonic() - began, int(out[0].nodeclaims_launched))
                )
            return out

        reconcile._provision_only = timed  # only this thread runs the reconcile handler in an invocation process
        while True:
            after = self.events.get()
            began = time.monotonic()
            try:
                out = handler(
                    provision_event(after), LambdaContext(function_name="nodesmith-reconcile", timeout_seconds=900)
                )
            except Exception as exc:
                with self.counters.lock:
                    self.counters.errors.append(f"reconcile wake: {type(exc).__name__}: {exc}")
                continue
            with self.counters.lock:
                if "status" in out:  # skipped: the lease holder covers it, or was asked for another pass
                    self.counters.wakes_skipped += 1
                else:
                    self.counters.wakes_ended.append(time.monotonic() - began)


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
        self.timed_out = 0
        self.function_timeout = True  # end invocations at FUNCTION_TIMEOUT_SECONDS (install_timeouts)
        self.invocation_ids = iter(range(1, 1 << 62))
        self.visibility_timeout = VISIBILITY_TIMEOUT_SECONDS
        self.batch_size = BATCH_SIZE
        self.lock = threading.Lock()
        self.sqs = world.client("sqs")

    def run(self) -> None:
        from nodesmith.cli.world import LambdaContext
        from nodesmith.handlers.interruption import handler

        arn = "arn:aws:sqs:us-east-1:123456789012:" + self.world.queue_url.rsplit("/", 1)[-1]
        while not self.stop.is_set():
            messages = self._receive(min(10, self.batch_size), wait=1)
            if not messages:
                continue
            window_end = time.monotonic() + BATCHING_WINDOW_SECONDS
            while len(messages) < self.batch_size and time.monotonic() < window_end and not self.stop.is_set():
                more = self._receive(min(10, self.batch_size - len(messages)), wait=1)  # a long poll, not a busy loop
                if not more:
                    break  # the queue is empty for now: invoke with what the window gathered
                messages += more
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
            started = time.monotonic()
            with self.lock:
                invocation = next(self.invocation_ids) * 1000 + os.getpid() % 1000
            timeout = threading.Timer(FUNCTION_TIMEOUT_SECONDS, _TIMED_OUT.add, args=(invocation,))
            timeout.daemon = True
            _INVOCATION.id = invocation
            if self.function_timeout:
                timeout.start()
            try:
                result = handler(
                    {"Records": records},
                    LambdaContext(function_name="nodesmith-interruption", timeout_seconds=FUNCTION_TIMEOUT_SECONDS),
                )
                failed = {f["itemIdentifier"] for f in result.get("batchItemFailures", [])}
                if invocation in _TIMED_OUT:  # it returned, but after Lambda would have ended it
                    raise LambdaKilled(f"invocation {invocation} returned after the function timeout")
            except LambdaKilled:  # nothing is deleted: records come back when the handler's shortened visibility ends
                with self.lock:
                    self.killed += 1
                    self.timed_out += invocation in _TIMED_OUT
                continue
            except Exception as exc:  # the invocation failed as a whole: SQS redelivers every record
                failed = {m["MessageId"] for m in messages}
                with self.counters.lock:
                    self.counters.errors.append(f"{type(exc).__name__}: {exc}")
            finally:
                timeout.cancel()
                _INVOCATION.id = None
            with self.counters.lock:
                self.counters.invocations += 1
                self.counters.invocation_seconds.append(time.monotonic() - started)
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


class _Endpoint:
    """What a :class:`Consumer` needs of the world, in a process of its own: SQS clients on the embedded AWS
    (whose endpoint the inherited environment names) and the queue URL."""

    def __init__(self, queue_url: str) -> None:
        self.queue_url = queue_url

    def client(self, service: str) -> Any:
        import boto3

        return boto3.client(service, region_name=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"))


def run_pollers(
    consumer: Consumer, *, initial: int, per_second: int, most: int, stop: threading.Event
) -> list[threading.Thread]:
    """Lambda's SQS scaling: ``initial`` pollers (concurrent invocations) at once, ``per_second`` more each second
    while any are missing, up to ``most``; returns the threads once ``stop`` is set."""
    workers: list[threading.Thread] = []
    while not stop.is_set():
        if len(workers) < most:
            for _ in range(min(per_second if workers else initial, most - len(workers))):
                w = threading.Thread(target=consumer.run, name=f"esm-{len(workers)}", daemon=True)
                workers.append(w)
                w.start()
        stop.wait(1.0)
    return workers


def summary(counters: Counters, consumer: Consumer) -> dict[str, Any]:
    """What one process counted, as plain data for the parent (see :func:`merge`)."""
    return {
        "drains": list(counters.drains.items()),
        "drain_runs": [[list(k), v] for k, v in counters.drain_runs.items()],
        "ended_at_timeout": sorted(_TIMED_OUT),
        "crashed": sorted(counters.crashed),
        "resumed_from_progress": dict(counters.resumed_from_progress),
        "handed_off": counters.handed_off,
        "continuations": counters.continuations,
        "force_deleted": counters.force_deleted,
        "invocations": counters.invocations,
        "failed_records": counters.failed_records,
        "errors": counters.errors[:20],
        "replacements": [
            {"ran": r.ran, "skipped": r.skipped, "errors": list(r.errors), "nodeclaims_launched": r.nodeclaims_launched}
            for r in counters.replacements
        ],
        "replacement_times": counters.replacement_times,
        "invocation_seconds": counters.invocation_seconds,
        "drain_started": [[list(k), v] for k, v in counters.drain_started.items()],
        "calls": dict(counters.calls),
        "wakes_sent": counters.wakes_sent,
        "wakes_skipped": counters.wakes_skipped,
        "wake_passes": counters.wake_passes,
        "wakes_ended": counters.wakes_ended,
        "killed": consumer.killed,
        "timed_out": consumer.timed_out,
        "duplicated": sorted(consumer.duplicated),
    }


def fresh_runs(runs: list[tuple[float, int | None]], ended_at_timeout: set[int]) -> int:
    """How many of one drain's runs (``(monotonic start, invocation)``, any order) began afresh: the first,
    and any after a run whose invocation returned. A run after one ended at the function timeout resumes it
    (its record came back when the visibility ran out, and it goes on from the drain's stored progress):
    the same drain, not a second."""
    invocations = [inv for _, inv in sorted(runs, key=lambda r: r[0])]
    return sum(1 for i, _ in enumerate(invocations) if i == 0 or invocations[i - 1] not in ended_at_timeout)


def merge(counters: Counters, part: dict[str, Any]) -> tuple[int, set[str]]:
    """Add one process's :func:`summary` into ``counters``; returns (invocations killed, events duplicated)."""
    from types import SimpleNamespace

    with counters.lock:
        counters.drains.update({tuple(k): v for k, v in part["drains"]})
        for k, runs in part["drain_runs"]:
            counters.drain_runs.setdefault(tuple(k), []).extend((at, inv) for at, inv in runs)
        counters.ended_at_timeout |= set(part["ended_at_timeout"])
        counters.crashed |= set(part["crashed"])
        counters.resumed_from_progress.update(part["resumed_from_progress"])
        counters.handed_off += part["handed_off"]
        counters.continuations += part["continuations"]
        counters.force_deleted += part["force_deleted"]
        counters.invocations += part["invocations"]
        counters.timed_out += part["timed_out"]
        counters.wakes_sent += part["wakes_sent"]
        counters.calls.update(part["calls"])
        counters.wakes_skipped += part["wakes_skipped"]
        counters.wake_passes += [tuple(p) for p in part["wake_passes"]]
        counters.wakes_ended += part["wakes_ended"]
        counters.failed_records += part["failed_records"]
        counters.errors += part["errors"]
        counters.replacements += [SimpleNamespace(**r) for r in part["replacements"]]
        counters.replacement_times += [tuple(t) for t in part["replacement_times"]]
        counters.invocation_seconds += part["invocation_seconds"]
        for key, at in part["drain_started"]:
            k = (key[0], key[1])
            counters.drain_started[k] = min(at, counters.drain_started.get(k, at))
    return part["killed"], set(part["duplicated"])


def invocations_process(spec: dict[str, Any], channels: tuple[Any, Any, Any, Any, Any]) -> None:
    """One process of concurrent "Lambda invocations" (``multiprocessing`` target): warm up like a warm
    container, wait for ``go``, poll and invoke until ``stop``, then put :func:`summary` on ``results``.
    Instance ids the handlers terminate go on ``terminated`` for the world's simulated kubelet; ``channels`` is
    (go, stop, results, terminated, ready): two events and three queues; the pid goes on ``ready`` once warm."""
    go, stop, results, terminated, ready = channels
    from pathlib import Path

    log = os.environ.get("BENCH_INVOCATION_LOG") or os.devnull  # the handlers' log lines, when asked for
    with Path(log).open("a") as sink, contextlib.redirect_stdout(sink):
        counters = Counters()
        counters.crash_targets = set(spec["crash_targets"])
        counters.on_terminate = terminated.put
        counters.count_calls = True
        counters.install()
        if spec["function_timeout"]:
            install_timeouts()
        _warm_up()
        if spec["reconcile_wake"]:  # poll mode: a batch finding the lease free wakes the reconcile function
            from nodesmith.handlers import wiring

            wiring.set_ports(waker=AsyncReconcile(counters).wake)
        local_stop = threading.Event()
        consumer = Consumer(
            world=_Endpoint(spec["queue_url"]),
            counters=counters,
            duplicate_every=spec["duplicate_every"],
            stop=local_stop,
        )
        consumer.visibility_timeout = spec["visibility_timeout"]
        consumer.batch_size = spec["batch_size"]
        consumer.function_timeout = spec["function_timeout"]
        ready.put(os.getpid())
        go.wait()
        with counters.lock:
            counters.calls.clear()  # the warm-up's calls are not the burst's

        def relay_stop() -> None:
            stop.wait()
            local_stop.set()

        threading.Thread(target=relay_stop, daemon=True).start()
        workers = run_pollers(
            consumer, initial=spec["initial"], per_second=spec["per_second"], most=spec["most"], stop=local_stop
        )
        for w in workers:
            w.join(timeout=60)
        results.put(summary(counters, consumer))
