"""The EC2NodeClass readiness checks through the cloud provider: EC2 refusing the describe calls (throttled) is a
``LaunchError`` for the pass to report, not a failed check (the class's conditions are left as they were) and not a
crash of the pass."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from ec2_support import ec2_provider, nodeclass

from nodesmith.core.errors import LaunchError


def test_a_throttled_describe_is_a_launch_error_naming_the_class() -> None:
    ec2: Any = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    cloud = ec2_provider(ec2=ec2)
    with Stubber(ec2) as stub:
        stub.add_client_error("describe_subnets", service_error_code="RequestLimitExceeded", http_status_code=503)
        with pytest.raises(LaunchError, match=r"resolve EC2NodeClass default: .*RequestLimitExceeded"):
            cloud.nodeclass_parts(nodeclass=nodeclass())
