"""``fix_moto``'s SQS message clock: a received message stays invisible for its visibility timeout and a delayed
one is not delivered before its delay, read from the clock directly; moto converted the time through
``datetime`` for every message of the queue at every send and receive."""

from __future__ import annotations

import time
from typing import Any

import moto.sqs.models

from nodesmith.sim import aws


def test_visibility_and_delay_hold_and_a_receive_does_not_convert_the_time_per_queued_message(
    monkeypatch: Any,
) -> None:
    embedded = aws.start()
    try:
        embedded.reset()
        sqs = embedded.client("sqs")
        url = sqs.create_queue(QueueName="clocked")["QueueUrl"]
        for _ in range(20):  # a backlog of 200, in flight
            sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(k), "MessageBody": "x"} for k in range(10)])
            assert (
                len(sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=60)["Messages"]) == 10
            )
        sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=60)
        sqs.send_message(QueueUrl=url, MessageBody="now")
        looks: list[None] = []
        clock = moto.sqs.models.unix_time_millis
        monkeypatch.setattr(moto.sqs.models, "unix_time_millis", lambda *a: (looks.append(None), clock(*a))[-1])

        first = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=1)["Messages"]
        assert [m["Body"] for m in first] == ["now"]  # the delayed one waits, the backlog is in flight
        assert len(looks) < 10  # not one per queued message
        assert "Messages" not in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
        time.sleep(1.2)
        again = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
        assert [m["Body"] for m in again] == ["now"]  # visible again after its timeout
    finally:
        embedded.stop()
