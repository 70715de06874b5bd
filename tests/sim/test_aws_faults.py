"""The embedded AWS's fault layer: seeded and per-operation decisions, exact counts, and answers that botocore reads
as the errors AWS sends (code, HTTP status, retried or not), for every service Nodesmith calls."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from pydantic import ValidationError

from nodesmith.adapters.aws import clients
from nodesmith.sim import aws as embedded_aws
from nodesmith.sim.aws_faults import FaultInjector, FaultPlan, FleetFaults, SqsFaults, fault_counts, set_faults

if TYPE_CHECKING:
    from collections.abc import Iterator

NO_RETRY = Config(retries={"mode": "standard", "total_max_attempts": 1})


@pytest.fixture(scope="module")
def aws() -> Iterator[embedded_aws.EmbeddedAws]:
    running = embedded_aws.start()
    try:
        running.reset()
        embedded_aws.seed(cluster_name="faults")
        yield running
    finally:
        running.stop()


@pytest.fixture
def faults(aws: embedded_aws.EmbeddedAws) -> Iterator[embedded_aws.EmbeddedAws]:
    try:
        yield aws
    finally:
        set_faults(aws, None)


def bare(aws: embedded_aws.EmbeddedAws, service: str) -> Any:
    """A client that does not retry: each call is one request, so its error is what the server answered."""
    return boto3.client(service, region_name=aws.region, endpoint_url=aws.endpoint_url, config=NO_RETRY)


def decisions(plan: FaultPlan, calls: int = 200) -> list[str | None]:
    injector = FaultInjector()
    injector.configure(plan)
    operations = ("CreateFleet", "DescribeInstances", "TerminateInstances")
    return [injector.call_error(service="ec2", operation=operations[n % 3]) for n in range(calls)]


def test_a_seed_makes_the_same_faults_and_another_seed_others() -> None:
    plan = FaultPlan(seed=7, throttle={"*": 0.3}, server_error={"*": 0.2})
    assert decisions(plan) == decisions(plan)
    assert decisions(plan) != decisions(plan.model_copy(update={"seed": 8}))
    assert {"throttle", "internal_error", "unavailable", None} == set(decisions(plan))


def test_the_most_specific_operation_rule_sets_the_rate() -> None:
    plan = FaultPlan(throttle={"ec2:CreateFleet": 1.0, "ec2:*": 0.0, "*": 1.0})
    injector = FaultInjector()
    injector.configure(plan)
    assert injector.call_error(service="ec2", operation="CreateFleet") == "throttle"
    assert injector.call_error(service="ec2", operation="DescribeInstances") is None  # "ec2:*" before "*"
    assert injector.call_error(service="sqs", operation="ReceiveMessage") == "throttle"  # "*"
    assert injector.counts().by_operation == {"throttle ec2:CreateFleet": 1, "throttle sqs:ReceiveMessage": 1}


def test_a_limit_caps_a_kind_exactly_and_a_new_plan_counts_from_zero() -> None:
    injector = FaultInjector()
    injector.configure(FaultPlan(throttle={"*": 1.0}, limits={"throttle": 3}))
    made = [injector.call_error(service="sqs", operation="SendMessageBatch") for _ in range(10)]
    assert made == ["throttle"] * 3 + [None] * 7
    assert injector.counts().by_kind == {"throttle": 3}
    injector.configure(None)
    assert not injector.active
    assert injector.counts().total == 0


def test_a_plan_refuses_rates_outside_zero_to_one_and_unknown_patterns_and_kinds() -> None:
    with pytest.raises(ValidationError):
        FaultPlan(throttle={"*": 1.5})
    with pytest.raises(ValidationError):
        FaultPlan(throttle={"CreateFleet": 0.5})
    with pytest.raises(ValidationError):
        FaultPlan(limits={"earthquake": 1})
    with pytest.raises(ValidationError):
        FleetFaults(codes=())


def test_fleet_errors_take_a_share_and_leave_one_override_unless_all_fail() -> None:
    injector = FaultInjector()
    injector.configure(FaultPlan(fleet=FleetFaults(rate=1.0, share=0.5, codes=("InsufficientInstanceCapacity",))))
    partial = injector.fleet_errors(6)
    assert partial is not None and len(partial) == 3 and set(partial.values()) == {"InsufficientInstanceCapacity"}
    assert injector.fleet_errors(1) == {0: "InsufficientInstanceCapacity"}  # one override: all of it fails
    injector.configure(FaultPlan(fleet=FleetFaults(rate=1.0, share=0.99)))
    assert len(injector.fleet_errors(4) or {}) == 3  # never all but by launch_nothing
    injector.configure(FaultPlan(fleet=FleetFaults(rate=1.0, launch_nothing=1.0)))
    assert len(injector.fleet_errors(4) or {}) == 4
    assert injector.counts().by_kind == {"fleet_capacity_total": 1, "fleet_override_errors": 4}


def test_describe_lag_hides_an_instance_for_its_seconds_only() -> None:
    now = [100.0]
    injector = FaultInjector(clock=lambda: now[0])
    injector.configure(FaultPlan(describe_lag_seconds=5.0))
    injector.remember_launch(["i-0123456789abcdef0"])
    assert injector.hidden(["i-0123456789abcdef0", "i-0fedcba987654321f"]) == {"i-0123456789abcdef0"}
    now[0] = 105.0
    assert injector.hidden(["i-0123456789abcdef0"]) == set()


@pytest.mark.parametrize(
    ("service", "call", "code", "status"),
    [
        ("ec2", lambda c: c.describe_vpcs(), "RequestLimitExceeded", 503),
        ("sqs", lambda c: c.list_queues(), "ThrottlingException", 400),
        ("dynamodb", lambda c: c.list_tables(), "ProvisionedThroughputExceededException", 400),
        ("ssm", lambda c: c.describe_parameters(), "ThrottlingException", 400),
    ],
)
def test_throttles_come_back_as_each_service_sends_them(
    faults: embedded_aws.EmbeddedAws, service: str, call: Any, code: str, status: int
) -> None:
    set_faults(faults, FaultPlan(throttle={f"{service}:*": 1.0}))
    with pytest.raises(ClientError) as caught:
        call(bare(faults, service))
    assert caught.value.response["Error"]["Code"] == code
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
    assert fault_counts(faults).by_kind == {"throttle": 1}


@pytest.mark.parametrize(
    ("service", "call", "codes"),
    [
        ("ec2", lambda c: c.describe_vpcs(), {500: "InternalError", 503: "ServiceUnavailable"}),
        ("sqs", lambda c: c.list_queues(), {500: "InternalFailure", 503: "ServiceUnavailable"}),
        ("dynamodb", lambda c: c.list_tables(), {500: "InternalServerError", 503: "ServiceUnavailable"}),
        ("ssm", lambda c: c.describe_parameters(), {500: "InternalServerError", 503: "ServiceUnavailable"}),
    ],
)
def test_server_errors_come_back_as_500_or_503_with_the_services_codes(
    faults: embedded_aws.EmbeddedAws, service: str, call: Any, codes: dict[int, str]
) -> None:
    set_faults(faults, FaultPlan(seed=1, server_error={"*": 1.0}))
    seen: dict[int, str] = {}
    for _ in range(12):
        with pytest.raises(ClientError) as caught:
            call(bare(faults, service))
        seen[caught.value.response["ResponseMetadata"]["HTTPStatusCode"]] = caught.value.response["Error"]["Code"]
    assert seen == codes
    counted = fault_counts(faults).by_kind
    assert counted.get("internal_error", 0) + counted.get("unavailable", 0) == 12


def test_the_adapters_clients_retry_through_a_burst_of_throttles_and_the_layer_counts_it(
    faults: embedded_aws.EmbeddedAws, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("botocore.retries.standard.ExponentialBackoff.delay_amount", lambda *_: 0.0)
    monkeypatch.setattr("botocore.retries.adaptive.ClientRateLimiter.on_sending_request", lambda *_, **__: None)
    clients.reset_clients()
    set_faults(faults, FaultPlan(throttle={"ec2:DescribeSubnets": 1.0}, limits={"throttle": 5}))
    answer = clients.client("ec2", region=faults.region).describe_subnets()
    assert len(answer["Subnets"]) >= 3
    assert answer["ResponseMetadata"]["RetryAttempts"] == 5
    assert fault_counts(faults).by_operation == {"throttle ec2:DescribeSubnets": 5}


def test_describe_instances_does_not_see_a_fresh_instance_yet(faults: embedded_aws.EmbeddedAws) -> None:
    ec2 = faults.client("ec2")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    set_faults(faults, FaultPlan(describe_lag_seconds=600))
    instance_id = ec2.run_instances(ImageId=image, InstanceType="m5.large", MinCount=1, MaxCount=1)["Instances"][0][
        "InstanceId"
    ]
    with pytest.raises(ClientError) as caught:
        bare(faults, "ec2").describe_instances(InstanceIds=[instance_id])
    assert caught.value.response["Error"]["Code"] == "InvalidInstanceID.NotFound"
    listed = [i["InstanceId"] for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]]
    assert instance_id not in listed
    assert fault_counts(faults).by_kind == {"describe_not_found": 1, "describe_hidden": 1}
    set_faults(faults, None)
    assert ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]


def test_sqs_delivers_a_received_message_again_later_and_takes_its_deletion(faults: embedded_aws.EmbeddedAws) -> None:
    sqs = faults.client("sqs")
    url = sqs.create_queue(QueueName="duplicated")["QueueUrl"]
    set_faults(faults, FaultPlan(sqs=SqsFaults(duplicate=1.0)))
    sqs.send_message(QueueUrl=url, MessageBody="request")
    first = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"])["Messages"]
    assert len(first) == 1
    sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": "0", "ReceiptHandle": first[0]["ReceiptHandle"]}])
    again = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"])["Messages"]
    assert [(m["MessageId"], m["Body"]) for m in again] == [(first[0]["MessageId"], "request")]
    assert again[0]["ReceiptHandle"] != first[0]["ReceiptHandle"]
    assert again[0]["Attributes"]["SentTimestamp"] == first[0]["Attributes"]["SentTimestamp"]
    assert again[0]["Attributes"] == first[0]["Attributes"]  # a kept copy, not a redelivery
    deleted = sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": "d", "ReceiptHandle": again[0]["ReceiptHandle"]}])
    assert deleted["Successful"] == [{"Id": "d"}] and not deleted.get("Failed")
    assert "Messages" not in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)  # delivered twice, not more
    assert fault_counts(faults).by_kind == {"sqs_duplicate": 1}


def test_sqs_holds_a_delayed_message_back(faults: embedded_aws.EmbeddedAws) -> None:
    sqs = faults.client("sqs")
    url = sqs.create_queue(QueueName="delayed")["QueueUrl"]
    set_faults(faults, FaultPlan(sqs=SqsFaults(delay=1.0, delay_seconds=900)))
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": "a", "MessageBody": "late"}])
    assert "Messages" not in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesDelayed"])
    assert attributes["Attributes"]["ApproximateNumberOfMessagesDelayed"] == "1"
    assert fault_counts(faults).by_operation == {"sqs_delayed sqs:SendMessageBatch": 1}


def test_no_plan_leaves_every_answer_to_moto(faults: embedded_aws.EmbeddedAws) -> None:
    set_faults(faults, FaultPlan(throttle={"*": 1.0}))
    set_faults(faults, None)
    assert bare(faults, "ec2").describe_vpcs()["Vpcs"]
    assert fault_counts(faults).total == 0


@pytest.mark.slow
def test_a_moto_in_its_own_process_takes_a_plan_and_reports_its_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")  # the process sets no environment: the client's own keys
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    running = embedded_aws.start_process(set_environ=False)
    try:
        set_faults(running, FaultPlan(throttle={"sqs:ListQueues": 1.0}))
        with pytest.raises(ClientError):
            bare(running, "sqs").list_queues()
        assert fault_counts(running).by_operation == {"throttle sqs:ListQueues": 1}
    finally:
        running.stop()
