"""Lambda as the embedded default runs it (``nodesmith.sim.lambda_runtime``): asynchronous invocations under
reserved concurrency 1 with their maximum event age, a boto3 ``Invoke(InvocationType=Event)`` answered 202 and
queued for them, and an invocation killed mid-work leaving its records for SQS."""

from __future__ import annotations

import queue
import time
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from nodesmith.adapters.aws.wake import ReconcileWaker, provision_event
from nodesmith.sim.lambda_runtime import (
    ERRORS_KEPT,
    AsyncInvocations,
    Crashes,
    EventSourceOptions,
    SqsEventSource,
    Stats,
    inject_crashes,
    install_function_timeouts,
    kill_invocation,
    route_async_invokes,
)

if TYPE_CHECKING:
    from nodesmith.sim import aws as embedded_aws


def test_async_invocations_run_in_turn_and_drop_events_older_than_their_age() -> None:
    ran: list[dict[str, Any]] = []
    function = AsyncInvocations(handler=lambda event, _: ran.append(event) or {}, function_name="f", max_event_age=60)
    function.events.put((time.time() - 61, {"n": 1}))  # waited past the maximum event age
    function.invoke({"n": 2})
    function.invoke({"n": 3})

    while function.run_next(wait=0):
        pass

    assert ran == [{"n": 2}, {"n": 3}]
    assert (function.stats.invocations, function.stats.dropped) == (2, 1)


def test_an_asynchronous_invoke_is_answered_202_and_queued_for_the_function() -> None:
    client = boto3.client("lambda", region_name="us-east-1", endpoint_url="http://127.0.0.1:9",
                          aws_access_key_id="testing", aws_secret_access_key="testing")  # fmt: skip
    events: queue.Queue[tuple[float, dict[str, Any]]] = queue.Queue()
    route_async_invokes(client, function_name="nodesmith-reconcile", events=events)

    ReconcileWaker(function_name="nodesmith-reconcile", client=client).wake(1234.5)  # the adapter, unchanged

    queued_at, event = events.get_nowait()
    assert event == provision_event(1234.5)
    assert abs(queued_at - time.time()) < 5
    assert events.empty()


@pytest.fixture
def sqs(aws: embedded_aws.EmbeddedAws) -> Any:
    return aws.client("sqs")


@pytest.mark.slow
def test_a_killed_invocation_makes_no_more_calls_and_leaves_its_records(sqs: Any) -> None:
    install_function_timeouts()
    url = sqs.create_queue(QueueName="work")["QueueUrl"]
    for n in range(2):
        sqs.send_message(QueueUrl=url, MessageBody=str(n))
    calls: list[str] = []

    def handler(event: dict[str, Any], _: Any) -> dict[str, Any]:
        calls.append("before")
        try:
            kill_invocation("crash")
        finally:
            try:
                sqs.get_queue_url(QueueName="work")  # the runtime is gone: this never reaches AWS
                calls.append("after")
            except BaseException:
                calls.append("refused")
        return {"batchItemFailures": []}

    source = SqsEventSource(sqs=sqs, queue_url=url, handler=handler, function_name="f",
                            options=EventSourceOptions(batching_window=0.5, visibility_timeout=1))  # fmt: skip
    assert source.poll_once(wait=1) == 2

    assert calls == ["before", "refused"]
    assert (source.stats.killed, source.stats.timed_out) == (1, 0)
    time.sleep(1.2)
    again = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", [])
    assert sorted(m["Body"] for m in again) == ["0", "1"]


@pytest.mark.slow
def test_injected_faults_end_a_share_of_invocations_at_a_random_point_and_leave_their_records(sqs: Any) -> None:
    install_function_timeouts()
    url = sqs.create_queue(QueueName="crashing")["QueueUrl"]
    for n in range(20):
        sqs.send_message(QueueUrl=url, MessageBody=str(n))
    reached: list[int] = []

    def handler(event: dict[str, Any], _: Any) -> dict[str, Any]:
        for step in range(5):  # five AWS calls; a fault planned for a 6th to 8th strikes as the handler returns
            sqs.get_queue_url(QueueName="crashing")
            reached.append(step)
        return {"batchItemFailures": []}

    crashes = Crashes(rate=0.4, timeouts=0.2, spread=8, seed=7)
    inject_crashes(crashes)
    try:
        options = EventSourceOptions(batch_size=1, batching_window=0, visibility_timeout=30)
        source = SqsEventSource(sqs=sqs, queue_url=url, handler=handler, function_name="f", options=options)
        for _ in range(20):
            source.poll_once(wait=0)
    finally:
        inject_crashes(None)

    stats = source.stats
    assert stats.invocations == 20 and stats.timed_out == 0 and not stats.errors
    assert crashes.injected == stats.killed > 0 and crashes.timeouts_injected == stats.timeouts_injected > 0
    ended = stats.killed + stats.timeouts_injected
    assert ended < stats.invocations  # drawn once per invocation, not per call: most invocations live
    assert reached.count(0) < stats.invocations  # some ended at their first call ...
    assert reached.count(4) > stats.invocations - ended  # ... and some after their last, as they returned
    left = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesNotVisible"])
    assert int(left["Attributes"]["ApproximateNumberOfMessagesNotVisible"]) == ended  # each kept for SQS
    assert Crashes(rate=0.5, seed=7).plan() == Crashes(rate=0.5, seed=7).plan()  # seeded
    with pytest.raises(ValueError, match="crash rate"):
        Crashes(rate=1.5)
    with pytest.raises(ValueError, match="spread"):
        Crashes(rate=0.1, spread=0)


def test_stats_of_one_function_from_several_processes_add_up() -> None:
    one = Stats(invocations=3, records=20, failed=2, errors=["a", "b", "c"], timed_out=1, duplicated=2)
    other = Stats(invocations=4, records=31, killed=1, dropped=5, errors=["d", "e", "f"], timeouts_injected=2)

    one.add(other)

    assert one == Stats(invocations=7, records=51, failed=2, errors=["a", "b", "c", "d", "e"][:ERRORS_KEPT],
                        timed_out=1, killed=1, duplicated=2, dropped=5, timeouts_injected=2)  # fmt: skip
    assert other.invocations == 4
