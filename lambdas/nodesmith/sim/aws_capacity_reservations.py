"""Capacity reservations for the embedded AWS: moto has none.

:func:`serve_capacity_reservations` adds to moto's EC2 (in this process, once):

* ``CreateCapacityReservation`` (an On-Demand Capacity Reservation: ``InstanceType``, ``InstancePlatform``,
  ``AvailabilityZone``, ``InstanceCount``, optional ``EndDate``, ``InstanceMatchCriteria``, ``TagSpecifications``);
* ``DescribeCapacityReservations`` with ``CapacityReservationIds`` and the filters Karpenter sends (``state``,
  ``owner-id``, ``instance-match-criteria``, ``instance-type``, ``availability-zone``, ``reservation-type``,
  ``tag:<key>``, ``tag-key``); ``AvailableInstanceCount`` is the reservation's count less its running instances,
  so a terminated instance gives its slot back, as in EC2;
* ``CreateFleet`` into a reservation: a launch template whose ``CapacityReservationSpecification`` targets a
  reservation (Karpenter's ``capacity-reservations-only`` templates) launches only overrides of that reservation's
  type and zone while it has room, ``DefaultTargetCapacityType`` ``capacity-block`` included (the instances then
  describe with their ``CapacityReservationId``, a block's as ``InstanceLifecycle=capacity-block``); when none has
  room the answer launches nothing and carries one ``ReservationCapacityExceeded`` error per override, the code EC2
  answers for a full targeted reservation (and one of the unfulfillable-capacity codes of Karpenter's
  ``[aws]:pkg/errors/errors.go``).

Capacity Blocks for ML are bought through offerings EC2 does not let one invent, so :func:`add_capacity_block`
writes one into the backend directly (the embedded server runs in this process), and :func:`set_end_time` moves a
reservation's end, standing in for the clock reaching it.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

__all__ = ["add_capacity_block", "serve_capacity_reservations", "set_end_time", "set_interruptible"]

_PATCHED: list[bool] = []
_LOCK = threading.RLock()
_STORES: weakref.WeakKeyDictionary[Any, dict[str, _Reservation]] = weakref.WeakKeyDictionary()
_IDS = itertools.count(1)
EXCEEDED = "ReservationCapacityExceeded"


@dataclass
class _Reservation:
    id: str
    owner_id: str
    region: str
    instance_type: str
    zone: str
    total: int
    platform: str = "Linux/UNIX"
    match_criteria: str = "targeted"
    reservation_type: str = "default"
    interruptible: bool = False
    start: datetime = field(default_factory=lambda: datetime.now(UTC))
    end: datetime | None = None
    tags: dict[str, str] = field(default_factory=dict)
    instance_ids: list[str] = field(default_factory=list)

    def live(self, backend: Any) -> int:
        running = 0
        for instance_id in self.instance_ids:
            try:
                state = backend.get_instance(instance_id).state
            except Exception:  # unknown to moto: gone
                continue
            if state not in ("shutting-down", "terminated"):
                running += 1
        return running

    def state(self) -> str:
        return "expired" if self.end is not None and self.end <= datetime.now(UTC) else "active"

    def describe(self, backend: Any) -> dict[str, Any]:
        item: dict[str, Any] = {
            "CapacityReservationId": self.id,
            "OwnerId": self.owner_id,
            "CapacityReservationArn": f"arn:aws:ec2:{self.region}:{self.owner_id}:capacity-reservation/{self.id}",
            "InstanceType": self.instance_type,
            "InstancePlatform": self.platform,
            "AvailabilityZone": self.zone,
            "Tenancy": "default",
            "TotalInstanceCount": self.total,
            "AvailableInstanceCount": max(0, self.total - self.live(backend)),
            "EbsOptimized": False,
            "EphemeralStorage": False,
            "State": self.state(),
            "StartDate": self.start,
            "EndDateType": "limited" if self.end is not None else "unlimited",
            "InstanceMatchCriteria": self.match_criteria,
            "CreateDate": self.start,
            "Tags": [{"Key": k, "Value": v} for k, v in sorted(self.tags.items())],
            "ReservationType": self.reservation_type,
            "Interruptible": self.interruptible,
        }
        if self.end is not None:
            item["EndDate"] = self.end
        return item


def _store(backend: Any) -> dict[str, _Reservation]:
    return _STORES.setdefault(backend, {})


def _new_id() -> str:
    return f"cr-{next(_IDS):017x}"


def _matches(r: _Reservation, backend: Any, name: str, values: list[str]) -> bool:
    simple = {
        "state": r.state(),
        "owner-id": r.owner_id,
        "instance-match-criteria": r.match_criteria,
        "instance-type": r.instance_type,
        "availability-zone": r.zone,
        "reservation-type": r.reservation_type,
        "capacity-reservation-id": r.id,
    }
    if name in simple:
        return simple[name] in values
    if name == "tag-key":
        return any(k in r.tags for k in values)
    if name.startswith("tag:"):
        return r.tags.get(name[4:]) in values
    raise ValueError(f"DescribeCapacityReservations: the embedded AWS does not know the filter {name!r}")


def _tags(specs: list[dict[str, Any]]) -> dict[str, str]:
    return {
        t["Key"]: t.get("Value", "")
        for spec in specs or []
        if spec.get("ResourceType") == "capacity-reservation"
        for t in spec.get("Tags") or []
    }


def _create_capacity_reservation(self: Any) -> Any:
    from moto.core.responses import ActionResult

    end = self._get_param("EndDate")
    with _LOCK:
        r = _Reservation(
            id=_new_id(),
            owner_id=self.current_account,
            region=self.region,
            instance_type=self._get_param("InstanceType"),
            zone=self._get_param("AvailabilityZone"),
            total=int(self._get_param("InstanceCount")),
            platform=self._get_param("InstancePlatform"),
            match_criteria=self._get_param("InstanceMatchCriteria") or "open",
            end=end if isinstance(end, datetime) else None,
            tags=_tags(self._get_param("TagSpecifications", [])),
        )
        _store(self.ec2_backend)[r.id] = r
        return ActionResult({"CapacityReservation": r.describe(self.ec2_backend)})


def _describe_capacity_reservations(self: Any) -> Any:
    from moto.core.responses import ActionResult
    from moto.ec2.exceptions import InvalidParameterValueError

    ids = self._get_param("CapacityReservationIds", []) or []
    filters = self._get_param("Filters", []) or []
    with _LOCK:
        store = _store(self.ec2_backend)
        unknown = [i for i in ids if i not in store]
        if unknown:
            raise InvalidParameterValueError(f"The capacity reservation ID '{unknown[0]}' does not exist")
        chosen = [store[i] for i in ids] if ids else list(store.values())
        try:
            found = [
                r
                for r in chosen
                if all(_matches(r, self.ec2_backend, f["Name"], list(f.get("Values") or [])) for f in filters)
            ]
        except ValueError as exc:
            raise InvalidParameterValueError(str(exc)) from None
        items = [r.describe(self.ec2_backend) for r in sorted(found, key=lambda r: r.id)]
    return ActionResult({"CapacityReservations": items})


def _target(backend: Any, spec: dict[str, Any]) -> str | None:
    """The reservation id a CreateFleet launch template specification targets, or None."""
    try:
        if spec.get("LaunchTemplateId"):
            template = backend.get_launch_template(spec["LaunchTemplateId"])
        else:
            template = backend.get_launch_template_by_name(spec.get("LaunchTemplateName"))
    except Exception:  # moto answers the missing template itself
        return None
    version = spec.get("Version") or "$Default"
    number = {"$Latest": template.latest_version_number, "$Default": template.default_version_number}.get(version)
    data = template.get_version(str(number or version)).data or {}
    target = (data.get("CapacityReservationSpecification") or {}).get("CapacityReservationTarget") or {}
    return target.get("CapacityReservationId")


def _mark_instances(backend: Any, reservation: _Reservation, instance_ids: list[str]) -> None:
    """DescribeInstances then reports the reservation (``CapacityReservationId``), and a Capacity Block's instance
    ``InstanceLifecycle=capacity-block``, as EC2 does."""
    for instance_id in instance_ids:
        instance = backend.get_instance(instance_id)
        instance.capacity_reservation_id = reservation.id
        if reservation.reservation_type == "capacity-block":
            instance.instance_lifecycle = "capacity-block"


def _wrap_create_fleet(create: Any) -> Any:
    def create_fleet(self: Any) -> Any:
        from moto.core.responses import ActionResult

        configs = self.params.get("LaunchTemplateConfigs") or []
        targets = [
            (config, _target(self.ec2_backend, config.get("LaunchTemplateSpecification") or {})) for config in configs
        ]
        if not any(target for _, target in targets):
            return create(self)
        with _LOCK:
            store = _store(self.ec2_backend)
            errors: list[dict[str, Any]] = []
            kept: list[dict[str, Any]] = []
            for config, target in targets:
                r = store.get(target or "")
                room = r is not None and r.state() == "active" and r.total - r.live(self.ec2_backend) > 0
                overrides = config.get("Overrides") or [{}]
                fits = [
                    o
                    for o in overrides
                    if r is not None
                    and o.get("InstanceType", r.instance_type) == r.instance_type
                    and o.get("AvailabilityZone", r.zone) == r.zone
                ]
                if room and fits:
                    kept.append({**config, "Overrides": fits})
                    continue
                for o in overrides:
                    errors.append(
                        {
                            "LaunchTemplateAndOverrides": {
                                "LaunchTemplateSpecification": config.get("LaunchTemplateSpecification"),
                                "Overrides": o,
                            },
                            "Lifecycle": "on-demand",
                            "ErrorCode": EXCEEDED,
                            "ErrorMessage": f"Insufficient capacity in capacity reservation {target}.",
                        }
                    )
            if not kept:
                return ActionResult({"FleetId": f"fleet-{_new_id()[3:]}", "Errors": errors, "Instances": []})
            self.params["LaunchTemplateConfigs"] = kept
            capacity = self.params.setdefault("TargetCapacitySpecification", {})
            capacity["DefaultTargetCapacityType"] = "on-demand"  # moto launches nothing for capacity-block
            answer = create(self)
            result = answer.result if isinstance(answer.result, dict) else {}
            by_name = {t: store[t] for _, t in targets if t in store}
            for item in result.get("Instances") or []:
                spec = (item.get("LaunchTemplateAndOverrides") or {}).get("LaunchTemplateSpecification") or {}
                r = by_name.get(_target(self.ec2_backend, spec) or "")
                if r is not None:
                    r.instance_ids.extend(item.get("InstanceIds") or [])
                    _mark_instances(self.ec2_backend, r, item.get("InstanceIds") or [])
            if errors:
                result.setdefault("Errors", []).extend(errors)
            return answer

    return create_fleet


def serve_capacity_reservations() -> None:
    """Add the capacity reservation calls of the module docstring to moto's EC2 (idempotent). Must run before
    CreateFleet is wrapped for client tokens, so a repeated token answers the first launch, not a new check."""
    if _PATCHED:
        return
    from moto.ec2.responses import EC2Response
    from moto.ec2.responses.fleets import Fleets

    EC2Response.create_capacity_reservation = _create_capacity_reservation  # type: ignore[attr-defined]
    EC2Response.describe_capacity_reservations = _describe_capacity_reservations  # type: ignore[attr-defined]
    Fleets.create_fleet = _wrap_create_fleet(Fleets.create_fleet)  # type: ignore[method-assign]
    _PATCHED.append(True)


def _backend(region: str, account: str) -> Any:
    from moto.ec2.models import ec2_backends

    return ec2_backends[account][region]


def add_capacity_block(
    *,
    instance_type: str,
    zone: str,
    count: int,
    end: datetime,
    tags: dict[str, str] | None = None,
    region: str = "us-east-1",
    account: str = "123456789012",
) -> str:
    """A Capacity Block for ML (``ReservationType`` ``capacity-block``, targeted, active from now until ``end``) of
    ``count`` ``instance_type`` in ``zone``, in the embedded AWS of this process; returns its id."""
    with _LOCK:
        r = _Reservation(
            id=_new_id(),
            owner_id=account,
            region=region,
            instance_type=instance_type,
            zone=zone,
            total=count,
            reservation_type="capacity-block",
            end=end,
            tags=dict(tags or {}),
        )
        _store(_backend(region, account))[r.id] = r
        return r.id


def set_end_time(
    reservation_id: str, end: datetime, *, region: str = "us-east-1", account: str = "123456789012"
) -> None:
    """Move a reservation's end (the clock reaching a block's end without waiting for it). Raises ``KeyError`` for
    an unknown id."""
    with _LOCK:
        _store(_backend(region, account))[reservation_id].end = end


def set_interruptible(
    reservation_id: str, interruptible: bool = True, *, region: str = "us-east-1", account: str = "123456789012"
) -> None:
    """Make a reservation an interruptible ODCR (``Interruptible`` in DescribeCapacityReservations: its owner may
    reclaim the instances, with an ``EC2 Capacity Reservation Instance Interruption Warning`` first), or not. Raises
    ``KeyError`` for an unknown id."""
    with _LOCK:
        _store(_backend(region, account))[reservation_id].interruptible = interruptible
