"""Fixtures for the EC2 adapter tests: moto (in-process ``mock_aws``) seeded like a Karpenter cluster."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import boto3
import pytest
from ec2_support import CLUSTER, REGION
from moto import mock_aws

from nodesmith.adapters.aws.clients import reset_clients
from nodesmith.sim.aws import SeedCluster, SeededAws, seed

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """moto for every boto3 client created inside the test, with throwaway credentials."""
    empty = tmp_path / "aws-empty.ini"
    empty.write_text("")
    for key in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_ENDPOINT_URL_PRICING"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty))
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")  # halves moto's EC2 start-up; seed() registers AMIs
    reset_clients()
    with mock_aws():
        yield
    reset_clients()


@pytest.fixture
def seeded(aws: None) -> SeededAws:
    """VPC, 3 subnets (us-east-1a/b/c), security group, AL2023 alias AMIs, node role/profile, EKS cluster."""
    return seed(cluster_name=CLUSTER, region=REGION, cluster=SeedCluster(cluster_ca="Y2EtYnVuZGxl"))


@pytest.fixture
def ec2(aws: None) -> Any:
    """A boto3 EC2 client answered by moto."""
    return boto3.client("ec2", region_name=REGION)
