"""``DynamoStateStore``: the :class:`nodesmith.core.ports.StateStore` port on the DynamoDB state table.

The table (``infra/constructs/reconcile.py``) has string keys ``pk``/``sk`` and DynamoDB TTL on
``expires_at`` (epoch seconds, a Number). Items, one single-table design:

==========================  =========================  ===========================================
pk                          sk                         attributes
==========================  =========================  ===========================================
``lease#<name>``            ``lease``                  ``holder``, ``acquired_at``, ``expires_at``,
                                                       ``requested_at`` (a pass owed, see below)
``drain#<instance id>``     ``progress``               the :class:`DrainProgress` fields, ``expires_at``
``offering``                ``<type>#<zone>#<ct>``     ``instance_type``, ``zone``, ``capacity_type``,
                                                       ``reason``, ``expires_at``
==========================  =========================  ===========================================

Powertools idempotency records share the table (``pk = idempotency#<function>``), see
``nodesmith.handlers.wiring``.

Leases are conditional writes (the DynamoDB lock pattern, ``interruption-peers.md`` §4): an
``UpdateItem`` takes the lease only when ``attribute_not_exists(pk) OR expires_at < :now OR holder = :me``,
so of two callers racing for a free lease exactly one wins. A caller that finds the lease held asks
the holder for one more pass (``requested_at``, only while the lease is held); the holder's release
is conditional on no request newer than its pass's start, so a request is either seen by the holder
or made on a free lease (and then the caller takes it): none is lost between the two. TTL deletion lags (up to days), so
every read also checks ``expires_at`` itself. All offering marks live under one partition key, so
listing them is a single ``Query`` (there are at most a few hundred at a time, each for 3 minutes).

Uses the low-level client (``clients.client("dynamodb")``, created on first use, never at import).
"""

from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING, Any

from nodesmith.adapters.aws import clients
from nodesmith.core.ports import DrainProgress, LeaseInfo, OfferingMark

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

__all__ = ["BATCH_WRITE_MAX_ITEMS", "UNPROCESSED_BACKOFF_SECONDS", "UNPROCESSED_RETRIES", "DynamoStateStore"]

LOG = logging.getLogger(__name__)

_LEASE_SK = "lease"
_DRAIN_SK = "progress"
_OFFERING_PK = "offering"
_CONDITION_FAILED = "ConditionalCheckFailedException"
BATCH_WRITE_MAX_ITEMS = 25
"""Most items one DynamoDB ``BatchWriteItem`` request may write."""
UNPROCESSED_RETRIES = 3
"""How many times :meth:`DynamoStateStore.put_drains` sends unprocessed items again."""
UNPROCESSED_BACKOFF_SECONDS = 0.05
"""Wait before the first of those retries (seconds), doubling for each next one."""


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


def _bool(item: Mapping[str, Any], name: str) -> bool:
    value = item.get(name)
    return bool(value.get("BOOL")) if value else False


def _lease(item: Mapping[str, Any] | None, now: float) -> LeaseInfo | None:
    """The lease a state-table item holds at ``now`` (epoch seconds), or None when there is no item, no holder,
    or it has expired."""
    if not item or _num(item, "expires_at") < now or not _str(item, "holder"):
        return None
    requested = item.get("requested_at")
    return LeaseInfo(
        holder=_str(item, "holder"),
        acquired_at=_num(item, "acquired_at"),
        expires_at=_num(item, "expires_at"),
        requested_at=float(requested["N"]) if requested and "N" in requested else None,
    )


def _drain_item(progress: DrainProgress, expires_at: float) -> dict[str, Any]:
    """The state table item of ``progress``, kept until ``expires_at`` (epoch seconds)."""
    item: dict[str, Any] = {
        "pk": _s(f"drain#{progress.instance_id}"),
        "sk": _s(_DRAIN_SK),
        "event_id": _s(progress.event_id),
        "node_name": _s(progress.node_name),
        "started_at": _n(progress.started_at),
        "updated_at": _n(progress.updated_at),
        "attempts": _n(progress.attempts),
        "evicted": _n(progress.evicted),
        "force_deleted": _n(progress.force_deleted),
        "blocked_responses": _n(progress.blocked_responses),
        "replaced": {"BOOL": progress.replaced},
        "done": {"BOOL": progress.done},
        "expires_at": _ttl(expires_at),
    }
    if progress.deadline is not None:
        item["deadline"] = _n(progress.deadline)
    return item


def _code(exc: Exception) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


class DynamoStateStore:
    """Leases, drain progress and unavailable offerings in the DynamoDB table ``table_name``.

    ``client`` is a boto3 DynamoDB client (default: the shared one for ``region``); ``sleep`` waits between
    retries of unprocessed batch writes (injectable for tests). Every method
    takes keyword arguments; times are epoch seconds. Errors other than a failed lease condition are
    botocore's ``ClientError`` (the caller decides whether the state is essential).
    """

    def __init__(
        self,
        *,
        table_name: str,
        client: Any | None = None,
        region: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not table_name:
            raise ValueError("DynamoStateStore needs a table name (NODESMITH_STATE_TABLE)")
        self.table_name = table_name
        self._client = client
        self._region = region
        self._sleep = sleep

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
            self.client.update_item(  # an update, not a put: a pending pass request survives a re-acquire
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

    def request_pass(self, *, name: str, after: float, now: float) -> bool:
        """Record on the held lease ``name`` that a pass starting after ``after`` is owed; False when it is free.

        One conditional UpdateItem. When its condition fails, the item as it was comes back with the error
        (``ReturnValuesOnConditionCheckFailure=ALL_OLD``; none when there is no lease item) and says which: the
        lease is free, or as late a pass was already asked for (in a burst, most batches' requests), without
        reading the lease again.
        """
        try:
            self.client.update_item(
                TableName=self.table_name,
                Key=self._lease_key(name),
                UpdateExpression="SET requested_at = :after",
                ConditionExpression=(
                    "attribute_exists(holder) AND expires_at >= :now "
                    "AND (attribute_not_exists(requested_at) OR requested_at < :after)"
                ),
                ExpressionAttributeValues={":after": _n(after), ":now": _n(now)},
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except Exception as exc:
            if _code(exc) != _CONDITION_FAILED:
                raise
            info = _lease(getattr(exc, "response", {}).get("Item"), now)  # free, or already asked for as late a pass
            return info is not None and info.requested_at is not None and info.requested_at >= after
        return True

    def release_unless_requested(self, *, name: str, holder: str, since: float) -> bool:
        """Delete ``holder``'s lease unless a pass was requested after ``since``; False when one was."""
        try:
            self.client.delete_item(
                TableName=self.table_name,
                Key=self._lease_key(name),
                ConditionExpression="holder = :me AND (attribute_not_exists(requested_at) OR requested_at <= :since)",
                ExpressionAttributeValues={":me": _s(holder), ":since": _n(since)},
            )
        except Exception as exc:
            if _code(exc) != _CONDITION_FAILED:
                raise
            item = self.client.get_item(TableName=self.table_name, Key=self._lease_key(name), ConsistentRead=True)
            return _str(item.get("Item") or {}, "holder") != holder  # still ours: a pass is owed
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

    # -- drain progress ---------------------------------------------------------------------------

    def get_drain(self, *, instance_id: str) -> DrainProgress | None:
        """The stored drain progress of ``instance_id`` (strongly consistent read), or None."""
        item = self.client.get_item(
            TableName=self.table_name,
            Key={"pk": _s(f"drain#{instance_id}"), "sk": _s(_DRAIN_SK)},
            ConsistentRead=True,
        ).get("Item")
        if not item:
            return None
        deadline = item.get("deadline")
        return DrainProgress(
            instance_id=instance_id,
            event_id=_str(item, "event_id"),
            node_name=_str(item, "node_name"),
            deadline=float(deadline["N"]) if deadline and "N" in deadline else None,
            started_at=_num(item, "started_at"),
            updated_at=_num(item, "updated_at"),
            attempts=int(_num(item, "attempts")),
            evicted=int(_num(item, "evicted")),
            force_deleted=int(_num(item, "force_deleted")),
            blocked_responses=int(_num(item, "blocked_responses")),
            replaced=_bool(item, "replaced"),
            done=_bool(item, "done"),
        )

    def put_drains(self, *, progress: Sequence[DrainProgress], expires_at: float) -> list[str]:
        """Store each of ``progress`` until ``expires_at`` in ``BatchWriteItem`` requests of up to 25 items
        (DynamoDB's limit); of several for one instance the last wins (DynamoDB refuses a request writing one
        key twice).

        Items DynamoDB returns unprocessed (a throttled partition) are sent again after 50 ms, doubling, up
        to :data:`UNPROCESSED_RETRIES` times, as the DynamoDB documentation advises for ``BatchWriteItem``;
        returns the instance ids still unprocessed after that (empty: all written). Raises botocore's
        ``ClientError`` when a request fails as a whole (after botocore's own retries); the requests before
        it were written.
        """
        latest = {p.instance_id: p for p in progress}
        writes = [{"PutRequest": {"Item": _drain_item(p, expires_at)}} for p in latest.values()]
        left: list[str] = []
        for start in range(0, len(writes), BATCH_WRITE_MAX_ITEMS):
            pending = writes[start : start + BATCH_WRITE_MAX_ITEMS]
            for retry in range(UNPROCESSED_RETRIES + 1):
                if retry:
                    self._sleep(UNPROCESSED_BACKOFF_SECONDS * 2 ** (retry - 1))
                answer = self.client.batch_write_item(RequestItems={self.table_name: pending})
                pending = (answer.get("UnprocessedItems") or {}).get(self.table_name) or []
                if not pending:
                    break
            left += [w["PutRequest"]["Item"]["pk"]["S"].split("#", 1)[1] for w in pending]
        if left:
            LOG.warning("drain progress of %d instance(s) left unprocessed by DynamoDB: %s", len(left), left)
        return left

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
