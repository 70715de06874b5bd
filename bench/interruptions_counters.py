"""What ``bench/interruptions.py`` counts on the Lambda side: :class:`Counters` wraps the real handler code
(drains run, continuations, direct pod deletes, every AWS and Kubernetes call) and injects the crashes;
:func:`summary` and :func:`merge` carry one invocation process's counts to the parent."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from interruptions_timeouts import _INVOCATION, _TIMED_OUT, CUT_OFF_IN, LambdaKilled

if TYPE_CHECKING:
    from interruptions_lambda import Consumer

SLOW_CALL_SECONDS = 2.0
"""An AWS or Kubernetes call of the handlers this long or longer is listed in the report (``slow_calls``)."""


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
        self.deferred = 0  # continuations sent back to the queue, their drains not begun by half the budget
        self.continuations = 0
        self.force_deleted = 0
        self.force_deleted_apps: Counter[str] = Counter()  # app label -> pods force-deleted for the deadline
        self.invocations = 0
        self.timed_out = 0  # invocations Lambda would have ended at the function timeout (their records come back)
        self.failed_records = 0
        self.wakes_sent = 0  # the interruption batches' asynchronous invokes of the reconcile function
        self.wakes_skipped = 0
        self.wake_passes: list[tuple[float, float, int]] = []  # (monotonic end, seconds, NodeClaims launched)
        self.ended_at_timeout: set[int] = set()  # invocations (all processes) ended at the function timeout
        self.cut_off_in: Counter[str] = Counter()  # where they were then (interruptions_timeouts.CUT_OFF_IN)
        self.wakes_ended: list[float] = []  # seconds each woken invocation that took the lease ran
        self.ticks: list[tuple[float, float, float, str]] = []  # scheduled ticks: (sent, began, seconds, status)
        self.errors: list[str] = []
        self.replacements: list[Any] = []
        self.replacement_times: list[tuple[float, float]] = []  # (monotonic end, seconds) per pass that ran
        self.drain_started: dict[tuple[str, str], float] = {}  # (event, instance) -> monotonic first drain start
        self.invocation_started: dict[int, float] = {}  # invocation -> monotonic start
        self.batch_spans: list[tuple[str, float, float]] = []
        """(kind, monotonic start, monotonic end) of each invocation that returned: ``warnings`` (original messages
        only), ``continuations`` (only continuations: drains) or ``mixed``; :meth:`invocation_seconds` their lengths."""
        self.drain_offsets: list[float] = []  # seconds from its invocation's start to each drain's start
        self.calls: Counter[str] = Counter()  # "sqs.ReceiveMessage", "kube GET nodes", ...: what the handlers called
        self.batch_written = 0  # items the handlers' BatchWriteItem calls carried
        self.call_retries: Counter[str] = Counter()  # botocore's RetryAttempts of the calls that answered, by call
        self.slow_calls: list[tuple[float, float, str, int | None]] = []
        """(monotonic start, seconds, call, invocation) of each call that took :data:`SLOW_CALL_SECONDS` or more."""
        self.count_calls = False  # only the invocation processes count (not the world's set-up and reclaims)
        self.on_terminate: Any = lambda ids: None
        """Told the instance ids the handlers terminate (the world's kubelet must not see them again)."""

    def install(self) -> None:
        from nodesmith.adapters.aws.provider import Ec2CloudProvider
        from nodesmith.adapters.aws.queue import InterruptionQueue
        from nodesmith.adapters.kube.cluster import KubeCluster
        from nodesmith.services import interrupt_batch, interrupt_batch_run, interrupt_drains

        drain, send, delete_pod = interrupt_batch_run.BatchRun.drain, InterruptionQueue.send, KubeCluster.delete_pod
        drain_once = interrupt_batch_run.BatchRun.drain_once
        save, handed_off = interrupt_batch_run.BatchRun.save, interrupt_batch_run.BatchRun.handed_off
        replace = interrupt_batch._replace
        counters = self
        crash_marks = CrashMarks()

        def counted_replace(replace_capacity: Any, ready_at: float) -> Any:
            result = replace(replace_capacity, ready_at)
            with counters.lock:
                counters.replacements.append(result)
                if result.ran:
                    counters.replacement_times.append((time.monotonic(), result.seconds))
            return result

        def counted_drain(self: Any, entry: Any, case: Any) -> Any:
            with counters.lock:
                counters.drain_started.setdefault((entry.item.message.event_id, case.instance_id), time.monotonic())
                key = (entry.item.message.event_id, case.instance_id, entry.item.drain_attempt)
                counters.drains[key] += 1
                counters.drain_runs.setdefault(key, []).append((time.monotonic(), getattr(_INVOCATION, "id", None)))
            # The killed run's records come back to whichever process receives them: the kill is marked in
            # the state table (crash_marks), so every process sees it (counting only resumes in the killing
            # process reported 6-8 of 10, and each process killed a target once more).
            if case.instance_id in counters.crash_targets and self.state is not None:
                prior = self.state.get_drain(instance_id=case.instance_id)
                if (
                    prior is not None
                    and prior.event_id == entry.item.message.event_id
                    and prior.evicted
                    and not prior.done
                    and crash_marks.resume(case.instance_id)
                ):
                    with counters.lock:
                        counters.resumed_from_progress[case.instance_id] = prior.evicted
            return drain(self, entry, case)

        def timed_drain_once(self: Any, entry: Any, case: Any) -> Any:
            with counters.lock:
                began = counters.invocation_started.get(getattr(_INVOCATION, "id", None) or -1)
                if began is not None:
                    counters.drain_offsets.append(time.monotonic() - began)
            return drain_once(self, entry, case)

        send_back = interrupt_drains.send_back

        def counted_send_back(batch: Any, entries: Any, send_batch: Any) -> Any:
            sent = send_back(batch, entries, send_batch)
            with counters.lock:
                counters.deferred += len(sent)
            return sent

        def counted_handed_off(self: Any, cases: Any) -> Any:
            out = handed_off(self, cases)
            with counters.lock:
                counters.handed_off += len(cases)
            return out

        def crashing_save(self: Any, progress: Any, warnings: list[str]) -> None:
            save(self, progress, warnings)
            iid = progress.instance_id
            if iid in counters.crash_targets and progress.evicted >= 1 and not progress.done and crash_marks.kill(iid):
                with counters.lock:
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
                counters.force_deleted_apps[kwargs["pod"].labels.get("app", "")] += 1
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
            if operation == "BatchWriteItem":  # the first write names the record kind of them all
                writes: list[Any] = next(iter(params["RequestItems"].values()), [])
                item = writes[0]["PutRequest"]["Item"] if writes else None
                with counters.lock:
                    counters.batch_written += len(writes) if counters.count_calls else 0
            if isinstance(item, dict) and isinstance(item.get("pk"), dict):  # the state table: which record
                name += f" {str(item['pk'].get('S', '')).split('#', 1)[0]}"
            with counters.lock:
                counting = counters.count_calls
                if counting:
                    counters.calls[name] += 1
            began = time.monotonic()
            try:
                response = api_call(self, operation, params)
            finally:
                if counting:
                    counters.timed(name, began)
            retries = response.get("ResponseMetadata", {}).get("RetryAttempts", 0) if isinstance(response, dict) else 0
            if retries and counting:
                with counters.lock:
                    counters.call_retries[name] += retries
            return response

        def counted_request(self: Any, method: str, url_path: str, *args: Any, **kwargs: Any) -> Any:
            with counters.lock:
                resource = _resource(url_path)
                if method != "GET":
                    resource = resource.removesuffix(" (list)")
                counting = counters.count_calls
                if counting:
                    counters.calls[f"kube {method} {resource}"] += 1
            began = time.monotonic()
            try:
                return request(self, method, url_path, *args, **kwargs)
            finally:
                if counting:
                    counters.timed(f"kube {method} {resource}", began)

        BaseClient._make_api_call = counted_api_call
        KubeRest.request = counted_request  # type: ignore[method-assign]
        Ec2CloudProvider.terminate = noted_terminate  # type: ignore[method-assign]
        interrupt_batch_run.BatchRun.drain = counted_drain  # type: ignore[method-assign]
        interrupt_batch_run.BatchRun.drain_once = timed_drain_once  # type: ignore[method-assign]
        interrupt_batch_run.BatchRun.save = crashing_save  # type: ignore[method-assign]
        interrupt_batch_run.BatchRun.handed_off = counted_handed_off  # type: ignore[method-assign]
        InterruptionQueue.send = counted_send  # type: ignore[method-assign]
        InterruptionQueue.send_batch = counted_send_batch  # type: ignore[method-assign]
        KubeCluster.delete_pod = counted_delete  # type: ignore[method-assign]
        interrupt_drains.send_back = counted_send_back
        interrupt_batch._replace = counted_replace  # its parameter keeps _replace's name

    def invocation_seconds(self) -> list[float]:
        """The wall time (seconds) of each invocation that returned."""
        return [ended - began for _, began, ended in self.batch_spans]

    def forget_warm_up(self) -> None:
        """Drop what the warm-up's calls counted (calls, slow calls, retries, written items): not the burst's."""
        with self.lock:
            self.calls.clear()
            self.slow_calls.clear()
            self.call_retries.clear()
            self.batch_written = 0

    def timed(self, call: str, began: float) -> None:
        """Keep ``call`` (begun at monotonic ``began``) among :attr:`slow_calls` when it took
        :data:`SLOW_CALL_SECONDS` or more, failed or not: a slow AWS or Kubernetes answer (or botocore's retries
        with backoff inside it) is where an invocation can wait past its function timeout."""
        took = time.monotonic() - began
        if took >= SLOW_CALL_SECONDS:
            with self.lock:
                self.slow_calls.append((began, took, call, getattr(_INVOCATION, "id", None)))


def _resource(url_path: str) -> str:
    """The resource (and subresource) a Kubernetes API path names: ``/api/v1/namespaces/d/pods/p/eviction``
    -> ``pods/eviction``; ``/apis/karpenter.sh/v1/nodeclaims/x`` -> ``nodeclaims``; ``/api/v1/nodes`` ->
    ``nodes (list)``."""
    parts = [p for p in url_path.split("?", maxsplit=1)[0].split("/") if p]
    parts = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if len(parts) >= 2 and parts[0] == "namespaces":
        parts = parts[2:]
    return "/".join(parts[:1] + parts[2:3]) + ("" if len(parts) > 1 else " (list)")


def summary(counters: Counters, consumer: Consumer | None) -> dict[str, Any]:
    """What one process counted, as plain data for the parent (see :func:`merge`); ``consumer`` is None in the
    reconcile function's process (it polls no queue)."""
    return {
        "drains": list(counters.drains.items()),
        "drain_runs": [[list(k), v] for k, v in counters.drain_runs.items()],
        "ended_at_timeout": sorted(_TIMED_OUT),
        "cut_off_in": dict(CUT_OFF_IN),
        "crashed": sorted(counters.crashed),
        "resumed_from_progress": dict(counters.resumed_from_progress),
        "handed_off": counters.handed_off,
        "deferred": counters.deferred,
        "continuations": counters.continuations,
        "force_deleted": counters.force_deleted,
        "force_deleted_apps": dict(counters.force_deleted_apps),
        "invocations": counters.invocations,
        "failed_records": counters.failed_records,
        "errors": counters.errors[:20],
        "replacements": [
            {"ran": r.ran, "skipped": r.skipped, "errors": list(r.errors), "nodeclaims_launched": r.nodeclaims_launched}
            for r in counters.replacements
        ],
        "replacement_times": counters.replacement_times,
        "batch_spans": counters.batch_spans,
        "drain_offsets": counters.drain_offsets,
        "drain_started": [[list(k), v] for k, v in counters.drain_started.items()],
        "calls": dict(counters.calls),
        "batch_written": counters.batch_written,
        "call_retries": dict(counters.call_retries),
        "slow_calls": counters.slow_calls,
        "wakes_sent": counters.wakes_sent,
        "wakes_skipped": counters.wakes_skipped,
        "wake_passes": counters.wake_passes,
        "wakes_ended": counters.wakes_ended,
        "ticks": counters.ticks,
        "killed": consumer.killed if consumer else 0,
        "timed_out": consumer.timed_out if consumer else 0,
        "duplicated": sorted(consumer.duplicated) if consumer else [],
    }


def fresh_runs(runs: list[tuple[float, int | None]], ended_at_timeout: set[int]) -> int:
    """How many of one drain's runs (``(monotonic start, invocation)``, any order) began afresh: the first,
    and any after a run whose invocation returned. A run after one ended at the function timeout resumes it
    (its record came back when the visibility ran out, and it goes on from the drain's stored progress):
    the same drain, not a second."""
    invocations = [inv for _, inv in sorted(runs, key=lambda r: r[0])]
    return sum(1 for i, _ in enumerate(invocations) if i == 0 or invocations[i - 1] not in ended_at_timeout)


class CrashMarks:
    """``--crash-every``'s kills, shared by every invocation process through the state table (items
    ``bench-crash#<instance id>``, never read by the handlers): each target is killed once, and its resume
    counted once, whichever processes run them."""

    def __init__(self) -> None:
        self._client: Any = None

    def _dynamodb(self) -> Any:
        if self._client is None:
            import boto3

            self._client = boto3.client("dynamodb", region_name=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"))
        return self._client

    def _claim(self, instance_id: str, step: str, condition: str) -> bool:
        """Set ``step`` on the instance's mark when ``condition`` holds; False when it did not."""
        try:
            self._dynamodb().update_item(
                TableName=os.environ["NODESMITH_STATE_TABLE"],
                Key={"pk": {"S": f"bench-crash#{instance_id}"}, "sk": {"S": "mark"}},
                UpdateExpression=f"SET {step} = :t",
                ConditionExpression=condition,
                ExpressionAttributeValues={":t": {"BOOL": True}},
            )
        except self._dynamodb().exceptions.ConditionalCheckFailedException:
            return False
        return True

    def kill(self, instance_id: str) -> bool:
        """True the first time, in any process: kill this invocation now."""
        return self._claim(instance_id, "killed", "attribute_not_exists(killed)")

    def resume(self, instance_id: str) -> bool:
        """True the first time a killed target's drain starts again from its stored progress."""
        return self._claim(instance_id, "resumed", "attribute_exists(killed) AND attribute_not_exists(resumed)")


def merge(counters: Counters, part: dict[str, Any]) -> tuple[int, set[str]]:
    """Add one process's :func:`summary` into ``counters``; returns (invocations killed, events duplicated)."""
    from types import SimpleNamespace

    with counters.lock:
        counters.drains.update({tuple(k): v for k, v in part["drains"]})
        for k, runs in part["drain_runs"]:
            counters.drain_runs.setdefault(tuple(k), []).extend((at, inv) for at, inv in runs)
        counters.ended_at_timeout |= set(part["ended_at_timeout"])
        counters.cut_off_in.update(part["cut_off_in"])
        counters.crashed |= set(part["crashed"])
        counters.resumed_from_progress.update(part["resumed_from_progress"])
        counters.handed_off += part["handed_off"]
        counters.deferred += part["deferred"]
        counters.continuations += part["continuations"]
        counters.force_deleted += part["force_deleted"]
        counters.force_deleted_apps.update(part["force_deleted_apps"])
        counters.invocations += part["invocations"]
        counters.timed_out += part["timed_out"]
        counters.wakes_sent += part["wakes_sent"]
        counters.calls.update(part["calls"])
        counters.batch_written += part["batch_written"]
        counters.call_retries.update(part["call_retries"])
        counters.slow_calls += [tuple(c) for c in part["slow_calls"]]
        counters.wakes_skipped += part["wakes_skipped"]
        counters.wake_passes += [tuple(p) for p in part["wake_passes"]]
        counters.wakes_ended += part["wakes_ended"]
        counters.ticks += [tuple(t) for t in part["ticks"]]
        counters.failed_records += part["failed_records"]
        counters.errors += part["errors"]
        counters.replacements += [SimpleNamespace(**r) for r in part["replacements"]]
        counters.replacement_times += [tuple(t) for t in part["replacement_times"]]
        counters.batch_spans += [tuple(b) for b in part["batch_spans"]]
        counters.drain_offsets += part["drain_offsets"]
        for key, at in part["drain_started"]:
            k = (key[0], key[1])
            counters.drain_started[k] = min(at, counters.drain_started.get(k, at))
    return part["killed"], set(part["duplicated"])
