"""Fixtures for the state-table tests: moto (in-process ``mock_aws``) with the Nodesmith state table.

The table is created exactly as ``infra/constructs/reconcile.py`` declares it: string ``pk``/``sk``,
on-demand billing, TTL on ``expires_at``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import boto3
import pytest
from moto import mock_aws

from nodesmith.adapters.aws.clients import reset_clients
from nodesmith.adapters.aws.state import DynamoStateStore

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

REGION = "us-east-1"
TABLE = "nodesmith-state"


def create_state_table(client: Any, name: str = TABLE) -> str:
    """Create the state table (pk/sk strings, TTL on ``expires_at``); returns its name."""
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    client.update_time_to_live(TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": "expires_at"})
    return name


_WRITES = ("put_item", "update_item", "delete_item", "transact_write_items")
"""moto's DynamoDB writes: each checks its condition, then writes, with no lock in between."""


def _atomic_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make moto's conditional writes atomic, as DynamoDB's are: without this, threads racing for one
    lease could all pass the condition check before any of them wrote."""
    import threading

    from moto.dynamodb.models import DynamoDBBackend

    lock = threading.RLock()
    for name in _WRITES:
        write = getattr(DynamoDBBackend, name)

        def locked(self: Any, *args: Any, _write: Any = write, **kwargs: Any) -> Any:
            with lock:
                return _write(self, *args, **kwargs)

        monkeypatch.setattr(DynamoDBBackend, name, locked)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """moto for every boto3 client created inside the test, with throwaway credentials and DynamoDB's
    atomic conditional writes."""
    _atomic_writes(monkeypatch)
    empty = tmp_path / "aws-empty.ini"
    empty.write_text("")
    for key in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_ENDPOINT_URL_PRICING"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty))
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    reset_clients()
    with mock_aws():
        yield
    reset_clients()


@pytest.fixture
def table(aws: None) -> str:
    """The name of a fresh state table in moto."""
    return create_state_table(boto3.client("dynamodb", region_name=REGION))


@pytest.fixture
def store(table: str) -> DynamoStateStore:
    """A :class:`DynamoStateStore` on the fresh table."""
    return DynamoStateStore(table_name=table, region=REGION)
