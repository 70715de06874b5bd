"""The embedded AWS (moto server) starts on a free local port, seeds a Karpenter-shaped VPC, and cleans up."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import boto3
import pytest

from nodesmith.adapters.aws.pricing import load_price_table
from nodesmith.sim import aws as embedded_aws

if TYPE_CHECKING:
    from collections.abc import Iterator

CLUSTER = "sim-test"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[embedded_aws.EmbeddedAws]:
    monkeypatch.setenv("AWS_PROFILE", "someone-elses-real-profile")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAREALLOOKINGKEY")
    running = embedded_aws.start()
    try:
        running.reset()  # moto's backends are per process: start from nothing
        yield running
    finally:
        running.stop()


def test_start_points_boto3_at_a_local_moto_with_fake_credentials(aws: embedded_aws.EmbeddedAws) -> None:
    assert aws.endpoint_url.startswith("http://127.0.0.1:")
    assert os.environ["AWS_ENDPOINT_URL"] == aws.endpoint_url
    assert os.environ["AWS_ACCESS_KEY_ID"] == "testing"
    assert "AWS_PROFILE" not in os.environ  # a real profile is never used
    assert Path(os.environ["AWS_SHARED_CREDENTIALS_FILE"]).read_text() == ""  # not ~/.aws/credentials
    identity = boto3.client("sts").get_caller_identity()  # plain boto3, no endpoint argument
    assert identity["Account"] == "123456789012"


def test_stop_restores_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_PROFILE", "mine")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    running = embedded_aws.start()
    running.stop()
    assert os.environ["AWS_PROFILE"] == "mine"
    assert "AWS_ENDPOINT_URL" not in os.environ


def test_seed_creates_what_a_discovery_tagged_node_class_selects(aws: embedded_aws.EmbeddedAws) -> None:
    seeded = embedded_aws.seed(cluster_name=CLUSTER, cluster=embedded_aws.SeedCluster(kubernetes_version="1.32"))
    ec2, ssm, eks = aws.client("ec2"), aws.client("ssm"), aws.client("eks")
    tagged = [{"Name": "tag:karpenter.sh/discovery", "Values": [CLUSTER]}]
    subnets = ec2.describe_subnets(Filters=tagged)["Subnets"]
    assert sorted(s["AvailabilityZone"] for s in subnets) == ["us-east-1a", "us-east-1b", "us-east-1c"]
    assert [g["GroupId"] for g in ec2.describe_security_groups(Filters=tagged)["SecurityGroups"]] == [
        seeded.security_group_id
    ]
    for arch in ("x86_64", "arm64"):
        name = f"/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/{arch}/standard/recommended/image_id"
        image_id = ssm.get_parameter(Name=name)["Parameter"]["Value"]
        assert image_id == seeded.images[(arch, "standard")]
        image = ec2.describe_images(ImageIds=[image_id])["Images"][0]
        assert image["Architecture"] == arch
    cluster = eks.describe_cluster(name=CLUSTER)["cluster"]
    assert cluster["version"] == "1.32"
    assert cluster["kubernetesNetworkConfig"]["serviceIpv4Cidr"] == seeded.cluster_cidr
    profile = aws.client("iam").get_instance_profile(InstanceProfileName=seeded.instance_profile)
    assert [r["Arn"] for r in profile["InstanceProfile"]["Roles"]] == [seeded.node_role_arn]


def test_price_table_carries_spot_overrides_per_zone(tmp_path: Path) -> None:
    source = tmp_path / "on-demand.json"
    source.write_text(json.dumps({"currency": "USD", "region": "us-east-1", "prices": {"m5.large": 0.096}}))
    table = load_price_table(embedded_aws.write_price_table(path=tmp_path / "prices.json", source=source))
    assert table.on_demand == {"m5.large": 0.096}
    spot = table.spot["m5.large"]
    assert set(spot) == {"us-east-1a", "us-east-1b", "us-east-1c"}
    assert len(set(spot.values())) == 3  # zones differ
    assert all(0.02 < p < 0.05 for p in spot.values())
    assert table.spot_ratio == 0.35

    missing = load_price_table(embedded_aws.write_price_table(path=tmp_path / "p2.json", source=tmp_path / "nope.json"))
    assert missing.on_demand == {}  # prices will be estimated, and labelled so


def test_interruption_plumbing_routes_the_five_event_kinds_to_the_queue(aws: embedded_aws.EmbeddedAws) -> None:
    queues = embedded_aws.create_queues(cluster_name=CLUSTER)
    queue_url = queues.interruption_url
    sqs, events = aws.client("sqs"), aws.client("events")
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"]
    assert attributes["MessageRetentionPeriod"] == "300"
    assert "events.amazonaws.com" in attributes["Policy"]
    rules = {r["Name"]: json.loads(r["EventPattern"]) for r in events.list_rules(NamePrefix=CLUSTER)["Rules"]}
    assert sorted((p["source"][0], p["detail-type"][0]) for p in rules.values()) == [
        ("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning"),
        ("aws.ec2", "EC2 Instance Rebalance Recommendation"),
        ("aws.ec2", "EC2 Instance State-change Notification"),
        ("aws.ec2", "EC2 Spot Instance Interruption Warning"),
        ("aws.health", "AWS Health Event"),
    ]
    for name in rules:
        targets = events.list_targets_by_rule(Rule=name)["Targets"]
        assert [t["Arn"] for t in targets] == [attributes["QueueArn"]]
    # An event put on the default bus reaches the queue.
    events.put_events(
        Entries=[
            {
                "Source": "aws.ec2",
                "DetailType": "EC2 Spot Instance Interruption Warning",
                "Detail": json.dumps({"instance-id": "i-0abc", "instance-action": "terminate"}),
            }
        ]
    )
    messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages", [])
    assert len(messages) == 1
    assert json.loads(messages[0]["Body"])["detail"]["instance-id"] == "i-0abc"
    # the termination queue is the cluster's too, and no rule feeds it
    assert queues.termination_url.rsplit("/", 1)[-1] == f"{CLUSTER}-termination.fifo"
    assert sqs.receive_message(QueueUrl=queues.termination_url).get("Messages", []) == []


def test_the_termination_queue_drops_a_repeated_request_for_five_minutes_even_once_handled(
    aws: embedded_aws.EmbeddedAws,
) -> None:
    # Given a termination request received and deleted (its node drained), as SQS's FIFO deduplication works
    queues = embedded_aws.create_queues(cluster_name=CLUSTER)
    sqs, url = aws.client("sqs"), queues.termination_url

    def send(group: str, dedup: str) -> None:
        sqs.send_message(QueueUrl=url, MessageBody=dedup, MessageGroupId=group, MessageDeduplicationId=dedup)

    send("claim-a", "a/SpotInterrupted")
    (first,) = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    sqs.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])

    # When the same request is sent again within the interval, and another NodeClaim's
    send("claim-a", "a/SpotInterrupted")
    send("claim-b", "b/SpotInterrupted")

    # Then only the other NodeClaim's is delivered: the repeat is accepted and dropped
    delivered = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in delivered] == ["b/SpotInterrupted"]


def test_instances_are_found_by_id_through_every_path_after_many_launches(aws: embedded_aws.EmbeddedAws) -> None:
    # moto looks each launched instance up by id (its root volume); the sim indexes them, so check every path still
    # sees what EC2 would: volumes attached, instances described, stopped and terminated by id, unknown ids refused
    ec2 = boto3.client("ec2")
    launched = [
        i["InstanceId"]
        for _ in range(3)
        for i in ec2.run_instances(ImageId="ami-12c6146b", MinCount=4, MaxCount=4, InstanceType="m5.large")["Instances"]
    ]
    assert len(set(launched)) == 12
    volumes = ec2.describe_volumes()["Volumes"]
    assert {a["InstanceId"] for v in volumes for a in v["Attachments"]} == set(launched)
    ec2.terminate_instances(InstanceIds=[launched[0], launched[-1]])
    described = ec2.describe_instances(InstanceIds=[launched[0], launched[5], launched[-1]])
    states = {i["InstanceId"]: i["State"]["Name"] for r in described["Reservations"] for i in r["Instances"]}
    assert states == {launched[0]: "terminated", launched[5]: "running", launched[-1]: "terminated"}
    with pytest.raises(ec2.exceptions.ClientError, match=r"InvalidInstanceID\.NotFound"):
        ec2.stop_instances(InstanceIds=["i-0123456789abcdef0"])
