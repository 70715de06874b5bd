"""``InterruptionQueue.send_batch`` sends a burst's hand-off continuations ten per ``SendMessageBatch``
(SQS's limit) and reports, per message, whether SQS took it, so only unsent messages fail their record."""

from __future__ import annotations

import json
from typing import Any

import boto3
from ec2_support import REGION

from nodesmith.adapters.aws.queue import InterruptionQueue


def test_twenty_three_messages_go_in_three_calls_and_all_arrive_in_order(aws: None) -> None:
    sqs = boto3.client("sqs", region_name=REGION)
    url = sqs.create_queue(QueueName="interruptions")["QueueUrl"]
    calls: list[int] = []
    count = lambda params, **_: calls.append(len(params["Entries"]))  # noqa: E731
    sqs.meta.events.register("provide-client-params.sqs.SendMessageBatch", count)
    queue = InterruptionQueue(queue_url=url, client=sqs)

    errors = queue.send_batch([({"id": f"evt-{n}", "n": n}, 0) for n in range(23)])

    assert errors == [None] * 23 and calls == [10, 10, 3]
    received: list[int] = []
    while len(received) < 23:
        batch = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        assert batch, f"only {len(received)} of 23 messages arrived"
        received += [json.loads(m["Body"])["n"] for m in batch]
    assert sorted(received) == list(range(23))


class _RefusingClient:
    """An SQS client whose second entry of every batch is refused, and whose second call fails whole."""

    def __init__(self) -> None:
        self.calls = 0

    def send_message_batch(self, *, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        self.calls += 1
        if self.calls == 2:
            raise RuntimeError("ServiceUnavailable")
        ok = [{"Id": e["Id"], "MessageId": f"m-{e['Id']}"} for e in Entries if e["Id"] != "1"]
        return {"Successful": ok, "Failed": [{"Id": "1", "Code": "InternalError", "Message": "try again"}]}


def test_a_refused_entry_and_a_failed_call_are_reported_per_message_never_raised() -> None:
    client = _RefusingClient()
    queue = InterruptionQueue(queue_url="https://sqs.example/q", client=client)

    errors = queue.send_batch([({"n": n}, 5) for n in range(12)])

    assert errors[0] is None and errors[2:10] == [None] * 8
    assert errors[1] is not None and "InternalError" in errors[1]
    assert all(e is not None and "ServiceUnavailable" in e for e in errors[10:])  # the second call, entries 10-11
