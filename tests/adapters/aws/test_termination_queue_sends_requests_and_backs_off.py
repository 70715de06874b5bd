"""The termination queue over SQS (moto): requests go ten to a SendMessageBatch as compact JSON of ids, a refused
send is reported per request instead of raised, a received message's visibility is set to its backoff, and on a
FIFO queue a repeated request is dropped and one NodeClaim's requests never are in flight together."""

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


def _fifo(sqs: Any) -> str:
    attributes = {"FifoQueue": "true", "DeduplicationScope": "messageGroup", "FifoThroughputLimit": "perMessageGroupId"}
    return str(sqs.create_queue(QueueName="termination.fifo", Attributes=attributes)["QueueUrl"])


def test_on_a_fifo_queue_a_repeated_request_is_dropped_and_a_new_reason_is_not(aws: None) -> None:
    sqs = boto3.client("sqs", region_name=REGION)
    queue = SqsTerminationQueue(queue_url=_fifo(sqs), client=sqs)
    first, other = requests(2)
    assert queue.send(requests=[first, other]) == []
    assert queue.send(requests=[first]) == []  # a redelivered warning asks again: accepted, and dropped
    later = first.model_copy(update={"reason": "Expired"})
    assert queue.send(requests=[later]) == []
    got = sqs.receive_message(QueueUrl=queue.queue_url, MaxNumberOfMessages=10, VisibilityTimeout=0)["Messages"]
    bodies = sorted((parse_request(m["Body"]).nodeclaim, parse_request(m["Body"]).reason) for m in got)
    assert bodies == [("default-00000", "Drifted"), ("default-00000", "Expired"), ("default-00001", "Drifted")]


def test_on_a_fifo_queue_a_nodeclaim_s_next_request_waits_for_the_one_in_flight(aws: None) -> None:
    sqs = boto3.client("sqs", region_name=REGION)
    queue = SqsTerminationQueue(queue_url=_fifo(sqs), client=sqs)
    first = requests(1)[0]
    queue.send(requests=[first, first.model_copy(update={"reason": "Expired"})])
    (message,) = sqs.receive_message(QueueUrl=queue.queue_url, MaxNumberOfMessages=1, VisibilityTimeout=60)["Messages"]
    # the group's other request is not delivered while the first round is in flight
    assert sqs.receive_message(QueueUrl=queue.queue_url, MaxNumberOfMessages=10).get("Messages", []) == []
    sqs.delete_message(QueueUrl=queue.queue_url, ReceiptHandle=message["ReceiptHandle"])
    (after,) = sqs.receive_message(QueueUrl=queue.queue_url, MaxNumberOfMessages=10)["Messages"]
    assert parse_request(after["Body"]).reason == "Expired"


def test_group_and_deduplication_ids_fit_sqs_for_the_longest_nodeclaim_name() -> None:
    long_name = "a" * 253
    request = TerminationRequest(nodeclaim=long_name, instance_id="i-0123456789abcdef0", reason="Drifted")
    assert len(request.group_id()) <= 128 and len(request.deduplication_id()) <= 128
    assert request.group_id() != TerminationRequest(nodeclaim="a" * 252, instance_id="", reason="Drifted").group_id()
    assert requests(1)[0].group_id() == "default-00000"
