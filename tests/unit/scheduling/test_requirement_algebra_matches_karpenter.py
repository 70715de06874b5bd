"""The requirement algebra behaves like Karpenter's pkg/scheduling/requirement(s).go."""

from __future__ import annotations

import pytest

from nodesmith.core.model import NodeSelectorRequirement
from nodesmith.core.requirements import (
    WELL_KNOWN_LABELS,
    Requirement,
    RequirementError,
    Requirements,
)

ZONE = "topology.kubernetes.io/zone"


def req(key: str, op: str, *values: str, min_values: int | None = None) -> Requirement:
    return Requirement.new(key, op, values, min_values=min_values)


def reqs(*items: Requirement) -> Requirements:
    return Requirements(*items)


@pytest.mark.parametrize(
    ("operator", "values", "allowed", "refused"),
    [
        ("In", ("a", "b"), ["a", "b"], ["c"]),
        ("NotIn", ("a",), ["b", "zzz"], ["a"]),
        ("Exists", (), ["a", "1"], []),
        ("DoesNotExist", (), [], ["a", "1"]),
        ("Gt", ("4",), ["5", "100"], ["4", "3", "x"]),
        ("Lt", ("4",), ["3", "0"], ["4", "5", "x"]),
        ("Gte", ("4",), ["4", "5"], ["3", "x"]),
        ("Lte", ("4",), ["4", "0"], ["5", "x"]),
    ],
)
def test_each_operator_allows_exactly_its_values(
    operator: str, values: tuple[str, ...], allowed: list[str], refused: list[str]
) -> None:
    r = req("k", operator, *values)
    assert all(r.has(v) for v in allowed)
    assert not any(r.has(v) for v in refused)


def test_gt_and_lt_are_stored_as_inclusive_bounds() -> None:
    gt = req("karpenter.k8s.aws/instance-cpu", "Gt", "4")
    lt = req("karpenter.k8s.aws/instance-cpu", "Lt", "16")
    assert gt.node_selector_requirements() == (
        NodeSelectorRequirement("karpenter.k8s.aws/instance-cpu", "Gte", ("5",)),
    )
    both = gt.intersection(lt)
    assert [r.operator for r in both.node_selector_requirements()] == ["Gte", "Lte"]
    assert [r.values for r in both.node_selector_requirements()] == [("5",), ("15",)]


def test_intersection_of_value_sets_and_bounds() -> None:
    assert req("k", "In", "a", "b").intersection(req("k", "In", "b", "c")).values == frozenset({"b"})
    assert req("k", "In", "a", "b").intersection(req("k", "NotIn", "a")).values == frozenset({"b"})
    not_in = req("k", "NotIn", "a").intersection(req("k", "NotIn", "b"))
    assert not_in.operator == "NotIn" and not_in.values == frozenset({"a", "b"})
    bounded = req("k", "In", "2", "8", "x").intersection(req("k", "Gt", "4"))
    assert bounded.values == frozenset({"8"}) and bounded.gte is None  # concrete sets drop the bounds
    assert req("k", "Gt", "10").intersection(req("k", "Lt", "5")).operator == "DoesNotExist"
    assert req("k", "In", "a", min_values=2).intersection(req("k", "Exists", min_values=3)).min_values == 3


def test_has_intersection_agrees_with_intersection() -> None:
    cases = [
        (req("k", "In", "a"), req("k", "In", "b"), False),
        (req("k", "In", "a"), req("k", "NotIn", "a"), False),
        (req("k", "NotIn", "a"), req("k", "NotIn", "b"), True),
        (req("k", "Exists"), req("k", "DoesNotExist"), False),
        (req("k", "Gt", "3"), req("k", "In", "4"), True),
        (req("k", "Gt", "3"), req("k", "In", "3"), False),
        (req("k", "Gt", "3"), req("k", "Lt", "4"), False),
    ]
    for a, b, expected in cases:
        assert a.has_intersection(b) is expected, (a, b)
        assert b.has_intersection(a) is expected, (b, a)


def test_deprecated_label_aliases_are_normalised() -> None:
    r = Requirements.from_labels(
        {"beta.kubernetes.io/arch": "arm64", "failure-domain.beta.kubernetes.io/zone": "us-west-2a"}
    )
    assert r.keys() == ["kubernetes.io/arch", ZONE]
    assert req("beta.kubernetes.io/instance-type", "In", "m5.large").key == "node.kubernetes.io/instance-type"


def test_undefined_key_on_node_side_is_compatible_only_with_negative_operators() -> None:
    node = Requirements.from_labels({"kubernetes.io/arch": "amd64"})
    assert node.compatible(reqs(req("team", "NotIn", "a"))) is None
    assert node.compatible(reqs(req("team", "DoesNotExist"))) is None
    reason = node.compatible(reqs(req("team", "In", "a")))
    assert reason is not None and '"team" does not have known values' in reason
    assert node.compatible(reqs(req("team", "Exists"))) is not None


def test_well_known_labels_may_be_undefined_only_when_allowed() -> None:
    pool = Requirements.from_labels({"karpenter.sh/nodepool": "default"})
    pod = reqs(req(ZONE, "In", "us-west-2a"), req("karpenter.k8s.aws/instance-family", "In", "m5"))
    assert pool.compatible(pod) is not None  # strict: an existing node must carry the label
    assert pool.compatible(pod, allow_undefined=WELL_KNOWN_LABELS) is None
    custom = reqs(req("example.com/team", "In", "a"))
    assert pool.compatible(custom, allow_undefined=WELL_KNOWN_LABELS) is not None


def test_defined_keys_must_intersect_but_two_negative_requirements_never_conflict() -> None:
    node = reqs(req("team", "In", "a"))
    assert node.compatible(reqs(req("team", "In", "b"))) == "key team, team In [b] not in team In [a]"
    assert reqs(req("team", "DoesNotExist")).compatible(reqs(req("team", "NotIn", "x"))) is None
    assert reqs(req("team", "DoesNotExist")).compatible(reqs(req("team", "In", "x"))) is not None


def test_add_intersects_and_labels_lists_single_values() -> None:
    r = Requirements.from_node_selector_requirements(
        [
            NodeSelectorRequirement("kubernetes.io/arch", "In", ("amd64", "arm64")),
            NodeSelectorRequirement("kubernetes.io/arch", "In", ("arm64",)),
            NodeSelectorRequirement("kubernetes.io/hostname", "In", ("n1",)),
            NodeSelectorRequirement("karpenter.k8s.aws/instance-cpu", "Gt", ("2",)),
            NodeSelectorRequirement("team", "In", ("a", "b")),
        ]
    )
    assert r.labels() == {"kubernetes.io/arch": "arm64"}  # hostname is restricted, ranges/multi-values are not labels
    assert r.get("undefined").operator == "Exists"
    assert not r.has("undefined")


def test_malformed_requirements_raise_a_clear_error() -> None:
    with pytest.raises(RequirementError, match="unknown operator"):
        req("k", "Like", "a")
    with pytest.raises(RequirementError, match="exactly one integer"):
        req("k", "Gt", "four")
    with pytest.raises(RequirementError, match="exactly one integer"):
        req("k", "Lt", "1", "2")


def test_any_is_deterministic_and_allowed() -> None:
    assert req("k", "In", "b", "a").any() == "a"
    assert req("k", "NotIn", "0", "1").any() == "2"
    assert req("k", "Gt", "7").any() == "8"
    assert req("k", "DoesNotExist").any() == ""
