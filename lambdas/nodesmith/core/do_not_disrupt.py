"""``karpenter.sh/do-not-disrupt``: the one reading of the annotation every Nodesmith path uses.

Karpenter reads the pod annotation in ``IsDoNotDisruptActive`` (``[core]:pkg/utils/pod/scheduling.go``,
v1.12+), and every caller goes through it: the disruption candidate filter (``IsDisruptable``,
``statenode.go ValidatePodsDisruptable``), consolidation's moving pods (``IsCurrentlyReschedulable``) and the
terminator's eviction order (``IsEvictable``). The rules:

* absent: no protection;
* exactly ``"true"`` (case-sensitive): protected for as long as it is set;
* a Go ``time.ParseDuration`` value (``"2m"``, ``"1h30m"``, ``"300ms"``, ``"2.5h"``) greater than zero:
  protected until that long after the pod's ``status.startTime`` (not its creation); a pod without a start
  time yet stays protected (Karpenter's fail-safe);
* anything else (``"false"``, ``"True"``, ``"0s"``, ``"-5m"``, ``"1d"``, ...): ignored, as if absent, and
  Karpenter publishes ``InvalidDoNotDisruptAnnotation`` (:data:`INVALID_ANNOTATION_REASON`); Nodesmith posts
  that Event on the pod's Node, naming the pod and the value (:func:`invalid_annotation_message`).

On a Node, the annotation blocks voluntary disruption only when it is exactly ``"true"``
(``[core]:pkg/controllers/state/statenode.go ValidateNodeDisruptable``): :func:`node_blocks_disruption`.

Pure: times are epoch seconds passed in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from nodesmith.core.durations import parse_go_duration

if TYPE_CHECKING:
    from collections.abc import Mapping

    from nodesmith.core.model import Pod

__all__ = [
    "DO_NOT_DISRUPT_ANNOTATION",
    "INVALID_ANNOTATION_REASON",
    "DoNotDisrupt",
    "do_not_disrupt",
    "invalid_annotation_message",
    "node_blocks_disruption",
]

DO_NOT_DISRUPT_ANNOTATION: Final = "karpenter.sh/do-not-disrupt"
INVALID_ANNOTATION_REASON: Final = "InvalidDoNotDisruptAnnotation"
"""The Event reason Karpenter uses for a value it ignores (``[core]:pkg/utils/pod/events.go``)."""


@dataclass(frozen=True, slots=True)
class DoNotDisrupt:
    """How a pod's ``karpenter.sh/do-not-disrupt`` reads at one moment.

    ``active``: the pod is protected now. ``until``: when a duration's protection ends (epoch seconds;
    None for ``"true"``, no start time yet, or no protection). ``invalid``: why the value is ignored (None
    when it is absent or valid); ``value`` is the annotation as written (None when absent).
    """

    active: bool
    until: float | None = None
    invalid: str | None = None
    value: str | None = None


_ABSENT: Final = DoNotDisrupt(active=False)


def do_not_disrupt(pod: Pod, *, now: float) -> DoNotDisrupt:
    """Read ``pod``'s ``karpenter.sh/do-not-disrupt`` at ``now`` (epoch seconds); see the module docstring.

    Whether the pod is running is not looked at here (Karpenter's callers check ``IsActive`` themselves:
    finished and terminating pods are never protected). Raises nothing: a bad value is reported in
    ``invalid``.
    """
    value = pod.annotations.get(DO_NOT_DISRUPT_ANNOTATION)
    if value is None:
        return _ABSENT
    if value == "true":
        return DoNotDisrupt(active=True, value=value)
    try:
        seconds = parse_go_duration(value)
    except ValueError as exc:
        return DoNotDisrupt(active=False, invalid=f'failed to parse "{value}" as a duration: {exc}', value=value)
    if seconds <= 0:
        return DoNotDisrupt(active=False, invalid=f'duration "{value}" must be positive', value=value)
    if pod.start_time is None:
        return DoNotDisrupt(active=True, value=value)
    until = pod.start_time + seconds
    return DoNotDisrupt(active=now < until, until=until, value=value)


def invalid_annotation_message(pod: Pod, verdict: DoNotDisrupt) -> str:
    """The message of the :data:`INVALID_ANNOTATION_REASON` Event posted on ``pod``'s Node."""
    return (
        f'Pod {pod.key} has an invalid {DO_NOT_DISRUPT_ANNOTATION} annotation "{verdict.value}" '
        f"({verdict.invalid}); ignoring the annotation"
    )


def node_blocks_disruption(annotations: Mapping[str, str]) -> bool:
    """True when a Node's annotations block voluntary disruption: ``karpenter.sh/do-not-disrupt`` is exactly
    ``"true"`` (``ValidateNodeDisruptable``); a duration or any other value on a Node has no effect."""
    return annotations.get(DO_NOT_DISRUPT_ANNOTATION) == "true"
