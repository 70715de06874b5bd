"""The Lambda side of ``bench/interruptions.py``: the SQS event source mapping (:class:`Consumer`) invoking
the real interruption handler, the reconcile function's asynchronous invocations (:class:`AsyncReconcile`),
and :func:`invocations_process`, which runs them in a process of its own, as real invocations run on their
own CPUs apart from the cluster and AWS. The counters and crash injection wrapped around the real code are
:mod:`interruptions_counters`; the function timeout, :mod:`interruptions_timeouts`."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from infra.config import NodesmithConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lambdas"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from interruptions_counters import Counters, summary
from interruptions_timeouts import _INVOCATION, _TIMED_OUT, LambdaKilled, install_timeouts

from nodesmith.services.interrupt_items import CONTINUATION_KEY

BATCH_SIZE = NodesmithConfig.interruption_batch_size
"""The stack's event source mapping ``BatchSize`` (``--batch-size``): messages per invocation at most."""
INVOCATION_PROCESSES = 4
"""Processes the concurrent invocations run in (``--processes``): at the stack's 25 at once, about 6 invocations
share a process's GIL, Kubernetes client and caches, where each real invocation has its own. At 8810ce2, three
1,000-node runs with 4 processes, each in turn with one with 2 on this machine (stop 29), cordoned every node in
9.2, 13.6 and 6.5 s, against 14.7, 13.9 and 8.2 s with 2; before the pollers were shared exactly, four more pairs
also all went to 4 (7.1-10.5 s against 7.9-13.2 s). 8 processes took 9.1 and 13.5 s. The cores are the same 2
whatever the count."""
ESM_INITIAL_POLLERS = 5
ESM_POLLERS_PER_SECOND = 5
"""Lambda's SQS scaling: "starts processing five batches at a time with five concurrent invocations", then
"up to 300 more instances per minute" (https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html)."""
BATCHING_WINDOW_SECONDS = 1.0
"""The stack's ``MaximumBatchingWindowInSeconds``: the event source mapping fills a batch for up to this long."""
MAX_CONCURRENCY = NodesmithConfig.interruption_max_concurrency
"""The stack's event source ``MaximumConcurrency`` (``--concurrency``): invocations at once, at most."""
FUNCTION_TIMEOUT_SECONDS = NodesmithConfig.interruption_timeout_seconds
"""The interruption function's timeout in the stack (seconds, its default), given to each invocation's context."""
TICK_MAX_AGE_SECONDS = 60.0
"""The reconcile function's asynchronous ``max_event_age`` in the stack (``infra/constructs/reconcile.py``):
a scheduled tick throttled by its reserved concurrency (1) while a woken invocation runs is retried by
Lambda for this long, then dropped."""
TICK = "tick"
"""The first item of a scheduled tick put on the reconcile function's queue: ``(TICK, monotonic time sent)``."""
VISIBILITY_TIMEOUT_SECONDS = 6 * FUNCTION_TIMEOUT_SECONDS + int(BATCHING_WINDOW_SECONDS)
"""How long a received message stays invisible (the stack's 6 x the function timeout + the batching
window; ``--visibility-timeout``): the receive's visibility, which the handler shortens on start to its
remaining time + 5 s, so a killed invocation's records come back after ~25 s."""


def _warm_up() -> None:
    """What a warm Lambda container already has: handlers imported, clients built, the instance-type
    catalogue cached (5 minutes, like Karpenter's), that warm heap frozen out of full garbage collections. Cold
    starts are not what this bench measures."""
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
    # what the container's first invocation did (wiring.freeze_warm_heap, which acts only in Lambda): full garbage
    # collections skip the warm heap
    gc.freeze()


def _last_scheduled_pass() -> None:
    """The schedule's last pass in the reconcile function's warm container (``rate(1 minute)`` keeps it warm):
    one pass of the real handler before the clock starts, so, as in that container, garbage collection (the
    fleet's DescribeInstances) ran under 2 minutes ago and a burst's first woken pass need not run it again."""
    from nodesmith.handlers.reconcile import handler

    handler({}, _reconcile_context())


def _reconcile_context() -> Any:
    """The Lambda context of one reconcile invocation (the stack's 900 s timeout)."""
    from nodesmith.cli.world import LambdaContext

    return LambdaContext(function_name="nodesmith-reconcile", timeout_seconds=900)


class AsyncReconcile:
    """The reconcile function's asynchronous invocations (``InvocationType=Event``): the interruption batches'
    wakes (:mod:`nodesmith.adapters.aws.wake`) and the EventBridge schedule's ticks (``(TICK, sent)``) arrive on
    ``events`` (a queue shared by every invocation process and the bench's schedule) and :meth:`serve` runs them
    in turn through the real reconcile handler, as Lambda runs a function with reserved concurrency 1 (its
    throttled events wait and are retried; a tick older than :data:`TICK_MAX_AGE_SECONDS` is dropped). It runs
    in a process of its own (:func:`reconcile_process`), as the reconcile function has its own CPU: a thread
    among an invocation process's fifty would wait for that process's GIL behind every interruption batch's
    I/O threads. A tick used to run in the bench's own process, beside the woken invocation (which reserved
    concurrency 1 does not allow) and on the Kubernetes API emulator's GIL. A tick's calls are not counted in
    ``api_calls`` (they are not the interruption path's); a pass it runs again on a batch's request is counted
    with the woken passes (``wake_passes``), as both go through the handler's ``_provision_only``."""

    def __init__(self, counters: Counters, events: Any) -> None:
        self.counters = counters
        self.events = events

    def serve(self, stop: threading.Event) -> None:
        """Run the queued wakes and ticks one after another until ``stop`` is set."""
        import queue

        from nodesmith.adapters.aws.wake import provision_event
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

        reconcile._provision_only = timed  # only this thread runs the reconcile handler in its process
        while not stop.is_set():
            try:
                after = self.events.get(timeout=0.5)
            except queue.Empty:
                continue
            if isinstance(after, tuple) and after[0] == TICK:
                self._tick(handler, after[1])
                continue
            began = time.monotonic()
            try:
                out = handler(provision_event(after), _reconcile_context())
            except Exception as exc:
                with self.counters.lock:
                    self.counters.errors.append(f"reconcile wake: {type(exc).__name__}: {exc}")
                continue
            with self.counters.lock:
                if "status" in out:  # skipped: the lease holder covers it, or was asked for another pass
                    self.counters.wakes_skipped += 1
                else:
                    self.counters.wakes_ended.append(time.monotonic() - began)

    def _tick(self, handler: Any, sent: float) -> None:
        """One scheduled tick (sent at ``sent``, monotonic): dropped when it waited past the event age, else
        a pass of the real handler, its calls left out of the counts; recorded in ``counters.ticks``."""
        began = time.monotonic()
        if began - sent > TICK_MAX_AGE_SECONDS:
            status = f"dropped: throttled for {began - sent:.0f} s"
        else:
            self.counters.count_calls = False
            try:
                out = handler({}, _reconcile_context())
                status = str(out.get("status") or "ran")
            except Exception as exc:
                status = f"failed: {type(exc).__name__}: {exc}"
            finally:
                self.counters.count_calls = True
        with self.counters.lock:
            self.counters.ticks.append((sent, began, time.monotonic() - began, status[:200]))


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
                    "attributes": {"SentTimestamp": str(int(time.time() * 1000)), **m.get("Attributes", {})},
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
            with self.counters.lock:
                self.counters.invocation_started[invocation] = started
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
                self.counters.batch_spans.append((batch_kind(messages), started, time.monotonic()))
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
                MessageSystemAttributeNames=["ApproximateReceiveCount"],  # as the event source mapping passes it
            ).get("Messages", [])
        )

    def _duplicate(self, messages: list[dict[str, Any]]) -> None:
        """At-least-once delivery: send every n-th original event's body again, unchanged."""
        if not self.duplicate_every:
            return
        for m in messages:
            body = json.loads(m["Body"])
            if CONTINUATION_KEY in body:
                continue
            with self.lock:
                self.seen += 1
                due = self.seen % self.duplicate_every == 0 and body["id"] not in self.duplicated
                if due:
                    self.duplicated.add(body["id"])
            if due:
                self.sqs.send_message(QueueUrl=self.world.queue_url, MessageBody=m["Body"])


def batch_kind(messages: list[dict[str, Any]]) -> str:
    """``warnings`` when every message of the batch is an original (an EventBridge event), ``continuations`` when
    every one is a continuation (a drain handed off or continued), else ``mixed``."""
    continuations = sum(1 for m in messages if CONTINUATION_KEY in json.loads(m["Body"]))
    if continuations == 0:
        return "warnings"
    return "continuations" if continuations == len(messages) else "mixed"


class _Endpoint:
    """What a :class:`Consumer` needs of the world, in a process of its own: SQS clients on the embedded AWS
    (whose endpoint the inherited environment names) and the queue URL."""

    def __init__(self, queue_url: str) -> None:
        self.queue_url = queue_url

    def client(self, service: str) -> Any:
        import boto3

        return boto3.client(service, region_name=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"))


def run_pollers(
    consumer: Consumer,
    *,
    initial: int,
    per_second: int,
    most: int,
    stop: threading.Event,
    share: tuple[int, int] = (0, 1),
) -> list[threading.Thread]:
    """Lambda's SQS scaling: ``initial`` pollers (concurrent invocations) at once, ``per_second`` more each second,
    up to ``most``, over all the invocation processes; ``share`` = (k, n): this process, the k-th of n, starts the
    pollers whose number is k modulo n, so the n processes together scale as one event source mapping. Returns the
    threads once ``stop`` is set."""
    k, n = share
    workers: list[threading.Thread] = []
    wanted = initial
    while not stop.is_set():
        mine = len(range(k, min(wanted, most), n))  # pollers k, k + n, ... below the event source's count
        while len(workers) < mine:
            w = threading.Thread(target=consumer.run, name=f"esm-{len(workers)}", daemon=True)
            workers.append(w)
            w.start()
        wanted += per_second
        stop.wait(1.0)
    return workers


def invocations_process(spec: dict[str, Any], channels: tuple[Any, Any, Any, Any, Any, Any]) -> None:
    """One process of concurrent "Lambda invocations" (``multiprocessing`` target): warm up like a warm
    container, wait for ``go``, poll and invoke until ``stop``, then put :func:`summary` on ``results``.
    Instance ids the handlers terminate go on ``terminated`` for the world's simulated kubelet; ``channels`` is
    (go, stop, results, terminated, ready, wakes): two events and four queues; the pid goes on ``ready`` once warm;
    a batch's wake of the reconcile function goes on ``wakes`` (:func:`reconcile_process` runs it)."""
    go, stop, results, terminated, ready, wakes = channels

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

            def wake(after: float) -> None:  # the asynchronous Invoke: queued for the reconcile function's process
                with counters.lock:
                    counters.wakes_sent += 1
                wakes.put(after)

            wiring.set_ports(waker=wake)
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
        counters.forget_warm_up()

        def relay_stop() -> None:
            stop.wait()
            local_stop.set()

        threading.Thread(target=relay_stop, daemon=True).start()
        workers = run_pollers(
            consumer,
            initial=spec["initial"],
            per_second=spec["per_second"],
            most=spec["most"],
            stop=local_stop,
            share=spec["share"],
        )
        for w in workers:
            w.join(timeout=60)
        results.put(summary(counters, consumer))


def reconcile_process(spec: dict[str, Any], channels: tuple[Any, Any, Any, Any, Any, Any]) -> None:
    """The reconcile function (``multiprocessing`` target): warm up like a warm container, wait for ``go``, run
    the wakes the invocation processes and the ticks the schedule put on ``wakes`` (:class:`AsyncReconcile`) until
    ``stop``, then put
    :func:`summary` on ``results``. ``channels`` are :func:`invocations_process`'s."""
    go, stop, results, terminated, ready, wakes = channels
    log = os.environ.get("BENCH_INVOCATION_LOG") or os.devnull
    with Path(log).open("a") as sink, contextlib.redirect_stdout(sink):
        counters = Counters()
        counters.on_terminate = terminated.put
        counters.count_calls = True
        counters.install()
        _warm_up()
        _last_scheduled_pass()
        ready.put(os.getpid())
        go.wait()
        counters.forget_warm_up()
        local_stop = threading.Event()
        server = threading.Thread(target=AsyncReconcile(counters, wakes).serve, args=(local_stop,), daemon=True)
        server.start()
        stop.wait()
        local_stop.set()
        server.join(timeout=5)  # a woken invocation still watching is cut off, as at the run's end before
        with counters.lock:
            results.put(summary(counters, None))
