"""parse_message reads every golden EventBridge event right, ignores what we do not act on, and only ever
raises MalformedEventError (hypothesis fuzz); action_for follows Karpenter plus the rebalance setting. A message
is a claim: it carries no deadline (one is counted from our queue's receipt) and must name its account and
region, which the handler compares with its own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodesmith.core.interruption import (
    Action,
    MalformedEventError,
    MessageKind,
    action_for,
    parse_message,
)

EVENTS = Path(__file__).resolve().parents[1] / "events"
EVENT_TIME = 1_795_327_200.0  # 2026-11-22T06:00:00Z


def golden(name: str) -> str:
    return (EVENTS / name).read_text()


def golden_json(name: str) -> dict[str, Any]:
    return json.loads(golden(name))


# --- kinds -----------------------------------------------------------------------------------


def test_spot_warning_names_the_instance_its_account_and_region() -> None:
    msg = parse_message(golden("spot_interruption_warning.json"))
    assert msg.kind is MessageKind.SPOT_INTERRUPTED
    assert msg.instance_ids == ("i-1234567890abcdef0",)
    assert msg.event_id == "12345678-1234-1234-1234-123456789012"
    assert msg.event_time == EVENT_TIME
    assert (msg.account, msg.region) == ("123456789012", "us-west-2")
    assert msg.instance_action == "terminate"
    assert not hasattr(msg, "deadline")  # a sender's clock decides nothing


@pytest.mark.parametrize(
    ("field", "value", "where"),
    [
        ("account", None, "account"),
        ("account", "12345", "account"),
        ("region", "", "region"),
        ("region", None, "region"),
    ],
)
def test_an_envelope_without_a_proper_account_or_region_is_malformed(field: str, value: Any, where: str) -> None:
    doc = golden_json("spot_interruption_warning.json")
    if value is None:
        del doc[field]
    else:
        doc[field] = value
    with pytest.raises(MalformedEventError, match=where):
        parse_message(json.dumps(doc))
    no_account = golden("spot_interruption_warning_no_account.json")
    with pytest.raises(MalformedEventError, match="account"):
        parse_message(no_account)


def test_rebalance_recommendation() -> None:
    msg = parse_message(golden("rebalance_recommendation.json"))
    assert msg.kind is MessageKind.REBALANCE_RECOMMENDATION
    assert msg.instance_ids == ("i-1234567890abcdef0",)


def test_capacity_reservation_interruption_warning_names_the_instance_and_nothing_more() -> None:
    msg = parse_message(golden("capacity_reservation_interruption_warning.json"))
    assert msg.kind is MessageKind.CAPACITY_RESERVATION_INTERRUPTED
    assert msg.instance_ids == ("i-1234567890abcdef0",)
    assert (msg.account, msg.region, msg.instance_action) == ("123456789012", "us-west-2", "terminate")
    assert action_for(msg.kind, rebalance_action="ignore") is Action.CORDON_AND_DRAIN
    doc = golden_json("capacity_reservation_interruption_warning.json")
    doc["detail"]["instance-id"] = "cr-0123"
    with pytest.raises(MalformedEventError, match=r"detail\.instance-id"):
        parse_message(json.dumps(doc))


@pytest.mark.parametrize(
    ("state", "kind"),
    [
        ("stopping", MessageKind.INSTANCE_STOPPING),
        ("stopped", MessageKind.INSTANCE_STOPPING),
        ("shutting-down", MessageKind.INSTANCE_TERMINATING),
        ("terminated", MessageKind.INSTANCE_TERMINATING),
    ],
)
def test_state_changes_we_act_on(state: str, kind: MessageKind) -> None:
    msg = parse_message(golden(f"state_change_{state}.json"))
    assert msg.kind is kind
    assert msg.state == state
    assert msg.instance_ids == ("i-1234567890abcdef0",)


@pytest.mark.parametrize("state", ["pending", "running"])
def test_other_states_are_no_ops_with_a_reason(state: str) -> None:
    msg = parse_message(golden(f"state_change_{state}.json"))
    assert msg.kind is MessageKind.NO_OP
    assert msg.reason == "unhandled_state"
    assert state in msg.description
    assert msg.instance_ids == ()


def test_health_scheduled_change_names_each_affected_instance_once() -> None:
    msg = parse_message(golden("health_scheduled_change_ec2.json"))
    assert msg.kind is MessageKind.SCHEDULED_CHANGE
    assert msg.instance_ids == ("i-abcd1111", "i-abcd2222")
    assert msg.event_type_code == "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED"


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("health_scheduled_change_rds.json", "non_ec2_health"),
        ("health_issue_ec2.json", "not_scheduled_change"),
        ("autoscaling_launch_successful.json", "unsupported_event"),
    ],
)
def test_events_we_do_not_act_on_are_no_ops(name: str, reason: str) -> None:
    msg = parse_message(golden(name))
    assert msg.kind is MessageKind.NO_OP
    assert msg.reason == reason
    assert msg.event_id


def test_health_event_naming_no_instance_is_a_no_op() -> None:
    event = golden_json("health_scheduled_change_ec2.json")
    event["detail"]["affectedEntities"] = [{"entityValue": "UNKNOWN"}, {"entityValue": "123456789012"}]
    msg = parse_message(json.dumps(event))
    assert msg.kind is MessageKind.NO_OP
    assert msg.reason == "no_instances"


def test_other_envelope_version_is_a_no_op() -> None:
    event = golden_json("spot_interruption_warning.json")
    event["version"] = "1"
    assert parse_message(json.dumps(event)).reason == "unsupported_version"


def test_time_without_zone_is_utc() -> None:
    event = golden_json("rebalance_recommendation.json")
    event["time"] = "2026-11-22T06:00:00"
    assert parse_message(json.dumps(event)).event_time == EVENT_TIME


# --- malformed ---------------------------------------------------------------------------------


def test_truncated_body_is_malformed_and_says_it_is_not_json() -> None:
    with pytest.raises(MalformedEventError) as err:
        parse_message(golden("broken_body.txt"))
    assert "not JSON" in err.value.reason


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("", "empty"),
        ("[1, 2]", "expected an object"),
        ('"spot"', "expected an object"),
        (b"\xff\xfe{}", "not UTF-8"),
        ("[" * 5000 + "]" * 5000, "JSON"),
    ],
)
def test_bodies_that_are_not_event_objects_are_malformed(body: str | bytes, fragment: str) -> None:
    with pytest.raises(MalformedEventError) as err:
        parse_message(body)
    assert fragment in err.value.reason


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda e: e.pop("detail-type"), "detail-type"),
        (lambda e: e.pop("time"), "time"),
        (lambda e: e.update(time="yesterday"), "time"),
        (lambda e: e.pop("detail"), "detail"),
        (lambda e: e["detail"].pop("instance-id"), "detail.instance-id"),
        (lambda e: e["detail"].update({"instance-id": "i-XYZ"}), "detail.instance-id"),
        (lambda e: e["detail"].update({"instance-id": 42}), "detail.instance-id"),
    ],
)
def test_schema_violations_name_the_field(mutate: Any, fragment: str) -> None:
    event = golden_json("spot_interruption_warning.json")
    mutate(event)
    with pytest.raises(MalformedEventError) as err:
        parse_message(json.dumps(event))
    assert fragment in err.value.reason


def test_state_change_without_state_is_malformed() -> None:
    event = golden_json("state_change_stopping.json")
    del event["detail"]["state"]
    with pytest.raises(MalformedEventError, match=r"detail\.state"):
        parse_message(json.dumps(event))


# --- actions -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind",
    [
        MessageKind.SPOT_INTERRUPTED,
        MessageKind.SCHEDULED_CHANGE,
        MessageKind.INSTANCE_STOPPING,
        MessageKind.INSTANCE_TERMINATING,
    ],
)
def test_interruptions_cordon_and_drain_whatever_the_rebalance_setting(kind: MessageKind) -> None:
    assert action_for(kind, rebalance_action="ignore") is Action.CORDON_AND_DRAIN


@pytest.mark.parametrize(
    ("setting", "action"),
    [
        ("ignore", Action.NONE),
        ("event", Action.EVENT_ONLY),
        ("cordon", Action.CORDON),
        ("drain", Action.CORDON_AND_DRAIN),
    ],
)
def test_rebalance_follows_the_setting(setting: Any, action: Action) -> None:
    assert action_for(MessageKind.REBALANCE_RECOMMENDATION, rebalance_action=setting) is action


def test_no_op_does_nothing_and_bad_setting_is_rejected() -> None:
    assert action_for(MessageKind.NO_OP, rebalance_action="drain") is Action.NONE
    with pytest.raises(ValueError, match="rebalance_action"):
        action_for(MessageKind.REBALANCE_RECOMMENDATION, rebalance_action="terminate")  # type: ignore[arg-type]


# --- fuzz --------------------------------------------------------------------------------------

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12,
)
_GOLDEN = sorted(p.name for p in EVENTS.glob("*.json") if p.name != "sqs_batch.json")
_FIELDS = ["version", "id", "detail-type", "source", "account", "time", "region", "resources", "detail"]
_DETAIL_FIELDS = ["instance-id", "instance-action", "state", "service", "eventTypeCategory", "affectedEntities"]


@st.composite
def _mutated_events(draw: st.DrawFn) -> str:
    event = golden_json(draw(st.sampled_from(_GOLDEN)))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        if draw(st.booleans()) and isinstance(event.get("detail"), dict):
            event["detail"][draw(st.sampled_from(_DETAIL_FIELDS))] = draw(_json_values)
        else:
            event[draw(st.sampled_from(_FIELDS))] = draw(_json_values)
    return json.dumps(event)


_fuzz_inputs = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=300),
    _json_values.map(json.dumps),
    _mutated_events(),
)


def test_fuzz_parse_message_raises_only_malformed_event_error(record_property: Any) -> None:
    tried = {"inputs": 0, "malformed": 0, "parsed": 0}

    @settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_fuzz_inputs)
    def run(body: str | bytes) -> None:
        tried["inputs"] += 1
        try:
            msg = parse_message(body)
        except MalformedEventError as exc:
            tried["malformed"] += 1
            assert exc.reason
            return
        tried["parsed"] += 1
        assert isinstance(msg.kind, MessageKind)
        assert (msg.kind is MessageKind.NO_OP) == (not msg.instance_ids)
        assert len(msg.account) == 12 and msg.region

    run()
    print(f"parse_message fuzz: {tried}")
    record_property("fuzz_inputs_tried", tried["inputs"])
    assert tried["inputs"] >= 500  # hypothesis may stop a little early on duplicates
    assert tried["parsed"] > 0  # the mutated golden events do reach the parsers
