"""``InterruptionQueue``: send continuation messages to the interruption queue (SQS ``SendMessage``,
``SendMessageBatch`` for a burst's hand-offs) and change received messages' visibility.

A drain that outlives one invocation is continued by a message with a delay (``DelaySeconds``,
0..900 s) rather than by sleeping in a Lambda (``interruption-peers.md`` §2.4, §6.3; Yelp
clusterman re-enqueues drains the same way). The client is created on first use.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from nodesmith.adapters.aws import clients

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

_log = logging.getLogger(__name__)

__all__ = ["MAX_DELAY_SECONDS", "MAX_VISIBILITY_SECONDS", "InterruptionQueue"]

MAX_DELAY_SECONDS = 900
"""SQS's largest ``DelaySeconds``."""

MAX_VISIBILITY_SECONDS = 43_200
"""SQS's largest visibility timeout (12 hours)."""

_BATCH = 10
"""Entries per ``SendMessageBatch`` / ``ChangeMessageVisibilityBatch`` call (SQS's limit)."""


class InterruptionQueue:
    """The interruption queue at ``queue_url``; ``client`` is a boto3 SQS client (default: the shared one)."""

    def __init__(self, *, queue_url: str, client: Any | None = None, region: str | None = None) -> None:
        if not queue_url:
            raise ValueError("InterruptionQueue needs a queue URL (NODESMITH_INTERRUPTION_QUEUE_URL)")
        self.queue_url = queue_url
        self._client = client
        self._region = region

    def send(self, body: Mapping[str, Any], delay_seconds: int) -> str:
        """Send ``body`` as JSON, visible after ``delay_seconds`` (clamped to 0..900); returns the message id.

        Raises botocore's ``ClientError`` when SQS refuses (the caller fails the record so SQS
        delivers the original again).
        """
        if self._client is None:
            self._client = clients.client("sqs", region=self._region)
        delay = max(0, min(MAX_DELAY_SECONDS, int(delay_seconds)))
        answer = self._client.send_message(
            QueueUrl=self.queue_url, MessageBody=json.dumps(body, separators=(",", ":")), DelaySeconds=delay
        )
        return str(answer.get("MessageId", ""))

    def send_batch(self, messages: Sequence[tuple[Mapping[str, Any], int]]) -> list[str | None]:
        """Send each ``(body, delay_seconds)`` like :meth:`send`, ten per ``SendMessageBatch`` call.

        Returns one entry per message, in order: None when SQS took it, else why it did not (the
        entry's error code and message, or the whole call's error). Never raises: the caller fails
        exactly the records whose messages were not sent, so SQS delivers those originals again.
        """
        if self._client is None:
            self._client = clients.client("sqs", region=self._region)
        errors: list[str | None] = [None] * len(messages)
        for start in range(0, len(messages), _BATCH):
            chunk = messages[start : start + _BATCH]
            entries = [
                {
                    "Id": str(n),
                    "MessageBody": json.dumps(body, separators=(",", ":")),
                    "DelaySeconds": max(0, min(MAX_DELAY_SECONDS, int(delay))),
                }
                for n, (body, delay) in enumerate(chunk)
            ]
            try:
                answer = self._client.send_message_batch(QueueUrl=self.queue_url, Entries=entries)
            except Exception as exc:
                for n in range(len(chunk)):
                    errors[start + n] = f"SendMessageBatch failed: {exc}"
                continue
            sent = {str(e.get("Id")) for e in answer.get("Successful") or []}
            failed = {str(f.get("Id")): f for f in answer.get("Failed") or []}
            for n in range(len(chunk)):
                if str(n) in failed:
                    f = failed[str(n)]
                    errors[start + n] = f"SendMessageBatch refused entry: {f.get('Code')}: {f.get('Message')}"
                elif str(n) not in sent:
                    errors[start + n] = "SendMessageBatch did not report the entry"
        return errors

    def change_visibility(self, receipt_handles: Sequence[str], timeout_seconds: int) -> int:
        """Make the received messages ``receipt_handles`` visible again after ``timeout_seconds`` (0..43200).

        ``ChangeMessageVisibilityBatch`` in calls of 10. Best effort: a refused entry or call is logged
        (WARNING) and skipped, never raised, since the messages then keep the queue's own visibility
        timeout. Returns how many messages SQS changed.
        """
        if self._client is None:
            self._client = clients.client("sqs", region=self._region)
        timeout = max(0, min(MAX_VISIBILITY_SECONDS, int(timeout_seconds)))
        handles = [h for h in receipt_handles if h]
        changed = 0
        for start in range(0, len(handles), _BATCH):
            entries = [
                {"Id": str(n), "ReceiptHandle": h, "VisibilityTimeout": timeout}
                for n, h in enumerate(handles[start : start + _BATCH])
            ]
            try:
                answer = self._client.change_message_visibility_batch(QueueUrl=self.queue_url, Entries=entries)
            except Exception as exc:  # best effort: the queue's visibility timeout still applies
                _log.warning("ChangeMessageVisibilityBatch failed", extra={"error": str(exc), "entries": len(entries)})
                continue
            changed += len(answer.get("Successful") or [])
            for failure in answer.get("Failed") or []:
                _log.warning(
                    "ChangeMessageVisibility refused",
                    extra={"code": failure.get("Code"), "reason": failure.get("Message")},
                )
        return changed
