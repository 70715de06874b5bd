"""``InterruptionQueue``: send continuation messages to the interruption queue (SQS ``SendMessage``).

A drain that outlives one invocation is continued by a message with a delay (``DelaySeconds``,
0..900 s) rather than by sleeping in a Lambda (``interruption-peers.md`` §2.4, §6.3; Yelp
clusterman re-enqueues drains the same way). The client is created on first use.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from nodesmith.adapters.aws import clients

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["MAX_DELAY_SECONDS", "InterruptionQueue"]

MAX_DELAY_SECONDS = 900
"""SQS's largest ``DelaySeconds``."""


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
