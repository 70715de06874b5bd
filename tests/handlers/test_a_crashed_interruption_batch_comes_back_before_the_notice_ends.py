"""The queue's visibility timeout (121 s) is longer than a spot notice: the handler shortens its records'.

A crashed or timed-out invocation deletes nothing, so SQS delivers its records again only when their
visibility ends; the handler sets it to its remaining time + a margin as soon as it starts, and a
failed record gets a short backoff. Asserted on moto's SQS behaviour.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import boto3
import pytest
from moto import mock_aws

from nodesmith.adapters.aws.clients import reset_clients
from nodesmith.handlers import interruption, wiring
from nodesmith.handlers.settings import Settings

if TYPE_CHECKING:
    from collections.abc import Iterator

    from aws_lambda_powertools.utilities.typing import LambdaContext

REGION = "us-east-1"
QUEUE_VISIBILITY_SECONDS = 121


class Killed(BaseException):
    """Lambda ending the invocation (timeout, crash): nothing returns, nothing is deleted."""


@dataclass
class Context:
    remaining_ms: int

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


def context(remaining_ms: int) -> LambdaContext:
    return cast("LambdaContext", Context(remaining_ms=remaining_ms))


@pytest.fixture
def queue(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Iterator[tuple[Any, str]]:
    empty = tmp_path / "aws-empty.ini"
    empty.write_text("")
    for key in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_REGION"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty))
    reset_clients()
    with mock_aws():
        sqs = boto3.client("sqs", region_name=REGION)
        url = sqs.create_queue(
            QueueName="interruptions", Attributes={"VisibilityTimeout": str(QUEUE_VISIBILITY_SECONDS)}
        )["QueueUrl"]
        wiring.reset()
        wiring.set_ports(
            settings=Settings(
                cluster_name="test", cluster_endpoint="https://example.invalid", interruption_queue_url=url
            )
        )
        yield sqs, url
        wiring.reset()
    reset_clients()


def receive(sqs: Any, url: str) -> list[dict[str, Any]]:
    return list(sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []))


def records(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"messageId": m["MessageId"], "receiptHandle": m["ReceiptHandle"], "body": m["Body"]} for m in messages]


def test_a_crashed_invocation_s_records_come_back_after_its_remaining_time(
    queue: tuple[Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sqs, url = queue
    for n in range(12):  # more than one ChangeMessageVisibilityBatch call
        sqs.send_message(QueueUrl=url, MessageBody=f'{{"id": "{n}"}}')
    received = receive(sqs, url) + receive(sqs, url)
    assert len(received) == 12
    monkeypatch.setattr(interruption, "VISIBILITY_MARGIN_SECONDS", 0)

    def crash(*_: Any) -> list[str]:
        raise Killed

    monkeypatch.setattr(interruption, "_process", crash)
    with pytest.raises(Killed):
        interruption.process_records(records(received), context(1_000))

    assert receive(sqs, url) == []  # still invisible while the invocation could be running
    time.sleep(1.3)
    again = receive(sqs, url) + receive(sqs, url)
    assert sorted(m["MessageId"] for m in again) == sorted(m["MessageId"] for m in received)


def test_a_failed_record_comes_back_after_a_short_backoff(
    queue: tuple[Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sqs, url = queue
    sqs.send_message(QueueUrl=url, MessageBody='{"id": "ok"}')
    sqs.send_message(QueueUrl=url, MessageBody='{"id": "bad"}')
    received = receive(sqs, url)
    assert len(received) == 2
    bad = next(m["MessageId"] for m in received if "bad" in m["Body"])
    monkeypatch.setattr(interruption, "RETRY_VISIBILITY_SECONDS", 1)
    monkeypatch.setattr(interruption, "_process", lambda *_: [bad])

    # 300 s left: without the backoff the failed record would stay invisible for minutes
    assert interruption.process_records(records(received), context(300_000)) == [bad]

    time.sleep(1.3)
    assert [m["MessageId"] for m in receive(sqs, url)] == [bad]


def test_refused_visibility_changes_never_fail_the_batch(
    queue: tuple[Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(interruption, "_process", lambda *_: [])
    stale = [{"messageId": "m1", "receiptHandle": "not-a-receipt-handle", "body": "{}"}]
    assert interruption.process_records(stale, context(20_000)) == []
