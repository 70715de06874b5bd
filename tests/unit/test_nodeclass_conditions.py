"""An EC2NodeClass's status conditions read as Karpenter's: one per resolved part, ``Ready`` over them, a transition
time that moves only when a status does, and the class's generation as ``observedGeneration``."""

from __future__ import annotations

from typing import Any

import pytest

from nodesmith.core.api.ec2nodeclass import EC2NodeClass
from nodesmith.core.nodeclass_status import Check, conditions_changed, nodeclass_conditions
from nodesmith.core.timestamps import to_rfc3339

T0 = 1_800_000_000.0
T1 = T0 + 600


def nodeclass(*, generation: int = 3, conditions: list[dict[str, Any]] | None = None) -> EC2NodeClass:
    doc: dict[str, Any] = {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default", "generation": generation},
        "spec": {
            "role": "KarpenterNodeRole-demo",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
        },
    }
    if conditions is not None:
        doc["status"] = {"conditions": conditions}
    return EC2NodeClass.model_validate(doc)


ALL_OK = [Check(type=t, ok=True) for t in ("SubnetsReady", "SecurityGroupsReady", "AMIsReady", "InstanceProfileReady")]
NO_SUBNETS = [
    Check(type="SubnetsReady", ok=False, reason="SubnetsNotFound", message="SubnetSelector did not match any Subnets"),
    *ALL_OK[1:],
]


def by_type(conditions: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in conditions}


def test_every_part_resolved_makes_the_class_ready_with_reasons_named_after_the_types() -> None:
    got = nodeclass_conditions(nodeclass=nodeclass(), checks=ALL_OK, now=T0)
    assert [c["type"] for c in got] == [
        "SubnetsReady",
        "SecurityGroupsReady",
        "AMIsReady",
        "InstanceProfileReady",
        "Ready",
    ]
    for c in got:
        assert (c["status"], c["reason"], c["message"]) == ("True", c["type"], "")
        assert c["lastTransitionTime"] == to_rfc3339(T0)
        assert c["observedGeneration"] == 3


def test_a_selector_that_matches_nothing_fails_its_condition_and_ready_names_it() -> None:
    got = by_type(nodeclass_conditions(nodeclass=nodeclass(), checks=NO_SUBNETS, now=T0))
    assert (got["SubnetsReady"]["status"], got["SubnetsReady"]["reason"]) == ("False", "SubnetsNotFound")
    assert got["SubnetsReady"]["message"] == "SubnetSelector did not match any Subnets"
    assert got["AMIsReady"]["status"] == "True"
    assert (got["Ready"]["status"], got["Ready"]["reason"]) == ("False", "UnhealthyDependents")
    assert got["Ready"]["message"] == "SubnetsReady=False"


def test_ready_lists_every_failing_part() -> None:
    checks = [*NO_SUBNETS[:2], Check(type="AMIsReady", ok=False, reason="AMINotFound", message="none"), ALL_OK[3]]
    got = by_type(nodeclass_conditions(nodeclass=nodeclass(), checks=checks, now=T0))
    assert got["Ready"]["message"] == "SubnetsReady=False, AMIsReady=False"


def test_transition_time_moves_only_when_the_status_changes() -> None:
    first = nodeclass_conditions(nodeclass=nodeclass(), checks=ALL_OK, now=T0)
    same = nodeclass_conditions(nodeclass=nodeclass(conditions=first), checks=ALL_OK, now=T1)
    assert same == first
    assert not conditions_changed(nodeclass(conditions=first), same)

    broken = by_type(nodeclass_conditions(nodeclass=nodeclass(conditions=first), checks=NO_SUBNETS, now=T1))
    assert broken["SubnetsReady"]["lastTransitionTime"] == to_rfc3339(T1)
    assert broken["Ready"]["lastTransitionTime"] == to_rfc3339(T1)
    assert broken["AMIsReady"]["lastTransitionTime"] == to_rfc3339(T0)


def test_a_new_generation_is_a_change_to_write() -> None:
    first = nodeclass_conditions(nodeclass=nodeclass(generation=3), checks=ALL_OK, now=T0)
    later = nodeclass(generation=4, conditions=first)
    again = nodeclass_conditions(nodeclass=later, checks=ALL_OK, now=T1)
    assert {c["observedGeneration"] for c in again} == {4}
    assert {c["lastTransitionTime"] for c in again} == {to_rfc3339(T0)}
    assert conditions_changed(later, again)


def test_a_class_without_status_has_conditions_to_write() -> None:
    assert conditions_changed(nodeclass(), nodeclass_conditions(nodeclass=nodeclass(), checks=ALL_OK, now=T0))


def test_duplicate_or_root_checks_are_refused() -> None:
    with pytest.raises(ValueError, match="distinct types"):
        nodeclass_conditions(nodeclass=nodeclass(), checks=[ALL_OK[0], ALL_OK[0]], now=T0)
    with pytest.raises(ValueError, match="distinct types"):
        nodeclass_conditions(nodeclass=nodeclass(), checks=[Check(type="Ready", ok=True)], now=T0)
