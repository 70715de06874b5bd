"""The pure rules behind interruption and termination (``core/interruption.py``, ``core/termination.py``): which
messages and instances are ours to act on, when a node must be gone, what a termination request may carry, and
how long a drain waits between rounds."""

from __future__ import annotations

import json

import pytest

from nodesmith.core.interruption import (
    Action,
    MessageKind,
    judge_instance,
    judge_message,
    not_ours,
    parse_message,
    spot_deadline,
)
from nodesmith.core.ports import Instance
from nodesmith.core.termination import (
    REQUESTED_AT_ANNOTATION,
    TERMINATION_REASON_ANNOTATION,
    TERMINATION_TIMESTAMP_ANNOTATION,
    MalformedRequestError,
    TerminationRequest,
    parse_request,
    request_annotations,
    retry_after_seconds,
    termination_deadline,
)
from nodesmith.core.timestamps import from_rfc3339, to_rfc3339

ACCOUNT, REGION, IID = "123456789012", "us-west-2", "i-1234567890abcdef0"
OURS = {"kubernetes.io/cluster/demo": "owned", "karpenter.sh/nodepool": "default"}


def message(kind: str = "EC2 Spot Instance Interruption Warning", **detail: str) -> object:
    body = {
        "version": "0",
        "id": "e-1",
        "detail-type": kind,
        "source": "aws.ec2",
        "account": ACCOUNT,
        "time": "2026-11-22T06:00:00Z",
        "region": REGION,
        "resources": [],
        "detail": {"instance-id": IID, **detail},
    }
    return parse_message(json.dumps(body))


def instance(
    *, tags: dict[str, str] = OURS, state: str = "running", capacity_type: str = "spot", reservation_id: str = ""
) -> Instance:
    return Instance(IID, "m5.large", "us-west-2a", capacity_type, state, 0.0, tags=tags, reservation_id=reservation_id)


RESERVATION_WARNING = "EC2 Capacity Reservation Instance Interruption Warning"


def test_only_owned_instances_launched_for_a_nodepool_are_ours() -> None:
    assert not_ours(OURS, "demo") == ""
    assert not_ours({**OURS, "kubernetes.io/cluster/demo": "shared"}, "demo") == "not_owned"
    assert not_ours({"kubernetes.io/cluster/other": "owned", "karpenter.sh/nodepool": "x"}, "demo") == "not_owned"
    assert not_ours({"kubernetes.io/cluster/demo": "owned"}, "demo") == "no_nodepool_tag"
    assert not_ours({"kubernetes.io/cluster/demo": "owned", "karpenter.sh/nodepool": ""}, "demo") == "no_nodepool_tag"


def test_a_message_from_elsewhere_is_ignored_before_anything_is_read() -> None:
    msg = message()
    assert (
        judge_message(msg, account="210987654321", region=REGION, rebalance_action="cordon").ignored
        == "foreign_account"
    )
    assert (
        judge_message(msg, account=ACCOUNT, region="eu-west-1", rebalance_action="cordon").ignored == "foreign_region"
    )
    verdict = judge_message(msg, account=ACCOUNT, region=REGION, rebalance_action="cordon")
    assert (verdict.ignored, verdict.action, verdict.removing, verdict.reason) == (
        "",
        Action.CORDON_AND_DRAIN,
        True,
        "SpotInterrupted",
    )


@pytest.mark.parametrize(
    ("setting", "action", "removing"),
    [
        ("ignore", Action.NONE, False),
        ("event", Action.EVENT_ONLY, False),
        ("cordon", Action.CORDON, False),
        ("drain", Action.CORDON_AND_DRAIN, True),
    ],
)
def test_a_rebalance_recommendation_follows_the_setting(setting: str, action: Action, removing: bool) -> None:
    verdict = judge_message(
        message("EC2 Instance Rebalance Recommendation"), account=ACCOUNT, region=REGION, rebalance_action=setting
    )
    assert (verdict.action, verdict.removing, verdict.ignored) == (
        action,
        removing,
        "action_none" if setting == "ignore" else "",
    )


@pytest.mark.parametrize(
    ("msg", "found", "claimed", "why"),
    [
        (message(), None, True, "unknown_instance"),
        (message(), instance(tags={"kubernetes.io/cluster/demo": "owned"}), True, "no_nodepool_tag"),
        (message(), instance(), False, "no_nodeclaim"),
        (message(), instance(capacity_type="on-demand"), True, "not_spot"),
        (message("EC2 Instance State-change Notification", state="terminated"), instance(), True, "state_mismatch"),
        (
            message("EC2 Instance State-change Notification", state="stopping"),
            instance(state="pending"),
            True,
            "state_mismatch",
        ),
        (
            message("EC2 Instance State-change Notification", state="shutting-down"),
            instance(state="terminated"),
            True,
            "",
        ),
        (message(), instance(), True, ""),
        (message(RESERVATION_WARNING, **{"instance-action": "terminate"}), instance(), True, "not_reserved"),
        (
            message(RESERVATION_WARNING, **{"instance-action": "terminate"}),
            instance(capacity_type="reserved", reservation_id="cr-0i"),
            True,
            "",
        ),
    ],
    ids=[
        "unknown",
        "managed-node-group",
        "no-nodeclaim",
        "on-demand",
        "forged-terminated",
        "forged-stopping",
        "confirmed",
        "ours",
        "reservation-warning-for-spot",
        "reservation-warning-confirmed",
    ],
)
def test_an_instance_is_judged_on_what_ec2_and_the_cluster_say(
    msg: object, found: object, claimed: bool, why: str
) -> None:
    first = judge_message(msg, account=ACCOUNT, region=REGION, rebalance_action="cordon")
    verdict = judge_instance(first, msg, instance=found, has_nodeclaim=claimed, cluster_name="demo", received_at=1000.0)
    assert verdict.ignored == why
    assert (verdict.action is Action.NONE) == bool(why)


def test_a_capacity_reservation_warning_drains_and_removes_the_node_without_a_deadline() -> None:
    """Karpenter cordons and drains on it and deletes the NodeClaim; its ``instance-termination-time`` is the
    sender's word, so the drain keeps the usual rules (no forced deadline)."""
    msg = message(RESERVATION_WARNING, **{"instance-action": "terminate", "instance-termination-time": "2026-11-22"})
    first = judge_message(msg, account=ACCOUNT, region=REGION, rebalance_action="ignore")
    verdict = judge_instance(
        first, msg, instance=instance(capacity_type="reserved", reservation_id="cr-0i"), has_nodeclaim=True,
        cluster_name="demo", received_at=1000.0,
    )  # fmt: skip
    assert verdict.action is Action.CORDON_AND_DRAIN and verdict.removing
    assert verdict.reason == "CapacityReservationInstanceInterrupted" and verdict.deadline is None


def test_a_spot_deadline_counts_from_our_receipt_never_the_events_time() -> None:
    msg = message()
    assert msg.kind is MessageKind.SPOT_INTERRUPTED
    first = judge_message(msg, account=ACCOUNT, region=REGION, rebalance_action="cordon")
    verdict = judge_instance(
        first, msg, instance=instance(), has_nodeclaim=True, cluster_name="demo", received_at=2_000_000_000.0
    )
    assert verdict.deadline == spot_deadline(2_000_000_000.0) == 2_000_000_120.0


def test_a_request_carries_ids_only_and_refuses_anything_else() -> None:
    request = parse_request('{"nodeclaim": "default-abc12", "instanceId": "i-0123456789abcdef0", "reason": "Drifted"}')
    assert request == TerminationRequest(nodeclaim="default-abc12", instance_id="i-0123456789abcdef0", reason="Drifted")
    assert parse_request(request.body()) == request
    for bad, where in [
        ('{"nodeclaim": "a", "instanceId": "i-0123456789abcdef0", "reason": "Drifted", "deadline": 0}', "deadline"),
        ('{"nodeclaim": "a", "instanceId": "vol-0123", "reason": "Drifted"}', "instanceId"),
        ('{"nodeclaim": "A/B", "instanceId": "", "reason": "Drifted"}', "nodeclaim"),
        ('{"nodeclaim": "a", "instanceId": "", "reason": "Drifted; rm -rf"}', "reason"),
        ("[]", "<root>"),
        ("x" * 2000, "characters"),
    ]:
        with pytest.raises(MalformedRequestError, match=where):
            parse_request(bad)


def test_a_request_keeps_the_first_reason_and_the_earliest_deadline() -> None:
    first = request_annotations(reason="Drifted", now=1000.0, deadline=None)
    assert first == {REQUESTED_AT_ANNOTATION: to_rfc3339(1000.0), TERMINATION_REASON_ANNOTATION: "Drifted"}
    spot = request_annotations(reason="SpotInterrupted", now=1010.0, deadline=1130.4, current=first)
    assert spot[TERMINATION_REASON_ANNOTATION] == "Drifted"
    assert from_rfc3339(spot[TERMINATION_TIMESTAMP_ANNOTATION]) == 1131.0  # whole seconds, never earlier
    later = request_annotations(reason="SpotInterrupted", now=1020.0, deadline=1200.0, current={**first, **spot})
    assert from_rfc3339(later[TERMINATION_TIMESTAMP_ANNOTATION]) == 1131.0


def test_the_deadline_is_the_earlier_of_the_notice_and_the_termination_grace_period() -> None:
    notice = {TERMINATION_TIMESTAMP_ANNOTATION: to_rfc3339(5000.0)}
    assert termination_deadline(annotations={}, deletion_timestamp=1000.0, grace_period_seconds=None) is None
    assert termination_deadline(annotations={}, deletion_timestamp=1000.0, grace_period_seconds=600.0) == 1600.0
    assert termination_deadline(annotations=notice, deletion_timestamp=1000.0, grace_period_seconds=600.0) == 1600.0
    assert termination_deadline(annotations=notice, deletion_timestamp=1000.0, grace_period_seconds=None) == 5000.0


def test_rounds_back_off_exponentially_but_never_past_what_falls_due() -> None:
    waits = [
        retry_after_seconds(attempt=n, now=0.0, next_due=None, initial_seconds=2.0, max_seconds=30.0)
        for n in range(1, 8)
    ]
    assert waits == [2, 4, 8, 16, 30, 30, 30]
    assert retry_after_seconds(attempt=6, now=100.0, next_due=105.2, initial_seconds=2.0, max_seconds=30.0) == 6
    assert retry_after_seconds(attempt=6, now=100.0, next_due=90.0, initial_seconds=2.0, max_seconds=30.0) == 1
