"""Wake the reconcile Lambda for a provisioning pass now: an asynchronous ``Invoke`` (``InvocationType=Event``).

An interruption batch that finds the reconcile lease free does not run the replacement pass in its own
invocation, whose 20 s timeout a pass over a large cluster can outlast (a pass killed at the timeout
launches nothing, and the next batch's would be killed the same way); it wakes the reconcile function
(900 s timeout, reserved concurrency 1) with :func:`provision_event` instead. The reconcile handler
recognises the event with :func:`provision_after` and runs a provisioning pass under the lease, and
another for every batch that asks it to meanwhile. Lambda queues asynchronous events and retries
throttled ones (reserved concurrency 1), so a wake is not lost while a scheduled pass runs.
"""

from __future__ import annotations

import json
import math
from typing import Any

from nodesmith.adapters.aws import clients

__all__ = ["PROVISION_EVENT_KEY", "ReconcileWaker", "provision_after", "provision_event"]

PROVISION_EVENT_KEY = "nodesmith-provision"
"""The key of the reconcile function's wake event: ``{"nodesmith-provision": {"after": <epoch seconds>}}``."""


def provision_event(after: float) -> dict[str, Any]:
    """The wake event asking for a provisioning pass whose snapshot starts after ``after`` (epoch seconds)."""
    return {PROVISION_EVENT_KEY: {"after": float(after)}}


def provision_after(event: Any) -> float | None:
    """``after`` (epoch seconds) of a wake event, or None for any other event (a schedule tick, ``{}``).

    Raises ``ValueError`` for a wake event whose ``after`` is not a finite number.
    """
    if not isinstance(event, dict) or PROVISION_EVENT_KEY not in event:
        return None
    body = event[PROVISION_EVENT_KEY]
    after = body.get("after") if isinstance(body, dict) else None
    if isinstance(after, bool) or not isinstance(after, int | float) or not math.isfinite(after):
        raise ValueError(f"{PROVISION_EVENT_KEY}.after must be epoch seconds, not {after!r}")
    return float(after)


class ReconcileWaker:
    """Invokes ``function_name`` asynchronously with :func:`provision_event`; ``client`` is a boto3 Lambda
    client (default: the shared one, created on first use)."""

    def __init__(self, *, function_name: str, client: Any | None = None, region: str | None = None) -> None:
        if not function_name:
            raise ValueError("ReconcileWaker needs the reconcile function's name (NODESMITH_RECONCILE_FUNCTION)")
        self.function_name = function_name
        self._client = client
        self._region = region

    def wake(self, after: float) -> None:
        """Queue one wake event (Lambda answers 202 once it holds the event).

        Raises botocore's ``ClientError`` when Lambda refuses it (the caller falls back to its own pass).
        """
        if self._client is None:
            self._client = clients.client("lambda", region=self._region)
        self._client.invoke(
            FunctionName=self.function_name,
            InvocationType="Event",
            Payload=json.dumps(provision_event(after)).encode(),
        )
