"""10,000 seeded inputs through the interruption parser: real event bodies mutated field by field and byte by
byte, and raw noise. Each one is parsed or rejected with ``MalformedEventError`` naming a reason; nothing else
may escape (an unhandled exception would crash the interruption function's whole batch)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from nodesmith.core.interruption import MalformedEventError, MessageKind, parse_message

EVENTS = Path(__file__).resolve().parents[1] / "events"
GOLDEN = [json.loads(p.read_text()) for p in sorted(EVENTS.glob("*.json")) if p.name != "sqs_batch.json"]
FIELDS = ["version", "id", "detail-type", "source", "account", "time", "region", "resources", "detail"]
DETAIL_FIELDS = ["instance-id", "instance-action", "state", "service", "eventTypeCategory", "affectedEntities",
                 "eventTypeCode", "startTime"]  # fmt: skip
INPUTS = 10_000


def _value(rng: random.Random, depth: int = 0) -> Any:
    """A random JSON value: scalars of every type, odd strings, and small nested lists and objects."""
    choice = rng.randrange(9 if depth < 2 else 6)
    odd = ["", "i-", "i-0123456789abcdef0", "1970-01-01T00:00:00Z", "9999-99-99", "\x00", "aws.ec2",
           "EC2 Spot Instance Interruption Warning", "123456789012"]  # fmt: skip
    scalars: list[Any] = [None, rng.random() < 0.5, rng.randint(-(2**63), 2**63), rng.uniform(-1e9, 1e9),
                          "".join(chr(rng.randrange(0x20, 0x2FFF)) for _ in range(rng.randrange(12))),
                          rng.choice(odd)]  # fmt: skip
    if choice < 6:
        return scalars[choice]
    if choice < 8:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(FIELDS + DETAIL_FIELDS): _value(rng, depth + 1) for _ in range(rng.randrange(4))}


def _mutated(rng: random.Random) -> str | bytes:
    """One input: a golden event with 1-3 fields replaced or removed, then maybe cut or with a byte flipped."""
    event = json.loads(json.dumps(rng.choice(GOLDEN)))
    for _ in range(rng.randint(1, 3)):
        target = event["detail"] if isinstance(event.get("detail"), dict) and rng.random() < 0.5 else event
        key = rng.choice(DETAIL_FIELDS if target is not event else FIELDS)
        if rng.random() < 0.2:
            target.pop(key, None)
        else:
            target[key] = _value(rng)
    body = json.dumps(event).encode()
    shape = rng.randrange(10)
    if shape == 0:
        return body[: rng.randrange(len(body))]
    if shape == 1:
        at = rng.randrange(len(body))
        return body[:at] + bytes([rng.randrange(256)]) + body[at + 1 :]
    if shape == 2:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(64)))
    return body.decode()


def test_ten_thousand_inputs_are_parsed_or_rejected_with_a_reason(record_property: Any) -> None:
    rng = random.Random(20261129)
    outcomes = {"parsed": 0, "malformed": 0}
    for _ in range(INPUTS):
        body = _mutated(rng)
        try:
            message = parse_message(body)
        except MalformedEventError as exc:
            assert exc.reason, body
            outcomes["malformed"] += 1
            continue
        assert isinstance(message.kind, MessageKind)
        assert (message.kind is MessageKind.NO_OP) == (not message.instance_ids), body
        outcomes["parsed"] += 1
    record_property("fuzz_outcomes", outcomes)
    assert sum(outcomes.values()) == INPUTS
    assert outcomes["parsed"] > 500 and outcomes["malformed"] > 500  # both ways are exercised
