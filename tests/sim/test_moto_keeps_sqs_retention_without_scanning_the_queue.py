"""``fix_moto``'s retention check: a receive still returns no message older than the queue's retention period,
but reads only that period (moto computed every queue attribute, scanning every message,
for each message it returned)."""

from __future__ import annotations

from typing import Any

from moto.sqs.models import Queue, sqs_backends

from nodesmith.sim import aws


def test_a_receive_keeps_the_retention_period_and_reads_no_other_attribute(monkeypatch: Any) -> None:
    embedded = aws.start()
    try:
        embedded.reset()
        sqs = embedded.client("sqs")
        url = sqs.create_queue(QueueName="retained", Attributes={"MessageRetentionPeriod": "60"})["QueueUrl"]
        sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(n), "MessageBody": f"m{n}"} for n in range(3)])
        queue = sqs_backends["123456789012"]["us-east-1"].get_queue("retained")
        queue._messages[2].sent_timestamp -= 61_000  # sent 61 s ago: past the 60 s retention
        monkeypatch.setattr(Queue, "attributes", property(lambda _q: (_ for _ in ()).throw(AssertionError("scanned"))))
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
        assert sorted(m["Body"] for m in got) == ["m0", "m1"]
    finally:
        embedded.stop()
