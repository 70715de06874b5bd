"""The termination queue over SQS: send termination requests, and back off a request whose node still drains.

:class:`SqsTerminationQueue` implements :class:`~nodesmith.core.ports.TerminationQueue` (``SendMessageBatch``,
ten entries a call; on a FIFO queue with one message group per NodeClaim and a deduplication id per
request) and :meth:`~SqsTerminationQueue.retry_after`, which sets a received message's
visibility (``ChangeMessageVisibilityBatch``) so SQS delivers it again after the given seconds rather than
after the queue's visibility timeout: that is the backoff between drain rounds (AWS Lambda developer guide,
"Implementing partial batch responses"; the record is also reported as a batch item failure). The client is
created on first use: no I/O at import or construction.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from nodesmith.adapters.aws import clients

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nodesmith.core.termination import TerminationRequest

__all__ = ["MAX_VISIBILITY_SECONDS", "SqsTerminationQueue"]

_log = logging.getLogger(__name__)

MAX_VISIBILITY_SECONDS = 43_200
"""SQS's largest visibility timeout (12 hours)."""

_BATCH = 10
"""Entries per ``SendMessageBatch`` / ``ChangeMessageVisibilityBatch`` call (SQS's limit)."""


class SqsTerminationQueue:
    """The termination queue at ``queue_url``; ``client`` is a boto3 SQS client (default: the shared one)."""

    def __init__(self, *, queue_url: str, client: Any | None = None, region: str | None = None) -> None:
        if not queue_url:
            raise ValueError("SqsTerminationQueue needs a queue URL (NODESMITH_TERMINATION_QUEUE_URL)")
        self.queue_url = queue_url
        self._client = client
        self._region = region

    def _sqs(self) -> Any:
        if self._client is None:
            self._client = clients.client("sqs", region=self._region)
        return self._client

    @property
    def fifo(self) -> bool:
        """Whether the queue is FIFO (its name ends in ``.fifo``, as SQS requires)."""
        return self.queue_url.endswith(".fifo")

    def _entry(self, n: int, request: TerminationRequest) -> dict[str, str]:
        entry = {"Id": str(n), "MessageBody": request.body()}
        if self.fifo:
            entry["MessageGroupId"] = request.group_id()
            entry["MessageDeduplicationId"] = request.deduplication_id()
        return entry

    def send(self, *, requests: Sequence[TerminationRequest]) -> list[str]:
        """Send each request as its own message; returns ``"<nodeclaim>: <why>"`` for each one SQS did not take
        (a refused entry, or a whole call that failed). Never raises.

        On a FIFO queue each message carries the request's group (its NodeClaim) and deduplication id, so SQS
        drops a repeat of a request sent in the last 5 minutes (reported as sent: it is on its way)."""
        problems: list[str] = []
        for start in range(0, len(requests), _BATCH):
            chunk = requests[start : start + _BATCH]
            entries = [self._entry(n, r) for n, r in enumerate(chunk)]
            try:
                answer = self._sqs().send_message_batch(QueueUrl=self.queue_url, Entries=entries)
            except Exception as exc:
                problems += [f"{r.nodeclaim}: SendMessageBatch failed: {exc}" for r in chunk]
                continue
            sent = {str(e.get("Id")) for e in answer.get("Successful") or []}
            failed = {str(f.get("Id")): f for f in answer.get("Failed") or []}
            for n, request in enumerate(chunk):
                if str(n) in failed:
                    problems.append(
                        f"{request.nodeclaim}: {failed[str(n)].get('Code')}: {failed[str(n)].get('Message')}"
                    )
                elif str(n) not in sent:
                    problems.append(f"{request.nodeclaim}: SendMessageBatch did not report the entry")
        return problems

    def retry_after(self, delays: Sequence[tuple[str, int]]) -> int:
        """Make each received message ``(receipt_handle, seconds)`` visible again after its seconds (0..43,200).

        Best effort: a refused entry or call is logged (WARNING), never raised; that message then keeps the
        queue's own visibility timeout, a longer wait but no loss. Returns how many SQS changed.
        """
        entries = [(h, max(0, min(MAX_VISIBILITY_SECONDS, int(s)))) for h, s in delays if h]
        changed = 0
        for start in range(0, len(entries), _BATCH):
            chunk = [
                {"Id": str(n), "ReceiptHandle": h, "VisibilityTimeout": s}
                for n, (h, s) in enumerate(entries[start : start + _BATCH])
            ]
            try:
                answer = self._sqs().change_message_visibility_batch(QueueUrl=self.queue_url, Entries=chunk)
            except Exception as exc:
                _log.warning("ChangeMessageVisibilityBatch failed", extra={"error": str(exc), "entries": len(chunk)})
                continue
            changed += len(answer.get("Successful") or [])
            for failure in answer.get("Failed") or []:
                _log.warning("ChangeMessageVisibility refused", extra={"code": failure.get("Code")})
        return changed
