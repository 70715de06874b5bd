"""Faults for the embedded AWS: what to inject, the seeded decisions, and what was injected.

A :class:`FaultPlan` says which faults the embedded moto server answers with, at which rates; the
:class:`FaultInjector` makes the decisions with ``random.Random(plan.seed)`` and counts every fault it
injected by kind (:data:`KINDS`). The WSGI middleware that applies the decisions to requests is in
:mod:`nodesmith.sim.aws_fault_server`, the protocol shapes of the answers in :mod:`nodesmith.sim.aws_fault_shapes`.
Every client of the server (the handlers, botocore's retries, the simulated components) sees the faults as AWS
would send them, so what survives them is the real code path.

The kinds follow AWS Fault Injection Service's EC2 API actions (``aws:ec2:api-throttle-error``,
``aws:ec2:api-internal-error``, ``aws:ec2:api-insufficient-instance-capacity-error``) and extend them to the other
services Nodesmith calls and to the failures AWS documents as normal behaviour:

* ``throttle``: ``RequestLimitExceeded`` (EC2), ``ThrottlingException`` (SQS, SSM, EventBridge),
  ``ProvisionedThroughputExceededException`` (DynamoDB); per call, at ``plan.throttle``'s rate;
* ``internal_error`` / ``unavailable``: HTTP 500 (EC2 ``InternalError``, DynamoDB and SSM ``InternalServerError``,
  SQS ``InternalFailure``, EventBridge ``InternalException``) / HTTP 503 ``ServiceUnavailable``, half each, per call
  at ``plan.server_error``'s rate;
* ``fleet_capacity``: a CreateFleet answering capacity errors in its ``Errors`` for a share of its overrides and
  launching one of the others (``fleet_capacity_total``: for all of them, launching nothing);
  ``fleet_override_errors`` counts the errored overrides;
* ``describe_not_found`` / ``describe_hidden``: DescribeInstances not seeing an instance launched less than
  ``plan.describe_lag_seconds`` ago, as EC2's eventual consistency does (EC2 API reference, "Eventual consistency
  in the Amazon EC2 API"): ``InvalidInstanceID.NotFound`` when it is asked for by id, absent from a filtered list;
* ``sqs_duplicate``: a received message delivered once more later, same ``MessageId``, body and attributes, a new
  receipt handle (standard queues deliver at least once: "a copy of the message isn't deleted on that unavailable
  server", Amazon SQS developer guide, "At-least-once delivery"); a redelivery after a visibility timeout, which
  counts one more receive, is not this fault; ``sqs_delayed``: a sent message visible only after
  ``plan.sqs.delay_seconds``.

Rates are probabilities per call (per message, per override for SQS and CreateFleet shares), looked up by operation
as ``"<service>:<Operation>"`` (``"ec2:CreateFleet"``), then ``"<service>:*"``, then ``"*"``; services are the
SigV4 signing names (``ec2``, ``sqs``, ``dynamodb``, ``ssm``, ``events``). ``plan.limits`` caps how many faults
of a kind are injected in all (``{"throttle": 3}``: the first three throttles, then none), which makes a burst
exact. With one thread calling, a plan and a seed give the same faults every run; with several, which call gets a
fault depends on the order their requests reach the server.
"""

from __future__ import annotations

import json
import math
import random
import threading
import time
import urllib.request
from collections import Counter
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from nodesmith.sim.aws import EmbeddedAws

__all__ = [
    "CAPACITY_CODES",
    "CONTROL_PATH",
    "KINDS",
    "FaultCounts",
    "FaultInjector",
    "FaultPlan",
    "FleetFaults",
    "SqsFaults",
    "fault_counts",
    "set_faults",
]

CONTROL_PATH = "/nodesmith-faults"
"""The embedded server's path for the plan (``POST`` a plan's JSON, ``null`` to stop) and the counts (``GET``)."""

CAPACITY_CODES = ("InsufficientInstanceCapacity", "UnfulfillableCapacity", "MaxSpotInstanceCountExceeded")
"""CreateFleet error codes the fleet fault answers with (EC2 API error codes; all three are capacity errors to
Karpenter's ``unfulfillableCapacityErrorCodes``)."""

KINDS = (
    "throttle",
    "internal_error",
    "unavailable",
    "fleet_capacity",
    "fleet_capacity_total",
    "fleet_override_errors",
    "describe_not_found",
    "describe_hidden",
    "sqs_duplicate",
    "sqs_delayed",
)
"""Fault kinds as counted (see the module docstring)."""


def _rate(value: float) -> float:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"a rate is a probability in [0, 1], not {value}")
    return value


def _rules(rules: Mapping[str, float]) -> dict[str, float]:
    for key, value in rules.items():
        if key != "*" and (":" not in key or not key.split(":", 1)[0] or not key.split(":", 1)[1]):
            raise ValueError(f'operation pattern {key!r}: "<service>:<Operation>", "<service>:*" or "*"')
        _rate(value)
    return dict(rules)


class FleetFaults(BaseModel):
    """CreateFleet capacity errors: ``rate`` of calls affected; of an affected call's overrides, ``share`` (rounded
    up, at least one) answer an error and another launches, unless with probability ``launch_nothing`` every
    override answers one. Each error's code is drawn from ``codes``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rate: float = 0.0
    share: float = 0.5
    launch_nothing: float = 0.0
    codes: tuple[str, ...] = CAPACITY_CODES

    _check = field_validator("rate", "share", "launch_nothing")(_rate)

    @field_validator("codes")
    @classmethod
    def _some(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("codes: at least one error code")
        return value


class SqsFaults(BaseModel):
    """SQS delivery faults: each received message is delivered again with probability ``duplicate``, by the first
    receive on its queue at least ``duplicate_after_seconds`` later; each sent message of a standard queue is
    delayed ``delay_seconds`` (0..900, SQS's ``DelaySeconds``) with probability ``delay``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    duplicate: float = 0.0
    duplicate_after_seconds: float = Field(default=0.0, ge=0.0)
    delay: float = 0.0
    delay_seconds: int = Field(default=5, ge=0, le=900)

    _check = field_validator("duplicate", "delay")(_rate)


class FaultPlan(BaseModel):
    """What the embedded AWS injects (see the module docstring); the default injects nothing."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seed: int = 0
    throttle: dict[str, float] = Field(default_factory=dict)
    server_error: dict[str, float] = Field(default_factory=dict)
    limits: dict[str, int] = Field(default_factory=dict)
    fleet: FleetFaults = FleetFaults()
    describe_lag_seconds: float = Field(default=0.0, ge=0.0)
    sqs: SqsFaults = SqsFaults()

    _check = field_validator("throttle", "server_error")(_rules)

    @field_validator("limits")
    @classmethod
    def _known(cls, value: dict[str, int]) -> dict[str, int]:
        unknown = sorted(set(value) - set(KINDS))
        if unknown or any(v < 0 for v in value.values()):
            raise ValueError(f"limits: non-negative counts of the kinds {KINDS}; got {value}")
        return value


def rate_for(rules: Mapping[str, float], *, service: str, operation: str) -> float:
    """The rate of ``service``'s ``operation`` in ``rules``: the exact ``"<service>:<Operation>"`` entry, else
    ``"<service>:*"``, else ``"*"``, else 0."""
    for key in (f"{service}:{operation}", f"{service}:*", "*"):
        if key in rules:
            return rules[key]
    return 0.0


class FaultCounts(BaseModel):
    """Faults injected since the plan was set: by kind, and by ``"<kind> <service>:<Operation>"``."""

    model_config = ConfigDict(frozen=True)

    by_kind: dict[str, int] = Field(default_factory=dict)
    by_operation: dict[str, int] = Field(default_factory=dict)

    @property
    def total(self) -> int:
        """Faults of every kind, the errored overrides not counted twice."""
        return sum(n for kind, n in self.by_kind.items() if kind != "fleet_override_errors")


class FaultInjector:
    """The decisions of one :class:`FaultPlan` and their counts; thread-safe (one lock around the generator,
    the counts and the remembered launches and duplicates). ``clock`` returns monotonic seconds.

    ``active`` is False while no plan is set: the server then passes every request through untouched.
    """

    def __init__(self, *, clock: Any = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._plan = FaultPlan()
        self._random = random.Random(0)
        self._counts: Counter[tuple[str, str]] = Counter()
        self._launched: dict[str, float] = {}
        self._duplicates: dict[str, list[tuple[float, dict[str, Any]]]] = {}
        self._handles: set[str] = set()
        self.active = False

    @property
    def plan(self) -> FaultPlan:
        """The plan in force (the default, injecting nothing, when none is set)."""
        return self._plan

    def configure(self, plan: FaultPlan | None) -> None:
        """Put ``plan`` in force (None: no faults): a new generator from its seed, counts and remembered launches
        and duplicates cleared."""
        with self._lock:
            self._plan = plan or FaultPlan()
            self._random = random.Random(self._plan.seed)
            self._counts.clear()
            self._launched.clear()
            self._duplicates.clear()
            self._handles.clear()
            self.active = plan is not None

    def counts(self) -> FaultCounts:
        """The faults injected so far."""
        with self._lock:
            by_kind: Counter[str] = Counter()
            for (kind, _), n in self._counts.items():
                by_kind[kind] += n
            return FaultCounts(
                by_kind=dict(by_kind), by_operation={f"{k} {op}": n for (k, op), n in sorted(self._counts.items())}
            )

    def _allowed(self, kind: str) -> bool:
        limit = self._plan.limits.get(kind)
        return limit is None or sum(n for (k, _), n in self._counts.items() if k == kind) < limit

    def _count(self, kind: str, operation: str, n: int = 1) -> None:
        self._counts[(kind, operation)] += n

    def count(self, kind: str, operation: str, n: int = 1) -> None:
        """Count ``n`` faults of ``kind`` applied to ``operation`` (``"<service>:<Operation>"``)."""
        with self._lock:
            self._count(kind, operation, n)

    def call_error(self, *, service: str, operation: str) -> str | None:
        """``"throttle"``, ``"internal_error"``, ``"unavailable"`` (counted) or None for one call."""
        name = f"{service}:{operation}"
        with self._lock:
            throttle = rate_for(self._plan.throttle, service=service, operation=operation)
            if throttle and self._random.random() < throttle and self._allowed("throttle"):
                self._count("throttle", name)
                return "throttle"
            server = rate_for(self._plan.server_error, service=service, operation=operation)
            if server and self._random.random() < server:
                kind = "internal_error" if self._random.random() < 0.5 else "unavailable"
                if self._allowed(kind):
                    self._count(kind, name)
                    return kind
        return None

    def fleet_errors(self, overrides: int) -> dict[int, str] | None:
        """For a CreateFleet of ``overrides`` overrides: the index -> error code of those to fail, or None. All of
        them fail on a ``launch_nothing`` draw (or when there is one); otherwise ``share`` of them, rounded up, at
        least one and never all. Counts ``fleet_capacity`` or ``fleet_capacity_total`` and the overrides."""
        fleet = self._plan.fleet
        with self._lock:
            if overrides <= 0 or not fleet.rate or self._random.random() >= fleet.rate:
                return None
            total = overrides == 1 or self._random.random() < fleet.launch_nothing
            kind = "fleet_capacity_total" if total else "fleet_capacity"
            if not self._allowed(kind):
                return None
            if total:
                chosen = list(range(overrides))
            else:
                size = min(overrides - 1, max(1, math.ceil(fleet.share * overrides)))
                chosen = sorted(self._random.sample(range(overrides), size))
            self._count(kind, "ec2:CreateFleet")
            self._count("fleet_override_errors", "ec2:CreateFleet", len(chosen))
            return {i: self._random.choice(fleet.codes) for i in chosen}

    def remember_launch(self, instance_ids: Sequence[str]) -> None:
        """Instances just launched: DescribeInstances does not see them for ``plan.describe_lag_seconds``."""
        if not self._plan.describe_lag_seconds:
            return
        now = self._clock()
        with self._lock:
            for instance_id in instance_ids:
                self._launched.setdefault(instance_id, now)

    def hidden(self, instance_ids: Sequence[str]) -> set[str]:
        """Which of ``instance_ids`` DescribeInstances does not see yet (launched within the lag)."""
        lag = self._plan.describe_lag_seconds
        if not lag:
            return set()
        now = self._clock()
        with self._lock:
            return {i for i in instance_ids if now - self._launched.get(i, float("-inf")) < lag}

    def delay_message(self, operation: str = "sqs:SendMessage") -> bool:
        """Whether to delay one message ``operation`` sends (counted when yes)."""
        sqs = self._plan.sqs
        with self._lock:
            if sqs.delay and self._random.random() < sqs.delay and self._allowed("sqs_delayed"):
                self._count("sqs_delayed", operation)
                return True
        return False

    def received(self, queue_url: str, messages: Sequence[Mapping[str, Any]]) -> None:
        """Keep a copy of each of ``messages`` (as ReceiveMessage answered them) to deliver again, with probability
        ``plan.sqs.duplicate`` each."""
        sqs = self._plan.sqs
        if not sqs.duplicate:
            return
        due = self._clock() + sqs.duplicate_after_seconds
        with self._lock:
            for message in messages:
                if str(message.get("ReceiptHandle", "")) in self._handles:
                    continue  # a duplicate is delivered once
                if self._random.random() < sqs.duplicate and self._allowed("sqs_duplicate"):
                    self._duplicates.setdefault(queue_url, []).append((due, dict(message)))

    def take_duplicates(self, queue_url: str, room: int) -> list[dict[str, Any]]:
        """Up to ``room`` copies due on ``queue_url``, each with a new receipt handle (counted). A copy keeps the
        attributes of the delivery it copies, ``ApproximateReceiveCount`` included: SQS's extra copy is one a storage
        server kept because it missed the receive and the delete, so it has not counted that receive either."""
        if room <= 0:
            return []
        now = self._clock()
        out: list[dict[str, Any]] = []
        with self._lock:
            waiting = self._duplicates.get(queue_url, [])
            keep: list[tuple[float, dict[str, Any]]] = []
            for due, message in waiting:
                if due > now or len(out) >= room:
                    keep.append((due, message))
                    continue
                copy = dict(message)
                handle = f"nodesmith-duplicate-{self._random.getrandbits(64):016x}"
                self._handles.add(handle)
                copy["ReceiptHandle"] = handle
                out.append(copy)
                self._count("sqs_duplicate", "sqs:ReceiveMessage")
            self._duplicates[queue_url] = keep
        return out

    def is_duplicate_handle(self, handle: str) -> bool:
        """Whether ``handle`` is the receipt handle of a delivered duplicate (deleting it is a no-op)."""
        with self._lock:
            return handle in self._handles


def _control(embedded: EmbeddedAws, data: bytes | None) -> Any:
    method = "POST" if data is not None else "GET"
    request = urllib.request.Request(f"{embedded.endpoint_url}{CONTROL_PATH}", data=data, method=method)
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read() or b"null")


def set_faults(embedded: EmbeddedAws, plan: FaultPlan | None) -> None:
    """Put ``plan`` in force on a running embedded AWS (:func:`~nodesmith.sim.aws.start` or ``start_process``);
    None stops injecting. Counts start again from zero."""
    _control(embedded, (plan.model_dump_json() if plan is not None else "null").encode())


def fault_counts(embedded: EmbeddedAws) -> FaultCounts:
    """The faults a running embedded AWS injected since its plan was set."""
    return FaultCounts.model_validate(_control(embedded, None))
