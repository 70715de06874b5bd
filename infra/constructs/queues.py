"""What the interruption and termination queues share: the alarm on their dead-letter queue.

A message on either DLQ means a node may not have been handled (an interruption never cordoned, a drain
that never finished), so one message is enough to page: the alarm fires when the DLQ's
``ApproximateNumberOfMessagesVisible`` maximum over a minute is at least 1; no data (an empty queue sends
none) is not breaching.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch

if TYPE_CHECKING:
    from aws_cdk import aws_sqs as sqs
    from constructs import Construct

__all__ = ["dead_letter_alarm"]


def dead_letter_alarm(scope: Construct, dead_letter_queue: sqs.IQueue, *, description: str) -> cloudwatch.Alarm:
    """The ``DeadLetterQueueNotEmpty`` alarm of ``dead_letter_queue``, in ``scope``; ``description`` tells the
    on-call engineer what the messages mean and what to do."""
    return cloudwatch.Alarm(
        scope,
        "DeadLetterQueueNotEmpty",
        alarm_description=description,
        metric=dead_letter_queue.metric_approximate_number_of_messages_visible(
            period=Duration.minutes(1), statistic="Maximum"
        ),
        threshold=1,
        evaluation_periods=1,
        comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
    )
