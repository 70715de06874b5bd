"""A warm reconcile container solves again and again against the same catalogue objects: the
per-type scheduling data (requirements from labels, offerings, allocatable) is built once per
InstanceType object and reused, while a catalogue with changed offerings (new objects) is seen fresh."""

from __future__ import annotations

from dataclasses import replace

from scheduling_support import catalogue, make_input, make_pod

from nodesmith.core.scheduling import solve
from nodesmith.core.scheduling.instancetypes import TypeInfo, type_info


def test_the_same_instance_type_object_gets_the_same_scheduling_data() -> None:
    types = catalogue()
    first = [type_info(it) for it in types]
    again = [type_info(it) for it in types]
    assert all(a is b for a, b in zip(first, again, strict=True))
    assert all(isinstance(info, TypeInfo) and info.it is it for info, it in zip(first, types, strict=True))


def test_a_changed_type_is_not_served_from_the_cache() -> None:
    types = catalogue()
    before = type_info(types[0])
    gone = replace(types[0], offerings=tuple(replace(o, available=False) for o in types[0].offerings))
    after = type_info(gone)
    assert after is not before and after.it is gone
    assert before.offerings and not after.offerings


def test_repeated_solves_against_one_catalogue_agree_and_follow_an_offering_change() -> None:
    types = catalogue()
    pods = [make_pod(name=f"p{i}", cpu="1", memory="1Gi") for i in range(3)]
    first = solve(make_input(pods, types=types))
    second = solve(make_input(pods, types=types))
    assert [([t.name for t in nc.instance_types], nc.pods) for nc in first.nodeclaims] == [
        ([t.name for t in nc.instance_types], nc.pods) for nc in second.nodeclaims
    ]
    cheapest = first.nodeclaims[0].instance_types[0].name
    changed = [
        replace(it, offerings=tuple(replace(o, available=False) for o in it.offerings)) if it.name == cheapest else it
        for it in types
    ]
    third = solve(make_input(pods, types=changed))
    assert cheapest not in {t.name for nc in third.nodeclaims for t in nc.instance_types}
