"""``karpenter.sh/do-not-disrupt`` reads as Karpenter's ``IsDoNotDisruptActive`` reads it
(``[core]:pkg/utils/pod/scheduling.go``): exactly ``"true"``, or a positive Go ``time.ParseDuration`` counted from
the pod's ``status.startTime``; any other value is ignored and reported. On a Node only ``"true"`` counts."""

from __future__ import annotations

import pytest

from nodesmith.core.do_not_disrupt import do_not_disrupt, node_blocks_disruption
from nodesmith.core.durations import parse_go_duration
from nodesmith.core.model import Pod

NOW = 100_000.0


def pod(value: str | None, *, created: float = NOW - 86_400, started: float | None = NOW - 60) -> Pod:
    annotations = {} if value is None else {"karpenter.sh/do-not-disrupt": value}
    return Pod(namespace="default", name="p", annotations=annotations, creation_timestamp=created, start_time=started)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2m", 120.0),
        ("1h30m", 5400.0),
        ("300ms", 0.3),
        ("2.5h", 9000.0),
        (".5s", 0.5),
        ("1.s", 1.0),
        ("1h1m1s1ms1us1ns", 3661.001001001),
        ("1\u00b5s", 1e-6),
        ("1\u03bcs", 1e-6),
        ("+5m", 300.0),
        ("-5m", -300.0),
        ("0", 0.0),
    ],
)
def test_go_durations_parse(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "1d", "true", "5 m", " 5m", "m", ".s", "1h-5m", "5M"])
def test_what_go_refuses_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="time: "):
        parse_go_duration(text)


def test_true_protects_for_as_long_as_it_is_set() -> None:
    verdict = do_not_disrupt(pod("true", started=NOW - 10 * 86_400), now=NOW)
    assert verdict.active and verdict.until is None and verdict.invalid is None


def test_a_duration_counts_from_the_start_time_not_the_creation() -> None:
    verdict = do_not_disrupt(pod("2m", created=NOW - 3600, started=NOW - 60), now=NOW)
    assert verdict.active and verdict.until == NOW + 60


def test_an_expired_duration_no_longer_protects() -> None:
    verdict = do_not_disrupt(pod("2m", started=NOW - 121), now=NOW)
    assert not verdict.active and verdict.until == NOW - 1


def test_a_pod_not_started_yet_stays_protected() -> None:
    assert do_not_disrupt(pod("2m", started=None), now=NOW).active


@pytest.mark.parametrize("value", ["True", "false", "yes", "0s", "-5m", "1d", "forever"])
def test_any_other_value_is_ignored_and_says_why(value: str) -> None:
    verdict = do_not_disrupt(pod(value), now=NOW)
    assert not verdict.active and verdict.invalid and verdict.value == value


def test_no_annotation_no_protection() -> None:
    assert do_not_disrupt(pod(None), now=NOW) == do_not_disrupt(pod(None), now=NOW)
    assert not do_not_disrupt(pod(None), now=NOW).active


def test_on_a_node_only_true_blocks() -> None:
    assert node_blocks_disruption({"karpenter.sh/do-not-disrupt": "true"})
    for value in ("True", "5m", "false", ""):
        assert not node_blocks_disruption({"karpenter.sh/do-not-disrupt": value})
