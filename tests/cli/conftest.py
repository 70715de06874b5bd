"""Fixtures for the CLI tests: a small hand-made instance catalogue and manifest writers.

The small catalogue keeps these tests fast and independent of moto; the embedded catalogue itself
is exercised by ``test_embedded_catalogue.py`` and the scenario suite.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

import pytest

from nodesmith.core.model import InstanceType, Offering

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

GIB = 2**30
ZONES = {"us-east-1a": "use1-az6", "us-east-1b": "use1-az1"}


def instance_type(name: str, *, cpu: int, memory_gib: int, price: float, arch: str = "amd64") -> InstanceType:
    """A plausible instance type: Karpenter labels, capacity, a small overhead, spot and on-demand in two zones."""
    family, size = name.split(".")
    labels = {
        "node.kubernetes.io/instance-type": name,
        "kubernetes.io/arch": arch,
        "kubernetes.io/os": "linux",
        "karpenter.k8s.aws/instance-category": family[0],
        "karpenter.k8s.aws/instance-family": family,
        "karpenter.k8s.aws/instance-generation": "".join(c for c in family if c.isdigit()) or "1",
        "karpenter.k8s.aws/instance-size": size,
        "karpenter.k8s.aws/instance-cpu": str(cpu),
        "karpenter.k8s.aws/instance-memory": str(memory_gib * 1024),
    }
    offerings = tuple(
        Offering(
            zone=zone,
            capacity_type=capacity_type,
            price=round(price * (0.35 if capacity_type == "spot" else 1.0), 6),
            zone_id=zone_id,
            price_estimated=capacity_type == "spot",
        )
        for zone, zone_id in ZONES.items()
        for capacity_type in ("spot", "on-demand")
    )
    return InstanceType(
        name=name,
        labels=labels,
        capacity={"cpu": cpu * 1000, "memory": memory_gib * GIB, "pods": 29, "ephemeral-storage": 20 * GIB},
        overhead={"cpu": 80, "memory": GIB // 2, "ephemeral-storage": 2 * GIB},
        offerings=offerings,
    )


@pytest.fixture
def small_catalogue() -> list[InstanceType]:
    """Four amd64 types (2 to 8 vCPUs) and one arm64 type."""
    return [
        instance_type("m5.large", cpu=2, memory_gib=8, price=0.096),
        instance_type("m5.xlarge", cpu=4, memory_gib=16, price=0.192),
        instance_type("c5.xlarge", cpu=4, memory_gib=8, price=0.17),
        instance_type("c5.2xlarge", cpu=8, memory_gib=16, price=0.34),
        instance_type("c6g.large", cpu=2, memory_gib=4, price=0.068, arch="arm64"),
    ]


@pytest.fixture
def fake_catalogue(monkeypatch: pytest.MonkeyPatch, small_catalogue: list[InstanceType]) -> list[dict[str, object]]:
    """Replace the embedded catalogue with :func:`small_catalogue`; returns the recorded calls' arguments."""
    from nodesmith.cli import simulate

    calls: list[dict[str, object]] = []

    def fake(**kwargs: object) -> list[InstanceType]:
        calls.append(kwargs)
        return small_catalogue

    monkeypatch.setattr(simulate, "load_catalogue", fake)
    return calls


@pytest.fixture
def write(tmp_path: Path) -> Callable[[str, str], Path]:
    """Write a manifest file under the test's temporary directory: ``write(name, yaml_text) -> path``."""

    def _write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return path

    return _write
