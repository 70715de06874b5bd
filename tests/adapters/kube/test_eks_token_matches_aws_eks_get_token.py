"""EKS bearer tokens are minted like ``aws eks get-token`` and refreshed before they expire."""

from __future__ import annotations

import base64
from urllib.parse import parse_qs, urlsplit

import boto3
import pytest

from nodesmith.adapters.kube import EksTokenSource, KubeCluster, KubeCredentials, build_api_client, eks_token
from nodesmith.core.errors import KubernetesError
from nodesmith.sim.kube import KubeEmulator


@pytest.fixture
def session() -> boto3.Session:
    return boto3.Session(
        aws_access_key_id="AKIAIOSFODNN7EXAMPLE",
        aws_secret_access_key="wJalrXUtnFEMI/K7MDENG",
        aws_session_token="session-token",
        region_name="eu-west-1",
    )


def decode(token: str) -> tuple[str, dict[str, list[str]]]:
    assert token.startswith("k8s-aws-v1.")
    payload = token.removeprefix("k8s-aws-v1.")
    assert "=" not in payload  # base64url without padding
    url = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)).decode()
    parts = urlsplit(url)
    return parts.netloc, parse_qs(parts.query)


def test_token_is_a_presigned_get_caller_identity_with_the_cluster_header(session: boto3.Session) -> None:
    host, query = decode(eks_token(cluster_name="demo", session=session))
    assert host == "sts.eu-west-1.amazonaws.com"
    assert query["Action"] == ["GetCallerIdentity"]
    assert query["X-Amz-Expires"] == ["60"]
    assert query["X-Amz-SignedHeaders"][0].split(";") == ["host", "x-k8s-aws-id"]
    assert query["X-Amz-Credential"][0].startswith("AKIAIOSFODNN7EXAMPLE/")
    assert query["X-Amz-Security-Token"] == ["session-token"]
    assert query["X-Amz-Signature"][0]


def test_token_source_reuses_the_token_until_it_is_due(session: boto3.Session) -> None:
    now = [0.0]
    source = EksTokenSource(cluster_name="demo", session=session, lifetime=600, clock=lambda: now[0])
    first = source.token()
    now[0] = 599
    assert source.token() == first and source.mints == 1
    now[0] = 601
    source.token()
    assert source.mints == 2


def test_eks_auth_sends_the_token_as_a_bearer_header(session: boto3.Session) -> None:
    with KubeEmulator() as kube:
        api = build_api_client(
            cluster_endpoint=kube.endpoint,
            kube_auth="eks",
            credentials=KubeCredentials(cluster_name="demo", session=session),
        )
        assert KubeCluster(api_client=api).list_nodes() == []
        header = kube.last_authorization or ""
    assert header.startswith("Bearer k8s-aws-v1.")
    host, _ = decode(header.removeprefix("Bearer "))
    assert host == "sts.eu-west-1.amazonaws.com"


def test_inconsistent_settings_are_refused() -> None:
    with pytest.raises(KubernetesError, match="cluster name"):
        build_api_client(cluster_endpoint="https://example", kube_auth="eks")
    with pytest.raises(KubernetesError, match="token"):
        build_api_client(cluster_endpoint="https://example", kube_auth="token")
    with pytest.raises(KubernetesError, match="base64"):
        build_api_client(cluster_endpoint="https://example", kube_auth="none", cluster_ca_data="not base64!")


def test_ca_data_is_decoded_into_the_client_configuration() -> None:
    pem = "-----BEGIN CERTIFICATE-----\nMIIBdummy\n-----END CERTIFICATE-----\n"
    api = build_api_client(
        cluster_endpoint="https://example", kube_auth="none", cluster_ca_data=base64.b64encode(pem.encode()).decode()
    )
    assert api.configuration.ca_cert_data == pem
    assert api.configuration.connection_pool_maxsize == 50
