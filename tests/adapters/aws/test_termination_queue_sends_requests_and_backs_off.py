"""The termination queue over SQS (moto): requests go ten to a SendMessageBatch as compact JSON of ids, a refused
send is reported per request instead of raised, and a received message's visibility is set to its backoff."""

from __future__ import annotations

import json
from typing import Any

import boto3
from ec2_support import REGION

from nodesmith.adapters.aws.queue import SqsTerminationQueue
from nodesmith.core.termination import TerminationRequest, parse_request


def requests(n: int) -> list[TerminationRequest]:
    return [
        TerminationRequest(nodeclaim=f"default-{i:05d}", instance_id=f"i-{i:017x}", reason="Drifted") for i in range(n)
    ]


def test_requests_are_sent_in_batches_and_read_back_as_sent(aws: None) -> None:
    sqs = boto3.client("sqs", region_name=REGION)
    url = sqs.create_queue(QueueName="termination")["QueueUrl"]
    calls: list[int] = []
    real = sqs.send_message_batch

    def counting(**kwargs: Any) -> Any:
        calls.append(len(kwargs["Entries"]))
        return real(**kwargs)

    sqs.send_message_batch = counting  # type: ignore[method-assign]
    queue = SqsTerminationQueue(queue_url=url, client=sqs)
    assert queue.send(requests=requests(23)) == []
    assert calls == [10, 10, 3]
    got = []
    while len(got) < 23:
        got += sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
    assert sorted(parse_request(m["Body"]).nodeclaim for m in got) == [f"default-{i:05d}" for i in range(23)]
    assert json.loads(got[0]["Body"]).keys() == {"nodeclaim", "instanceId", "reason"}


def test_a_refused_send_is_reported_per_request(aws: None) -> None:
    sqs = boto3.client("sqs", region_name=REGION)
    queue = SqsTerminationQueue(queue_url=f"https://sqs.{REGION}.amazonaws.com/123456789012/missing", client=sqs)
    problems = queue.send(requests=requests(2))
    assert [p.split(":", 1)[0] for p in problems] == ["default-00000", "default-00001"]


def test_a_received_request_comes_back_after_its_backoff(aws: None) -> None:
    sqs = boto3.client("sqs", region_name=REGION)
    url = sqs.create_queue(QueueName="termination", Attributes={"VisibilityTimeout": "300"})["QueueUrl"]
    queue = SqsTerminationQueue(queue_url=url, client=sqs)
    queue.send(requests=requests(1))
    (message,) = sqs.receive_message(QueueUrl=url)["Messages"]
    assert queue.retry_after([(message["ReceiptHandle"], 0)]) == 1
    again = sqs.receive_message(QueueUrl=url)["Messages"]  # visible again at once, not after 300 s
    assert again and again[0]["MessageId"] == message["MessageId"]
    assert queue.retry_after([("not-a-handle", 5)]) == 0  # refused: logged, never raised
