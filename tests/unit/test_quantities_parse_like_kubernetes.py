"""Kubernetes quantities parse into the core's units: cpu in millicores, everything else in its base unit,
fractions rounded up as the kubelet rounds requests; bad input names the resource and the value, every time
(the parse is cached, the errors are not)."""

from __future__ import annotations

import pytest

from nodesmith.core.resources import QuantityError, parse_quantity


@pytest.mark.parametrize(
    ("value", "resource", "expected"),
    [
        ("500m", "cpu", 500),
        ("2", "cpu", 2000),
        ("0.5m", "cpu", 1),  # rounds up
        (1.5, "cpu", 1500),
        (2, "cpu", 2000),
        ("1Gi", "memory", 1024**3),
        ("512Mi", "memory", 512 * 1024**2),
        ("1G", "memory", 10**9),
        ("1e3", "memory", 1000),
        ("1.5Ki", "ephemeral-storage", 1536),
        ("29", "pods", 29),
        ("100m", "memory", 1),  # a milli-byte rounds up to a byte
    ],
)
def test_a_quantity_parses_into_the_core_s_unit(value: str | float, resource: str, expected: int) -> None:
    assert parse_quantity(value, resource=resource) == expected
    assert parse_quantity(value, resource=resource) == expected  # the cached answer is the same


@pytest.mark.parametrize("value", ["", "1.2.3", "ten", "5Xi", True, "-1", -2])
def test_a_bad_quantity_is_rejected_every_time_naming_the_resource(value: object) -> None:
    for _ in range(2):  # a failure is never cached as an answer
        with pytest.raises(QuantityError, match=r"requests\.memory"):
            parse_quantity(value, resource="requests.memory")  # type: ignore[arg-type]


def test_the_same_text_for_two_resources_gives_each_its_unit() -> None:
    assert parse_quantity("2", resource="cpu") == 2000
    assert parse_quantity("2", resource="memory") == 2
