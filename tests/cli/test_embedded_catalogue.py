"""The embedded (moto) EC2 catalogue behind ``nodesmith simulate``.

It must be the real catalogue, answer without network or credentials, leave no moto patching or
environment change behind, be cached on disk under ``$XDG_CACHE_HOME/nodesmith`` (and read back from
there), and honour the one EC2NodeClass the NodePools share.
"""

from __future__ import annotations

import json
import os
import textwrap
from typing import TYPE_CHECKING, Any

import boto3
import moto
import pytest

from nodesmith.adapters.manifests import load_manifest_text
from nodesmith.cli.simulate import catalogue_cache_path, load_catalogue

if TYPE_CHECKING:
    from pathlib import Path

REGION = "us-east-1"


_WIRE_ANSWER = (
    b'<DescribeAvailabilityZonesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
    b"<requestId>wire</requestId><availabilityZoneInfo><item><zoneName>from-the-wire</zoneName></item>"
    b"</availabilityZoneInfo></DescribeAvailabilityZonesResponse>"
)


class _Raw:
    def stream(self, **_: Any) -> list[bytes]:
        return [_WIRE_ANSWER]


def _answer_instead_of_the_network(request: Any, **_: Any) -> Any:
    """A ``before-send`` hook standing in for the network; moto, when active, answers before it."""
    from botocore.awsrequest import AWSResponse

    return AWSResponse(request.url, 200, {}, _Raw())


@pytest.mark.slow
def test_catalogue_is_real_isolated_and_cached_under_xdg_cache_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")  # the user's AWS setup must not matter
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    path = catalogue_cache_path(moto_version=moto.__version__, region=REGION)
    assert path == tmp_path / "nodesmith" / f"ec2-catalogue-moto-{moto.__version__}-{REGION}.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")  # a damaged cache is ignored and rewritten
    env_before = dict(os.environ)

    first = {it.name: it for it in load_catalogue(region=REGION, price_table=None, use_aws=False)}

    assert len(first) > 1000, "the embedded catalogue is moto's copy of the real EC2 catalogue"
    assert first["m5.large"].capacity["cpu"] == 2000
    assert dict(os.environ) == env_before, "moto's fake credentials or our isolation leaked into the environment"
    monkeypatch.delenv("AWS_PROFILE")  # now build a plain client on the standard endpoint moto would intercept
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    client = boto3.session.Session(aws_access_key_id="real", aws_secret_access_key="real-secret").client(
        "ec2", region_name=REGION
    )
    client.meta.events.register("before-send", _answer_instead_of_the_network)
    zones = [z["ZoneName"] for z in client.describe_availability_zones()["AvailabilityZones"]]
    assert zones == ["from-the-wire"], "moto is still intercepting AWS calls after the catalogue was loaded"
    cached = json.loads(path.read_text())
    assert cached["format"] == 1
    assert any(key.startswith("DescribeInstanceTypes ") for key in cached["responses"])

    # Serve a doctored first page: the next load must come from the cache, not from moto.
    for key, answer in cached["responses"].items():
        if key.startswith("DescribeInstanceTypes ") and "NextToken" not in key:
            answer["InstanceTypes"] = [t for t in answer["InstanceTypes"] if t["InstanceType"] == "m5.large"] or [
                {**answer["InstanceTypes"][0], "InstanceType": "m5.large"}
            ]
            answer.pop("NextToken", None)
    path.write_text(json.dumps(cached))
    second = load_catalogue(region=REGION, price_table=None, use_aws=False)
    assert [it.name for it in second] == ["m5.large"]


@pytest.mark.slow
def test_shared_nodeclass_kubelet_settings_shape_capacity() -> None:
    nodeclass = load_manifest_text(
        textwrap.dedent(
            """\
        apiVersion: karpenter.k8s.aws/v1
        kind: EC2NodeClass
        metadata: {name: default}
        spec:
          role: KarpenterNodeRole-test
          amiSelectorTerms: [{alias: al2023@latest}]
          subnetSelectorTerms: [{tags: {karpenter.sh/discovery: test}}]
          securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: test}}]
          kubelet: {maxPods: 5}
          blockDeviceMappings:
            - deviceName: /dev/xvda
              rootVolume: true
              ebs: {volumeSize: 100Gi, volumeType: gp3}
        """
        )
    ).ec2nodeclasses[0]
    types = {it.name: it for it in load_catalogue(region=REGION, price_table=None, use_aws=False, nodeclass=nodeclass)}
    assert types["m5.large"].capacity["pods"] == 5
    assert types["m5.large"].capacity["ephemeral-storage"] == 100 * 2**30
