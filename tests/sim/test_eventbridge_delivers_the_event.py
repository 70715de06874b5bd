"""``fix_moto``'s EventBridge delivery: a target without an input transformer receives the event itself, every
field of the envelope as EventBridge puts it (``account`` included); a target with an ``InputTransformer`` still
receives what its template makes of the event."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from nodesmith.sim.aws_moto_fixes import EVENT_ENVELOPE

if TYPE_CHECKING:
    from nodesmith.sim import aws as embedded_aws

pytestmark = [pytest.mark.slow]

RULE_PATTERN = {"source": ["test.source"]}


def _queue(aws: embedded_aws.EmbeddedAws, name: str) -> tuple[str, str]:
    sqs = aws.client("sqs")
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return url, arn


def _bodies(aws: embedded_aws.EmbeddedAws, url: str) -> list[dict[str, object]]:
    messages = aws.client("sqs").receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    return [json.loads(m["Body"]) for m in messages]


def test_a_target_without_a_transformer_receives_the_whole_event(aws: embedded_aws.EmbeddedAws) -> None:
    events = aws.client("events")
    plain_url, plain_arn = _queue(aws, "plain")
    shaped_url, shaped_arn = _queue(aws, "shaped")
    events.put_rule(Name="r", EventPattern=json.dumps(RULE_PATTERN))
    events.put_targets(Rule="r", Targets=[
        {"Id": "plain", "Arn": plain_arn},
        {"Id": "shaped", "Arn": shaped_arn, "InputTransformer": {
            "InputPathsMap": {"what": "$.detail.what"}, "InputTemplate": '{"only": "<what>"}'}},
    ])  # fmt: skip

    answer = events.put_events(Entries=[{"Source": "test.source", "DetailType": "Test Thing",
                                         "Resources": ["arn:aws:ec2:us-east-1:123456789012:instance/i-1"],
                                         "Detail": json.dumps({"what": "ever", "n": 1})}])  # fmt: skip

    [body] = _bodies(aws, plain_url)
    assert sorted(body) == sorted(EVENT_ENVELOPE)
    assert body["id"] == answer["Entries"][0]["EventId"]
    assert (body["version"], body["account"], body["region"]) == ("0", "123456789012", "us-east-1")
    assert (body["source"], body["detail-type"]) == ("test.source", "Test Thing")
    assert body["resources"] == ["arn:aws:ec2:us-east-1:123456789012:instance/i-1"]
    assert body["detail"] == {"what": "ever", "n": 1}
    assert isinstance(body["time"], str) and body["time"].endswith("Z")
    assert _bodies(aws, shaped_url) == [{"only": "ever"}]
