"""NodePool and pod requirements (every operator) decide which instance types a NodeClaim may use."""

from __future__ import annotations

import pytest
from scheduling_support import make_input, make_nodepool, make_pod

from nodesmith.core.model import NodeSelectorRequirement, NodeSelectorTerm, WeightedNodeSelectorTerm
from nodesmith.core.scheduling import solve

CPU = "karpenter.k8s.aws/instance-cpu"
FAMILY = "karpenter.k8s.aws/instance-family"
ZONE = "topology.kubernetes.io/zone"


def kept(**pod_kwargs: object) -> list[str]:
    result = solve(make_input([make_pod(cpu="1", memory="1Gi", **pod_kwargs)]))  # type: ignore[arg-type]
    assert not result.unschedulable, result.unschedulable
    return sorted(t.name for nc in result.nodeclaims for t in nc.instance_types)


@pytest.mark.parametrize(
    ("term", "expected"),
    [
        ([("kubernetes.io/arch", "In", ("arm64",))], ["m6g.large", "m6g.xlarge"]),
        ([(FAMILY, "NotIn", ("c5", "m5", "r5", "g4dn"))], ["m6g.large", "m6g.xlarge"]),
        ([(CPU, "Gt", ("8",))], ["c5.4xlarge", "g4dn.12xlarge", "m5.4xlarge"]),
        ([(CPU, "Lt", ("4",)), ("kubernetes.io/arch", "In", ("amd64",))], ["c5.large", "m5.large", "r5.large"]),
        ([(CPU, "Gte", ("16",)), (CPU, "Lte", ("16",))], ["c5.4xlarge", "m5.4xlarge"]),
        ([("karpenter.k8s.aws/instance-gpu-count", "Exists", ())], ["g4dn.12xlarge", "g4dn.xlarge"]),
        (
            [("karpenter.k8s.aws/instance-gpu-count", "DoesNotExist", ()), (CPU, "In", ("16",))],
            ["c5.4xlarge", "m5.4xlarge"],
        ),
    ],
)
def test_pod_required_affinity_operators_select_instance_types(
    term: list[tuple[str, str, tuple[str, ...]]], expected: list[str]
) -> None:
    assert kept(affinity=[term]) == expected


def test_nodepool_requirements_filter_types_before_any_pod() -> None:
    pool = make_nodepool(
        requirements=[
            {"key": FAMILY, "operator": "In", "values": ["c5"]},
            {"key": CPU, "operator": "Gt", "values": ["2"]},
        ]
    )
    result = solve(make_input([make_pod(cpu="1")], nodepools=[pool]))
    assert sorted(t.name for t in result.nodeclaims[0].instance_types) == ["c5.2xlarge", "c5.4xlarge", "c5.xlarge"]


def test_zone_requirement_limits_offerings_and_pins_the_zone() -> None:
    (nc,) = solve(make_input([make_pod(node_selector={ZONE: "us-west-2b"})])).nodeclaims
    assert nc.zones == frozenset({"us-west-2b"}) and nc.zone == "us-west-2b"
    assert {r.key: r.values for r in nc.requirements}[ZONE] == ("us-west-2b",)


def test_deprecated_aliases_in_pod_selectors_are_understood() -> None:
    (nc,) = solve(make_input([make_pod(node_selector={"beta.kubernetes.io/arch": "arm64"})])).nodeclaims
    assert {t.name for t in nc.instance_types} == {"m6g.large", "m6g.xlarge"}


def test_conflicting_pod_and_nodepool_requirements_make_the_pod_unschedulable() -> None:
    pool = make_nodepool(requirements=[{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}])
    pod = make_pod(node_selector={"kubernetes.io/arch": "arm64"})
    result = solve(make_input([pod], nodepools=[pool]))
    assert result.nodeclaims == ()
    assert "incompatible requirements" in result.unschedulable[pod.key]
    assert "kubernetes.io/arch" in result.unschedulable[pod.key]


def test_required_affinity_terms_are_ored() -> None:
    pod = make_pod(affinity=[[(FAMILY, "In", ("x9",))], [(FAMILY, "In", ("r5",))]])
    (nc,) = solve(make_input([pod])).nodeclaims
    assert {t.name for t in nc.instance_types} == {"r5.large", "r5.xlarge"}


def test_preferred_node_affinity_is_honoured_when_possible_and_relaxed_when_not() -> None:
    def prefer(family: str) -> tuple[WeightedNodeSelectorTerm, ...]:
        term = NodeSelectorTerm((NodeSelectorRequirement(FAMILY, "In", (family,)),))
        return (WeightedNodeSelectorTerm(weight=50, term=term),)

    honoured = make_pod(preferred_node_affinity=prefer("r5"))
    (nc,) = solve(make_input([honoured])).nodeclaims
    assert {t.name for t in nc.instance_types} == {"r5.large", "r5.xlarge"}
    impossible = make_pod(preferred_node_affinity=prefer("x9"))
    result = solve(make_input([impossible]))
    assert result.unschedulable == {}
    assert len(result.nodeclaims[0].instance_types) > 2


def test_heaviest_preference_is_tried_first() -> None:
    terms = tuple(
        WeightedNodeSelectorTerm(weight=w, term=NodeSelectorTerm((NodeSelectorRequirement(FAMILY, "In", (f,)),)))
        for w, f in ((10, "c5"), (90, "m5"))
    )
    (nc,) = solve(make_input([make_pod(preferred_node_affinity=terms)])).nodeclaims
    assert {t.labels[FAMILY] for t in nc.instance_types} == {"m5"}


def test_min_values_keep_enough_distinct_families_or_refuse() -> None:
    pool = make_nodepool(requirements=[{"key": FAMILY, "operator": "In", "values": ["c5", "m5", "r5"], "minValues": 3}])
    (nc,) = solve(make_input([make_pod(cpu="1")], nodepools=[pool])).nodeclaims
    assert {t.labels[FAMILY] for t in nc.instance_types} == {"c5", "m5", "r5"}
    big = make_pod(cpu="6")  # only c5/m5 have 8+ vCPU types: 2 families < minValues 3
    result = solve(make_input([big], nodepools=[pool]))
    assert result.nodeclaims == ()
    assert "minValues" in result.unschedulable[big.key] and FAMILY in result.unschedulable[big.key]
