"""The clients read responses' ISO 8601 timestamps without botocore's dateutil parser (175 µs a date),
and give what botocore would: aware datetimes; epoch numbers and zoneless strings still go to botocore."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import botocore.parsers
import pytest
from botocore.utils import parse_timestamp as botocore_parse

from nodesmith.adapters.aws import clients

if TYPE_CHECKING:
    from nodesmith.sim.aws import SeededAws


FORMS = [
    "2026-11-26T21:50:00.000Z",
    "2026-11-26T21:50:00Z",
    "2026-11-26T21:50:00+01:00",
    1795729800,
    "1795729800",
    "2026-11-26T21:50:00",
    "Thu, 26 Nov 2026 21:50:00 GMT",
]


@pytest.mark.parametrize("value", FORMS)
def test_every_timestamp_reads_as_botocore_reads_it(value: Any) -> None:
    ours = clients.parse_timestamp(value)
    assert ours == botocore_parse(value) and ours.utcoffset() == botocore_parse(value).utcoffset()


def test_an_iso_timestamp_with_a_zone_skips_botocore(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("botocore.utils.parse_timestamp", _refuse)
    assert clients.parse_timestamp("2026-11-26T21:50:00.000Z") == datetime(2026, 11, 26, 21, 50, tzinfo=UTC)


def test_what_neither_reads_raises_as_botocore_does() -> None:
    with pytest.raises(ValueError, match="Invalid timestamp"):
        clients.parse_timestamp("next tuesday-ish")


def test_the_clients_parse_with_it(seeded: SeededAws, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(botocore.parsers, "DEFAULT_TIMESTAMP_PARSER", _refuse)  # botocore's own default
    clients.reset_clients()
    ec2 = clients.client("ec2")
    image = ec2.describe_images(Owners=["self", "amazon"])["Images"][0]["ImageId"]
    ec2.run_instances(ImageId=image, InstanceType="m5.large", MinCount=1, MaxCount=1)

    (reservation,) = ec2.describe_instances()["Reservations"]
    launched = reservation["Instances"][0]["LaunchTime"]

    assert isinstance(launched, datetime) and launched.tzinfo is not None


def _refuse(value: Any) -> datetime:
    raise AssertionError(f"botocore's parser was used for {value!r}")
