"""A warm reconcile container solves again and again against the same catalogue objects: the
per-type scheduling data (requirements from labels, offerings, allocatable) is built once per
InstanceType object and reused (by the disruption pass too), while a catalogue with changed offerings (new objects)
is seen fresh. Nodes' label requirements share one requirement per label."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from scheduling_support import catalogue, make_input, make_nodepool, make_pod

from nodesmith.core.disruption.simulation import usable_types
from nodesmith.core.requirements import LABEL_ZONE, Requirement, Requirements
from nodesmith.core.scheduling import solve
from nodesmith.core.scheduling.instancetypes import TypeInfo, type_info

if TYPE_CHECKING:
    import pytest

    from nodesmith.core.model import InstanceType


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


def test_the_disruption_pass_reuses_the_scheduling_data_of_the_catalogue(monkeypatch: pytest.MonkeyPatch) -> None:
    types = catalogue()
    pool = make_nodepool()
    usable_types(types, [pool])  # the first pass builds what it has not seen
    built: list[str] = []
    original = TypeInfo.__init__

    def counting(self: TypeInfo, it: InstanceType) -> None:
        built.append(it.name)
        original(self, it)

    monkeypatch.setattr(TypeInfo, "__init__", counting)
    again = usable_types(types, [pool])
    assert again and built == []  # a warm pass builds nothing again
    changed = replace(types[0], offerings=types[0].offerings[:1])
    usable_types([changed, *types[1:]], [pool])
    assert built == [changed.name]  # only the new object


def test_label_requirements_are_shared_but_each_set_stays_its_own() -> None:
    labels = {
        "topology.kubernetes.io/zone": "test-zone-1",
        "beta.kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": "a",
    }
    first = Requirements.from_labels(labels)
    second = Requirements.from_labels(labels)
    assert first.get(LABEL_ZONE) is second.get(LABEL_ZONE)  # one immutable requirement, built once
    assert first.get("kubernetes.io/arch").values == frozenset({"amd64"})  # the deprecated alias still normalised
    first.add(Requirement(LABEL_ZONE, complement=False, values=frozenset({"test-zone-2"})))
    assert first.get(LABEL_ZONE).values == frozenset()  # the set narrowed its own entry ...
    assert second.get(LABEL_ZONE).values == frozenset({"test-zone-1"})  # ... and no other set's
    assert Requirements.from_labels(labels).get(LABEL_ZONE).values == frozenset({"test-zone-1"})
