"""Lambda as the embedded default runs our handlers: the context object, the SQS event source mapping, and the
function timeout.

:class:`SqsEventSource` does what Lambda's SQS event source mapping does (AWS Lambda developer guide, "Using
Lambda with Amazon SQS"): long-polls the queue, fills a batch for up to the batching window, invokes the
handler with the SQS event (records with ``eventSourceARN``, ``SentTimestamp`` and
``ApproximateReceiveCount``), and deletes the records the handler did not report in ``batchItemFailures``
(``ReportBatchItemFailures``); a handler that raises leaves every record of its batch for SQS to deliver
again. :meth:`SqsEventSource.drain` does it in the calling thread until the queue is empty (the demo, tests);
:meth:`SqsEventSource.run` runs pollers in threads the way Lambda scales them ("Configuring scaling behavior
for SQS event source mappings"): pollers long-poll the queue (20 s) until it becomes active; when messages are
available, 5 concurrent invocations, then 5 more each second while messages are still available (300 a minute),
up to ``MaximumConcurrency``; when a long poll finds nothing, it scales back towards 5.

Every invocation ends at the function timeout as Lambda ends it, and can be crashed or made to run into its
timeout (:mod:`nodesmith.sim.invocation_ends`, whose :func:`install_function_timeouts`, :func:`kill_invocation`,
:func:`inject_crashes` and :class:`Crashes` this module also exports): none of the records of an invocation so
ended is deleted.

:class:`AsyncInvocations` runs a function's asynchronous invocations (``InvocationType=Event``) one at a time,
as Lambda does for a function with reserved concurrency 1 whose throttled events wait and are retried until
their maximum event age ("Asynchronous invocation", "Reserved concurrency" in the developer guide);
:func:`route_async_invokes` makes a boto3 Lambda client's ``Invoke(InvocationType=Event)`` of that function
answer 202 and queue the event for it, so the caller's code path is the one it has in AWS.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from nodesmith.sim.invocation_ends import (
    Crashes,
    LambdaKilled,
    ended_by,
    inject_crashes,
    install_function_timeouts,
    invocation,
    kill_invocation,
    returned,
)

__all__ = [
    "AsyncInvocations",
    "Crashes",
    "EventSourceOptions",
    "LambdaContext",
    "LambdaKilled",
    "Scaling",
    "SqsEventSource",
    "Stats",
    "inject_crashes",
    "install_function_timeouts",
    "kill_invocation",
    "route_async_invokes",
]

LOG = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]


@dataclass
class LambdaContext:
    """The parts of the Lambda context object our handlers read; ``timeout_seconds`` is the function timeout."""

    function_name: str
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    memory_limit_in_mb: int = 1024
    timeout_seconds: float = 300.0
    region: str = "us-east-1"
    account: str = "123456789012"  # moto's default account
    _deadline: float = 0.0

    def __post_init__(self) -> None:
        self._deadline = time.monotonic() + self.timeout_seconds

    @property
    def invoked_function_arn(self) -> str:
        """The function's ARN, as Lambda gives it."""
        return f"arn:aws:lambda:{self.region}:{self.account}:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        """Milliseconds left before this invocation's timeout."""
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def _count_end(invocation_id: int, stats: Stats) -> None:
    """Count an invocation ended by :class:`LambdaKilled` in ``stats``: killed, its timeout injected, or too slow."""
    how = ended_by(invocation_id)
    if how == "killed":
        stats.killed += 1
    elif how == "timeout_injected":
        stats.timeouts_injected += 1
    else:
        stats.timed_out += 1


@dataclass(frozen=True, slots=True)
class Scaling:
    """Lambda's SQS scaling: ``initial`` concurrent invocations, ``per_second`` more each second while messages
    are available, at most ``most`` (the event source's ``MaximumConcurrency``); every poller long-polls for
    ``long_poll_seconds`` (SQS's longest wait, which Lambda uses)."""

    initial: int = 5
    per_second: int = 5
    most: int = 25
    long_poll_seconds: int = 20


ERRORS_KEPT = 5
"""How many error messages :meth:`Stats.add` keeps."""


@dataclass(slots=True)
class Stats:
    """What an event source did: invocations, records handed over, records reported failed, invocations that
    raised, those ended at the function timeout, those ended by :func:`kill_invocation`, messages it sent
    again (``duplicate_every``), events dropped at their maximum age (:class:`AsyncInvocations`), and the
    invocations a :class:`Crashes` fault made run into their timeout (``timeouts_injected``, not in ``timed_out``)."""

    invocations: int = 0
    records: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    timed_out: int = 0
    killed: int = 0
    duplicated: int = 0
    dropped: int = 0
    timeouts_injected: int = 0

    def add(self, other: Stats) -> None:
        """Add ``other``'s counts to these, and its errors after these (the first :data:`ERRORS_KEPT` in all): the
        stats of one function whose pollers ran in several processes, as Lambda's metrics sum an event source's
        concurrent invocations."""
        for name in (f.name for f in fields(self) if f.name != "errors"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.errors = (self.errors + other.errors)[:ERRORS_KEPT]


class SqsEventSource:
    """Lambda's SQS event source mapping for ``handler`` on ``queue_url`` (see the module docstring).

    ``sqs`` is a boto3 SQS client (thread-safe); ``function_name`` names the invocations' context; ``options``
    (:class:`EventSourceOptions`) are the mapping's settings. What it did is in :attr:`stats`.
    """

    def __init__(
        self,
        *,
        sqs: Any,
        queue_url: str,
        handler: Handler,
        function_name: str,
        options: EventSourceOptions | None = None,
    ) -> None:
        self.sqs, self.queue_url, self.handler, self.function_name = sqs, queue_url, handler, function_name
        self.options = options or EventSourceOptions()
        self.queue_arn = str(
            sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        )
        self.stats = Stats()
        self._lock = threading.Lock()
        self._seen = 0

    def _receive(self, count: int, wait: int) -> list[dict[str, Any]]:
        kwargs: dict[str, Any] = {"QueueUrl": self.queue_url, "MaxNumberOfMessages": count, "WaitTimeSeconds": wait,
                                  "MessageSystemAttributeNames": ["All"]}  # fmt: skip
        if self.options.visibility_timeout is not None:
            kwargs["VisibilityTimeout"] = self.options.visibility_timeout
        return list(self.sqs.receive_message(**kwargs).get("Messages", []))

    def _batch(self, wait: int) -> list[dict[str, Any]]:
        """One batch: a long poll, then more receives until the batch is full or the batching window ends."""
        size = self.options.batch_size
        messages = self._receive(min(10, size), wait)
        window_end = time.monotonic() + self.options.batching_window
        while messages and len(messages) < size and time.monotonic() < window_end:
            more = self._receive(min(10, size - len(messages)), 0)
            if not more:
                break
            messages += more
        return messages

    def _duplicate(self, messages: list[dict[str, Any]]) -> None:
        every = self.options.duplicate_every
        if not every or self.queue_url.endswith(".fifo"):  # FIFO queues deliver each message once
            return
        for m in messages:
            with self._lock:
                self._seen += 1
                due = self._seen % every == 0
            if due and int(m.get("Attributes", {}).get("ApproximateReceiveCount", "1")) == 1:
                self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=m["Body"])
                with self._lock:
                    self.stats.duplicated += 1

    def _record(self, m: dict[str, Any]) -> dict[str, Any]:
        region = self.queue_arn.split(":")[3]
        return {
            "messageId": m["MessageId"],
            "receiptHandle": m["ReceiptHandle"],
            "body": m["Body"],
            "attributes": dict(m.get("Attributes", {})),
            "messageAttributes": {},
            "md5OfBody": m.get("MD5OfBody", ""),
            "eventSource": "aws:sqs",
            "eventSourceARN": self.queue_arn,
            "awsRegion": region,
        }

    def poll_once(self, *, wait: int = 1, received: threading.Event | None = None) -> int:
        """Receive one batch, invoke the handler with it and delete its successes; returns how many records.
        ``received`` is set as soon as the receive returns messages."""
        messages = self._batch(wait)
        if not messages:
            return 0
        if received is not None:
            received.set()
        self._duplicate(messages)
        self.invoke([self._record(m) for m in messages])
        return len(messages)

    def invoke(self, records: list[dict[str, Any]]) -> set[str]:
        """Invoke the handler with ``records`` as Lambda would; delete those not reported failed. Returns the ids
        of the records left for SQS (reported failed, or all of them when the invocation raised or timed out)."""
        started = time.monotonic()
        context = LambdaContext(function_name=self.function_name, timeout_seconds=self.options.function_timeout)
        outcome: dict[str, Any] | BaseException
        with invocation(self.options.function_timeout) as invocation_id:
            try:
                outcome = self.handler({"Records": records}, context)
                if not returned(invocation_id):
                    raise LambdaKilled(f"invocation {invocation_id} ended before its answer reached Lambda")
                failed = {f["itemIdentifier"] for f in outcome.get("batchItemFailures", [])}
            except LambdaKilled as exc:
                outcome, failed = exc, {r["messageId"] for r in records}
                with self._lock:
                    _count_end(invocation_id, self.stats)
            except Exception as exc:  # the invocation failed as a whole: SQS delivers every record again
                LOG.warning("%s invocation failed: %s", self.function_name, exc)
                outcome, failed = exc, {r["messageId"] for r in records}
                with self._lock:
                    self.stats.errors.append(f"{type(exc).__name__}: {exc}")
        done = [r for r in records if r["messageId"] not in failed]
        if done:
            self.sqs.delete_message_batch(
                QueueUrl=self.queue_url,
                Entries=[{"Id": str(n), "ReceiptHandle": r["receiptHandle"]} for n, r in enumerate(done)],
            )
        with self._lock:
            self.stats.invocations += 1
            self.stats.records += len(records)
            self.stats.failed += len(failed)
        if self.options.on_invoke is not None:
            self.options.on_invoke(records, outcome, started, time.monotonic())
        return failed

    def drain(self, *, wait: int = 1, max_batches: int = 1000) -> int:
        """Poll in this thread until a receive finds the queue empty (or ``max_batches``); returns the records."""
        handled = 0
        for _ in range(max_batches):
            got = self.poll_once(wait=wait)
            if not got:
                break
            handled += got
        return handled

    def run(self, stop: threading.Event, *, scaling: Scaling | None = None, share: tuple[int, int] = (0, 1)) -> None:
        """Poll with Lambda's scaling until ``stop`` is set (blocks; start it in a thread). ``share`` = (k, n): this
        process is the k-th of n running pollers of one mapping, and runs pollers k, k + n, ... of it. A poller
        busy in a long poll when ``stop`` is set ends when that poll does."""
        scaling = scaling or Scaling()
        k, n = share
        lock, active, workers = threading.Lock(), threading.Event(), list[threading.Thread]()
        state = {"wanted": scaling.initial, "running": 0}

        def mine(total: int) -> int:
            return len(range(k, min(total, scaling.most), n))

        def poll() -> None:
            try:
                while not stop.is_set():
                    if self.poll_once(wait=scaling.long_poll_seconds, received=active):
                        continue
                    with lock:  # the queue is quiet: scale back towards the initial pollers
                        if state["running"] > mine(scaling.initial):
                            state["wanted"] = max(scaling.initial, state["wanted"] - n)
                            return
            finally:
                with lock:
                    state["running"] -= 1

        while not stop.is_set():
            with lock:
                start = mine(state["wanted"]) - state["running"]
                state["running"] += max(0, start)
            for _ in range(start):
                worker = threading.Thread(target=poll, name=f"{self.function_name}-{len(workers)}", daemon=True)
                workers.append(worker)
                worker.start()
            stop.wait(1.0)
            if active.is_set():  # messages were available this second: 5 more concurrent invocations
                active.clear()
                with lock:
                    state["wanted"] = min(scaling.most, state["wanted"] + scaling.per_second)
        for worker in workers:
            worker.join(timeout=self.options.function_timeout + scaling.long_poll_seconds + 5)


@dataclass(frozen=True, slots=True)
class EventSourceOptions:
    """An SQS event source mapping's settings: ``batch_size`` and ``batching_window`` (seconds) are the mapping's;
    ``visibility_timeout`` (seconds) is what a receive sets (the queue's own when None); ``function_timeout``
    (seconds) is the function's: with :func:`install_function_timeouts` installed, an invocation past it is
    ended. ``duplicate_every`` n > 0 sends every n-th first-delivered message's body again (a standard queue
    delivers at least once; a FIFO queue exactly once, so none there). ``on_invoke(records, result_or_error,
    started, ended)`` (monotonic seconds) hears of each invocation.
    """

    batch_size: int = 10
    batching_window: float = 1.0
    visibility_timeout: int | None = None
    function_timeout: float = 30.0
    duplicate_every: int = 0
    on_invoke: Callable[[list[dict[str, Any]], Any, float, float], None] | None = None


class AsyncInvocations:
    """A function's asynchronous invocations under reserved concurrency 1 (see the module docstring).

    ``events`` holds ``(epoch seconds queued, event)`` pairs: a ``queue.Queue`` by default, or any object with
    ``put`` and ``get(timeout=...)`` raising ``queue.Empty`` (a ``multiprocessing`` queue, so that callers in other
    processes can queue events with :func:`route_async_invokes`). :meth:`serve` invokes ``handler`` with one event
    after another, each with a :class:`LambdaContext` of ``timeout_seconds`` (ended at it when
    :func:`install_function_timeouts` is installed); an event that waited longer than ``max_event_age`` seconds
    (the function's ``MaximumEventAgeInSeconds``) is dropped, as Lambda drops it. ``on_invoke(event,
    result_or_error, started, ended)`` (monotonic seconds) hears of each invocation; :attr:`stats` counts them.
    """

    def __init__(
        self,
        *,
        handler: Callable[[dict[str, Any], Any], Any],
        function_name: str,
        events: Any | None = None,
        timeout_seconds: float = 900.0,
        max_event_age: float = 21600.0,
        on_invoke: Callable[[dict[str, Any], Any, float, float], None] | None = None,
    ) -> None:
        self.handler, self.function_name = handler, function_name
        self.events: Any = events if events is not None else queue.Queue()
        self.timeout_seconds, self.max_event_age, self.on_invoke = timeout_seconds, max_event_age, on_invoke
        self.stats = Stats()

    def invoke(self, event: dict[str, Any]) -> None:
        """Queue ``event`` (``InvocationType=Event``: Lambda holds it and answers at once)."""
        self.events.put((time.time(), event))

    def run_next(self, *, wait: float = 0.5) -> bool:
        """Run (or drop) the next queued event, waiting up to ``wait`` seconds for one; False when none came."""
        try:
            queued_at, event = self.events.get(timeout=wait)
        except queue.Empty:
            return False
        if time.time() - queued_at > self.max_event_age:
            self.stats.dropped += 1
            return True
        started = time.monotonic()
        outcome: Any
        with invocation(self.timeout_seconds) as invocation_id:
            try:
                outcome = self.handler(event, LambdaContext(self.function_name, timeout_seconds=self.timeout_seconds))
                if not returned(invocation_id):
                    raise LambdaKilled(f"invocation {invocation_id} ended before its answer reached Lambda")
            except LambdaKilled as exc:
                outcome = exc
                _count_end(invocation_id, self.stats)
            except Exception as exc:  # not retried (MaximumRetryAttempts 0): the event is done
                outcome = exc
                self.stats.errors.append(f"{type(exc).__name__}: {exc}")
        self.stats.invocations += 1
        if self.on_invoke is not None:
            self.on_invoke(event, outcome, started, time.monotonic())
        return True

    def serve(self, stop: Any) -> None:
        """Run the queued events one after another until ``stop`` (an event object with ``is_set``) is set."""
        while not stop.is_set():
            self.run_next()


class _Accepted:
    """The HTTP response Lambda gives an asynchronous Invoke it queued."""

    status_code = 202
    headers: dict[str, str] = {}
    content = b""


def route_async_invokes(client: Any, *, function_name: str, events: Any) -> None:
    """Answer ``client``'s (a boto3 Lambda client) ``Invoke`` of ``function_name`` with ``InvocationType=Event``
    as Lambda does, 202 with the event held, and put ``(epoch seconds, event)`` on ``events`` (an
    :class:`AsyncInvocations`' queue) instead of sending the request. Other calls go out unchanged."""

    def answer(params: dict[str, Any], **_: Any) -> tuple[_Accepted, dict[str, Any]] | None:
        headers = params.get("headers") or {}
        if headers.get("X-Amz-Invocation-Type") != "Event" or f"/functions/{function_name}/" not in str(
            params.get("url_path", "")
        ):
            return None
        body = params.get("body") or b"{}"
        events.put((time.time(), json.loads(body.decode() if isinstance(body, bytes) else body)))
        return _Accepted(), {"StatusCode": 202, "ResponseMetadata": {"HTTPStatusCode": 202}}

    client.meta.events.register("before-call.lambda.Invoke", answer)
