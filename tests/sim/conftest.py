"""Fixtures of the Kubernetes API emulator tests: a running emulator and the official client pointed at it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from kubernetes import client

from nodesmith.sim import aws as embedded_aws
from nodesmith.sim.kube import KubeEmulator

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture
def kube() -> Iterator[KubeEmulator]:
    """An empty emulator serving HTTP on a local port (a module may override it with a seeded one)."""
    with KubeEmulator() as emulator:
        yield emulator


@pytest.fixture
def api(kube: KubeEmulator) -> Iterator[client.ApiClient]:
    """The official ``kubernetes`` client for :func:`kube`, no adapter in between."""
    api_client = client.ApiClient(client.Configuration(host=kube.endpoint))
    yield api_client
    api_client.close()


@pytest.fixture
def v1(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


@pytest.fixture
def aws() -> Iterator[embedded_aws.EmbeddedAws]:
    """A freshly started and reset embedded AWS, stopped after the test (a module may override it with a seeded
    one)."""
    with embedded_aws.start() as running:
        running.reset()
        yield running


@pytest.fixture
def ec2(aws: embedded_aws.EmbeddedAws) -> Any:
    """A boto3 EC2 client of :func:`aws`."""
    return aws.client("ec2")
