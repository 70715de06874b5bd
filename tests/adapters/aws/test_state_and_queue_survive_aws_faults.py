"""The DynamoDB state store and the SQS termination queue against the embedded AWS's fault layer: a burst of
throttles or 5xx is retried through with the adapters' retry config; one that never ends is reported as each port's
contract says (the lease raises botocore's ClientError, the shared unavailable-offerings cache logs and keeps its
in-memory marks, the queue names the requests it could not send), never half-applied."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from botocore.exceptions import ClientError

from nodesmith.adapters.aws import clients
from nodesmith.adapters.aws.queue import SqsTerminationQueue
from nodesmith.adapters.aws.state import DynamoStateStore
from nodesmith.adapters.aws.unavailable import UnavailableOfferings
from nodesmith.adapters.aws.unavailable_shared import remember_unavailable
from nodesmith.core.errors import UnavailableOffering
from nodesmith.core.termination import TerminationRequest
from nodesmith.sim import aws as embedded_aws
from nodesmith.sim.aws_faults import FaultPlan, fault_counts, set_faults

if TYPE_CHECKING:
    from collections.abc import Iterator

NOW = 1_800_000_000.0


@pytest.fixture(scope="module")
def embedded() -> Iterator[embedded_aws.EmbeddedAws]:
    running = embedded_aws.start()
    try:
        running.reset()
        yield running
    finally:
        running.stop()


@pytest.fixture
def faults(embedded: embedded_aws.EmbeddedAws, monkeypatch: pytest.MonkeyPatch) -> Iterator[embedded_aws.EmbeddedAws]:
    # botocore's backoff and adaptive-rate sleeps are not what these tests check: retries go at once (their
    # number is unchanged)
    monkeypatch.setattr("botocore.retries.standard.ExponentialBackoff.delay_amount", lambda *_: 0.0)
    monkeypatch.setattr("botocore.retries.adaptive.ClientRateLimiter.on_sending_request", lambda *_, **__: None)
    clients.reset_clients()
    try:
        yield embedded
    finally:
        set_faults(embedded, None)
        clients.reset_clients()


@pytest.fixture
def state(faults: embedded_aws.EmbeddedAws, request: pytest.FixtureRequest) -> DynamoStateStore:
    name = embedded_aws.create_state_table(name=f"state-{request.node.name[-40:].replace('_', '-')}")
    return DynamoStateStore(table_name=name, region=faults.region)


def test_a_lease_is_taken_through_a_burst_of_throughput_errors_and_5xx(
    faults: embedded_aws.EmbeddedAws, state: DynamoStateStore
) -> None:
    set_faults(faults, FaultPlan(seed=2, throttle={"dynamodb:UpdateItem": 1.0}, limits={"throttle": 4}))
    assert state.acquire_lease(name="reconcile", holder="a", ttl_seconds=60, now=NOW)
    assert fault_counts(faults).by_operation == {"throttle dynamodb:UpdateItem": 4}

    set_faults(faults, FaultPlan(seed=2, server_error={"dynamodb:*": 1.0}, limits={"internal_error": 2}))
    assert not state.acquire_lease(name="reconcile", holder="b", ttl_seconds=60, now=NOW + 1)  # a's, still
    assert state.lease_holder(name="reconcile", now=NOW + 1) == "a"


def test_a_lease_under_endless_throttling_raises_rather_than_answering(
    faults: embedded_aws.EmbeddedAws, state: DynamoStateStore
) -> None:
    set_faults(faults, FaultPlan(throttle={"dynamodb:UpdateItem": 1.0}))
    with pytest.raises(ClientError) as caught:
        state.acquire_lease(name="reconcile", holder="a", ttl_seconds=60, now=NOW)
    assert caught.value.response["Error"]["Code"] == "ProvisionedThroughputExceededException"
    set_faults(faults, None)
    assert state.lease_holder(name="reconcile", now=NOW) is None  # nothing was taken


def test_the_shared_cache_keeps_its_local_marks_when_dynamodb_throttles_without_end(
    faults: embedded_aws.EmbeddedAws, state: DynamoStateStore
) -> None:
    local = UnavailableOfferings(clock=lambda: 0.0)
    set_faults(faults, FaultPlan(throttle={"dynamodb:PutItem": 1.0}))
    offering = UnavailableOffering("m5.large", "us-east-1a", "spot", "InsufficientInstanceCapacity")

    remember_unavailable([offering], local=local, state=state, ttl_seconds=180, wall_clock=lambda: NOW)

    assert local.is_unavailable("m5.large", "us-east-1a", "spot")
    assert fault_counts(faults).by_kind["throttle"] > 1
    set_faults(faults, None)
    assert state.list_unavailable(now=NOW) == []


def test_termination_requests_go_through_throttling_and_are_named_when_they_cannot(
    faults: embedded_aws.EmbeddedAws,
) -> None:
    url = faults.client("sqs").create_queue(QueueName="termination-faults")["QueueUrl"]
    queue = SqsTerminationQueue(queue_url=url, region=faults.region)
    request = TerminationRequest(nodeclaim="default-abc", instance_id="i-0123456789abcdef0", reason="Empty")

    set_faults(faults, FaultPlan(throttle={"sqs:SendMessageBatch": 1.0}, limits={"throttle": 5}))
    assert queue.send(requests=[request]) == []
    assert fault_counts(faults).by_operation == {"throttle sqs:SendMessageBatch": 5}

    set_faults(faults, FaultPlan(server_error={"sqs:SendMessageBatch": 1.0}))
    problems = queue.send(requests=[request])
    assert len(problems) == 1 and problems[0].startswith("default-abc: SendMessageBatch failed")
    set_faults(faults, None)
    visible = faults.client("sqs").get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
    assert visible["Attributes"]["ApproximateNumberOfMessages"] == "1"  # the first send only
