"""``DynamoStateStore``: the :class:`nodesmith.core.ports.StateStore` port on the DynamoDB state table.

The table (``infra/constructs/reconcile.py``) has string keys ``pk``/``sk`` and DynamoDB TTL on
``expires_at`` (epoch seconds, a Number). Items, one single-table design:

==========================  =========================  ===========================================
pk                          sk                         attributes
==========================  =========================  ===========================================
``lease#<name>``            ``lease``                  ``holder``, ``acquired_at``, ``expires_at``
``offering``                ``<type>#<zone>#<ct>``     ``instance_type``, ``zone``, ``capacity_type``,
                                                       ``reason``, ``expires_at``
==========================  =========================  ===========================================

Leases are conditional writes (the DynamoDB lock pattern, ``interruption-peers.md`` §4): an
``UpdateItem`` takes the lease only when ``attribute_not_exists(pk) OR expires_at < :now OR holder = :me``,
so of two callers racing for a free lease exactly one wins. TTL deletion lags (up to days), so
every read also checks ``expires_at`` itself. All offering marks live under one partition key, so
listing them is a single ``Query`` (there are at most a few hundred at a time, each for 3 minutes).

Uses the low-level client (``clients.client("dynamodb")``, created on first use, never at import).
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

from nodesmith.adapters.aws import clients
from nodesmith.core.ports import LeaseInfo, OfferingMark

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["DynamoStateStore"]

LOG = logging.getLogger(__name__)

_LEASE_SK = "lease"
_OFFERING_PK = "offering"
_CONDITION_FAILED = "ConditionalCheckFailedException"


def _n(value: float) -> dict[str, str]:
    return {"N": repr(float(value)) if not float(value).is_integer() else str(int(value))}


def _s(value: str) -> dict[str, str]:
    return {"S": value}


def _ttl(epoch: float) -> dict[str, str]:
    """A TTL value: whole epoch seconds, rounded up so an item never expires early."""
    return {"N": str(math.ceil(epoch))}


def _num(item: Mapping[str, Any], name: str, default: float = 0.0) -> float:
    value = item.get(name)
    return float(value["N"]) if value and "N" in value else default


def _str(item: Mapping[str, Any], name: str) -> str:
    value = item.get(name)
    return str(value["S"]) if value and "S" in value else ""


def _lease(item: Mapping[str, Any] | None, now: float) -> LeaseInfo | None:
    """The lease a state-table item holds at ``now`` (epoch seconds), or None when there is no item, no holder,
    or it has expired."""
    if not item or _num(item, "expires_at") < now or not _str(item, "holder"):
        return None
    return LeaseInfo(
        holder=_str(item, "holder"), acquired_at=_num(item, "acquired_at"), expires_at=_num(item, "expires_at")
    )


def _code(exc: Exception) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


class DynamoStateStore:
    """Leases and unavailable offerings in the DynamoDB table ``table_name``.

    ``client`` is a boto3 DynamoDB client (default: the shared one for ``region``). Every method
    takes keyword arguments; times are epoch seconds. Errors other than a failed lease condition are
    botocore's ``ClientError`` (the caller decides whether the state is essential).
    """

    def __init__(
        self,
        *,
        table_name: str,
        client: Any | None = None,
        region: str | None = None,
    ) -> None:
        if not table_name:
            raise ValueError("DynamoStateStore needs a table name (NODESMITH_STATE_TABLE)")
        self.table_name = table_name
        self._client = client
        self._region = region

    @property
    def client(self) -> Any:
        """The boto3 DynamoDB client (created on first use)."""
        if self._client is None:
            self._client = clients.client("dynamodb", region=self._region)
        return self._client

    # -- leases -----------------------------------------------------------------------------------

    def _lease_key(self, name: str) -> dict[str, dict[str, str]]:
        return {"pk": _s(f"lease#{name}"), "sk": _s(_LEASE_SK)}

    def acquire_lease(self, *, name: str, holder: str, ttl_seconds: float, now: float) -> bool:
        """Take (or extend) lease ``name`` for ``holder`` until ``now + ttl_seconds``; False if someone else has it."""
        try:
            self.client.update_item(
                TableName=self.table_name,
                Key=self._lease_key(name),
                UpdateExpression="SET holder = :me, acquired_at = :now, expires_at = :until",
                ConditionExpression="attribute_not_exists(pk) OR expires_at < :now OR holder = :me",
                ExpressionAttributeValues={":now": _n(now), ":me": _s(holder), ":until": _ttl(now + ttl_seconds)},
            )
        except Exception as exc:
            if _code(exc) == _CONDITION_FAILED:
                return False
            raise
        return True

    def renew_lease(self, *, name: str, holder: str, ttl_seconds: float, now: float) -> bool:
        """Extend ``holder``'s lease to ``now + ttl_seconds``; False when another holder has it or it is gone."""
        try:
            self.client.update_item(
                TableName=self.table_name,
                Key=self._lease_key(name),
                UpdateExpression="SET expires_at = :until",
                ConditionExpression="holder = :me",
                ExpressionAttributeValues={":until": _ttl(now + ttl_seconds), ":me": _s(holder)},
            )
        except Exception as exc:
            if _code(exc) == _CONDITION_FAILED:
                return False
            raise
        return True

    def release_lease(self, *, name: str, holder: str) -> bool:
        """Delete the lease if ``holder`` has it; False otherwise."""
        try:
            self.client.delete_item(
                TableName=self.table_name,
                Key=self._lease_key(name),
                ConditionExpression="holder = :me",
                ExpressionAttributeValues={":me": _s(holder)},
            )
        except Exception as exc:
            if _code(exc) == _CONDITION_FAILED:
                return False
            raise
        return True

    def lease_holder(self, *, name: str, now: float) -> str | None:
        """The holder of lease ``name`` at ``now`` (strongly consistent read), or None."""
        info = self.lease_info(name=name, now=now)
        return info.holder if info is not None else None

    def lease_info(self, *, name: str, now: float) -> LeaseInfo | None:
        """Holder, acquisition and expiry of lease ``name`` at ``now`` (strongly consistent read), or None."""
        item = self.client.get_item(TableName=self.table_name, Key=self._lease_key(name), ConsistentRead=True).get(
            "Item"
        )
        return _lease(item, now)

    # -- unavailable offerings --------------------------------------------------------------------

    def mark_unavailable(
        self, *, instance_type: str, zone: str, capacity_type: str, expires_at: float, reason: str = ""
    ) -> None:
        """Mark (type, zone, capacity type) unavailable until ``expires_at``."""
        self.client.put_item(
            TableName=self.table_name,
            Item={
                "pk": _s(_OFFERING_PK),
                "sk": _s(f"{instance_type}#{zone}#{capacity_type}"),
                "instance_type": _s(instance_type),
                "zone": _s(zone),
                "capacity_type": _s(capacity_type),
                "reason": _s(reason),
                "expires_at": _ttl(expires_at),
            },
        )

    def list_unavailable(self, *, now: float) -> list[OfferingMark]:
        """Every offering whose mark has not expired at ``now`` (one paginated Query)."""
        paginator = self.client.get_paginator("query")
        pages = paginator.paginate(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk",
            FilterExpression="expires_at > :now",
            ExpressionAttributeValues={":pk": _s(_OFFERING_PK), ":now": _n(now)},
        )
        marks: list[OfferingMark] = []
        for page in pages:
            for item in page.get("Items", []):
                marks.append(
                    OfferingMark(
                        instance_type=_str(item, "instance_type"),
                        zone=_str(item, "zone"),
                        capacity_type=_str(item, "capacity_type"),
                        expires_at=_num(item, "expires_at"),
                        reason=_str(item, "reason"),
                    )
                )
        return marks
