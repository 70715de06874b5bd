"""Which drains of an interruption batch missed their deadline (the ``DrainsMissedDeadline`` metric).

A spot interruption warning gives two minutes (``deadline`` = event time + 120 s, see
:mod:`nodesmith.core.interruption`); after that EC2 reclaims the instance whether or not its pods
have left. A drain *missed its deadline* when pods were still on the node at that moment: it
finished after the deadline, or it was still unfinished when the invocation reported and the
deadline had passed. The metric is what the "drains missing their deadline" alarm reads: the pods
of such a node were killed by EC2 instead of being evicted through their PodDisruptionBudgets.

Counted once per drain: an original message counts whenever its drain ends late (also when it
arrived late, the queue age is part of the miss); a continuation of an unfinished drain counts only
if the deadline passed during its own invocation, so a drain carried over several invocations is
not counted again by each. Replayed outcomes (idempotency) are never counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nodesmith.services.interrupt_batch import BatchItem, ItemResult

__all__ = ["MissedDeadline", "missed_deadlines"]


@dataclass(frozen=True, slots=True)
class MissedDeadline:
    """One drain that missed its deadline. Times are epoch seconds; ``late_seconds`` >= 0.

    ``finished_at`` is None when the drain was still unfinished at ``reported_at``.
    """

    event_id: str
    instance_id: str
    node_name: str | None
    nodeclaim_name: str | None
    deadline: float
    finished_at: float | None
    late_seconds: float


def missed_deadlines(
    *,
    items: Sequence[BatchItem],
    results: Sequence[ItemResult],
    started_at: float,
    drain_started_at: float,
    reported_at: float,
) -> list[MissedDeadline]:
    """The drains of one batch that missed their message's deadline (see the module docstring).

    ``started_at`` is the invocation's start, ``drain_started_at`` when its drain phase began (after
    cordon and replacement) and ``reported_at`` now, all epoch seconds. A drain's end is
    ``drain_started_at + duration``. Items without a deadline (everything but spot interruption
    warnings) and instances that were not drained here are skipped.
    """
    by_id = {item.item_id: item for item in items}
    missed: list[MissedDeadline] = []
    for result in results:
        item = by_id.get(result.item_id)
        if item is None or result.outcome is None or item.message.deadline is None:
            continue
        deadline = item.message.deadline
        for instance in result.outcome.instances:
            drain = instance.drain
            if drain is None or instance.replayed:
                continue
            finished_at = drain_started_at + drain.duration_seconds if drain.complete else None
            end = finished_at if finished_at is not None else reported_at
            if end <= deadline:
                continue
            if item.attempt > 0 and deadline < started_at:
                continue  # an earlier invocation of this drain already saw the deadline pass
            missed.append(
                MissedDeadline(
                    event_id=item.message.event_id,
                    instance_id=instance.instance_id,
                    node_name=instance.node_name,
                    nodeclaim_name=instance.nodeclaim_name,
                    deadline=deadline,
                    finished_at=finished_at,
                    late_seconds=end - deadline,
                )
            )
    return missed
