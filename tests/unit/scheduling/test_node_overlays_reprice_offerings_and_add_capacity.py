"""NodeOverlays (``karpenter.sh/v1alpha1``) change each NodePool's instance types as Karpenter's store does:
prices per offering, extended resources per type, higher weight first, equal weights that overlap conflict."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest
from pydantic import ValidationError
from scheduling_support import make_input, make_nodepool, make_pod, make_type

from nodesmith.core.api.nodeoverlay import NodeOverlay
from nodesmith.core.overlay import (
    REASON_CONFLICT,
    REASON_RUNTIME_VALIDATION,
    adjusted_price,
    apply_overlays,
    order_by_weight,
)
from nodesmith.core.scheduling import solve

if TYPE_CHECKING:
    from nodesmith.core.model import InstanceType


def overlay(name: str, *, requirements: list[dict[str, Any]] | None = None, **spec: Any) -> NodeOverlay:
    doc = {
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": name},
        "spec": {"requirements": requirements or [], **spec},
    }
    return NodeOverlay.model_validate(doc)


def types_of(name: str) -> list[dict[str, Any]]:
    return [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [name]}]


def prices(it: InstanceType) -> dict[tuple[str, str], float]:
    return {(o.zone, o.capacity_type): o.price for o in it.offerings}


def by_name(types: Any) -> dict[str, InstanceType]:
    return {it.name: it for it in types}


@pytest.fixture
def catalogue() -> list[InstanceType]:
    return [
        make_type("c5.large", 2, 4, pods=29, od_price=0.085),
        make_type("m5.large", 2, 8, pods=29, od_price=0.096),
        make_type("m5.xlarge", 4, 16, od_price=0.192),
    ]


@pytest.mark.parametrize(
    ("price", "spec", "want"),
    [
        (0.2, {"overlay_price": "0.05"}, 0.05),
        (0.2, {"adjustment": "+0.1"}, 0.3),
        (0.2, {"adjustment": "-0.05"}, 0.15),
        (0.2, {"adjustment": "-10%"}, 0.18),
        (0.2, {"adjustment": "+25%"}, 0.25),
        (0.2, {"adjustment": "-100%"}, 0.0),
        (0.2, {"adjustment": "-0.5"}, 0.0),  # clamped at zero
    ],
)
def test_price_and_adjustments_follow_karpenters_adjusted_price(
    price: float, spec: dict[str, str], want: float
) -> None:
    got = adjusted_price(price, overlay_price=spec.get("overlay_price"), adjustment=spec.get("adjustment"))
    assert got == pytest.approx(want)


def test_an_overlay_reprices_only_the_offerings_it_selects(catalogue: list[InstanceType]) -> None:
    pool = make_nodepool("default")
    spot_m5 = overlay(
        "spot-m5",
        requirements=[
            *types_of("m5.large"),
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
        ],
        priceAdjustment="-50%",
    )
    result = apply_overlays(overlays=[spot_m5], nodepools=[pool], instance_types={"default": catalogue})
    after, before = by_name(result.instance_types["default"]), by_name(catalogue)
    for key, price in prices(after["m5.large"]).items():
        expected = prices(before["m5.large"])[key] * (0.5 if key[1] == "spot" else 1)
        assert price == pytest.approx(expected), key
    assert after["c5.large"] is before["c5.large"]
    assert result.price_overlays == {("default", "m5.large"): ("spot-m5",)}
    assert result.verdicts["spot-m5"].valid


def test_capacity_adds_extended_resources_to_allocatable(catalogue: list[InstanceType]) -> None:
    fuse = overlay("fuse", requirements=types_of("m5.xlarge"), capacity={"smarter-devices/fuse": "1"})
    result = apply_overlays(overlays=[fuse], nodepools=[make_nodepool()], instance_types={"default": catalogue})
    types = by_name(result.instance_types["default"])
    assert types["m5.xlarge"].allocatable["smarter-devices/fuse"] == 1
    assert "smarter-devices/fuse" not in types["m5.large"].capacity
    assert types["m5.xlarge"].allocatable["cpu"] == by_name(catalogue)["m5.xlarge"].allocatable["cpu"]


def test_requirements_match_the_nodepool_name_and_its_template_labels(catalogue: list[InstanceType]) -> None:
    team_a = make_nodepool("team-a", labels={"team": "a"})
    team_b = make_nodepool("team-b", labels={"team": "b"})
    for_a = overlay("for-a", requirements=[{"key": "team", "operator": "In", "values": ["a"]}], price="0.001")
    by_pool = overlay(
        "by-pool", requirements=[{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["team-b"]}], price="9"
    )
    result = apply_overlays(
        overlays=[for_a, by_pool],
        nodepools=[team_a, team_b],
        instance_types={"team-a": catalogue, "team-b": catalogue},
    )
    a, b = by_name(result.instance_types["team-a"]), by_name(result.instance_types["team-b"])
    assert set(prices(a["c5.large"]).values()) == {0.001}
    assert set(prices(b["c5.large"]).values()) == {9.0}


def test_higher_weight_sets_the_price_and_wins_a_shared_resource(catalogue: list[InstanceType]) -> None:
    heavy = overlay("heavy", requirements=types_of("m5.large"), weight=50, price="0.5", capacity={"example.com/x": "4"})
    light = overlay("light", weight=10, price="0.01", capacity={"example.com/x": "1", "example.com/y": "2"})
    result = apply_overlays(overlays=[light, heavy], nodepools=[make_nodepool()], instance_types={"default": catalogue})
    types = by_name(result.instance_types["default"])
    assert set(prices(types["m5.large"]).values()) == {0.5}
    assert set(prices(types["c5.large"]).values()) == {0.01}
    assert types["m5.large"].capacity["example.com/x"] == 4
    assert types["m5.large"].capacity["example.com/y"] == 2
    assert result.conflicts == []


def test_equal_weights_pricing_the_same_offering_conflict_and_the_later_is_not_applied(
    catalogue: list[InstanceType],
) -> None:
    first = overlay("zeta", requirements=types_of("m5.large"), weight=10, price="0.3")
    second = overlay("alpha", weight=10, priceAdjustment="-90%")
    result = apply_overlays(
        overlays=[second, first], nodepools=[make_nodepool()], instance_types={"default": catalogue}
    )
    verdict = result.verdicts["alpha"]
    assert (verdict.valid, verdict.reason, verdict.message) == (False, REASON_CONFLICT, "conflict with another overlay")
    assert verdict.conflicts_with == ("zeta",)
    assert result.verdicts["zeta"].valid
    types, before = by_name(result.instance_types["default"]), by_name(catalogue)
    assert types["c5.large"] is before["c5.large"], "a conflicting overlay applies nowhere, not even where it is alone"
    assert set(prices(types["m5.large"]).values()) == {0.3}


def test_equal_weights_on_disjoint_offerings_or_resources_do_not_conflict(catalogue: list[InstanceType]) -> None:
    spot = overlay(
        "spot", requirements=[{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}], price="1"
    )
    od = overlay(
        "od", requirements=[{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}], price="2"
    )
    x = overlay("x", capacity={"example.com/x": "1"})
    y = overlay("y", capacity={"example.com/y": "1"})
    result = apply_overlays(
        overlays=[spot, od, x, y], nodepools=[make_nodepool()], instance_types={"default": catalogue}
    )
    assert result.conflicts == []
    c5 = by_name(result.instance_types["default"])["c5.large"]
    assert {ct: p for (_, ct), p in prices(c5).items()} == {"spot": 1.0, "on-demand": 2.0}
    assert (c5.capacity["example.com/x"], c5.capacity["example.com/y"]) == (1, 1)


def test_equal_weight_capacity_on_the_same_resource_conflicts(catalogue: list[InstanceType]) -> None:
    one = overlay("b-fuse", capacity={"smarter-devices/fuse": "1"})
    two = overlay("a-fuse", requirements=types_of("c5.large"), capacity={"smarter-devices/fuse": "2"})
    result = apply_overlays(overlays=[one, two], nodepools=[make_nodepool()], instance_types={"default": catalogue})
    assert [v.name for v in result.conflicts] == ["a-fuse"]
    assert by_name(result.instance_types["default"])["c5.large"].capacity["smarter-devices/fuse"] == 1


def test_order_is_weight_descending_then_name_descending() -> None:
    ordered = order_by_weight([overlay("a", weight=5), overlay("b"), overlay("c", weight=5), overlay("ab", weight=5)])
    assert [o.name for o in ordered] == ["c", "ab", "a", "b"]


def test_an_overlay_changes_the_instance_type_a_pod_gets(catalogue: list[InstanceType]) -> None:
    pool = make_nodepool(
        requirements=[{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]
    )
    pod = make_pod(cpu="1", memory="1Gi")
    plain = solve(make_input([pod], nodepools=[pool], types=catalogue))
    assert plain.nodeclaims[0].instance_types[0].name == "c5.large"
    cheap = overlay("m5-discount", requirements=types_of("m5.large"), price="0.01")
    result = apply_overlays(overlays=[cheap], nodepools=[pool], instance_types={"default": catalogue})
    overlaid = solve(
        replace(make_input([pod], nodepools=[pool], types=catalogue), nodepool_instance_types=result.instance_types)
    )
    assert overlaid.nodeclaims[0].instance_types[0].name == "m5.large"
    assert overlaid.nodeclaims[0].price_per_hour == pytest.approx(0.01)


def test_a_pod_asking_for_an_overlaid_resource_fits_only_the_overlaid_types(catalogue: list[InstanceType]) -> None:
    pool = make_nodepool()
    pod = make_pod(cpu="500m", extra={"smarter-devices/fuse": 1})
    before = solve(make_input([pod], nodepools=[pool], types=catalogue))
    assert pod.key in before.unschedulable
    fuse = overlay("fuse", requirements=types_of("m5.xlarge"), capacity={"smarter-devices/fuse": "1"})
    result = apply_overlays(overlays=[fuse], nodepools=[pool], instance_types={"default": catalogue})
    after = solve(
        replace(make_input([pod], nodepools=[pool], types=catalogue), nodepool_instance_types=result.instance_types)
    )
    assert [it.name for it in after.nodeclaims[0].instance_types] == ["m5.xlarge"]


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ({"price": "0.5", "priceAdjustment": "-10%"}, "cannot set both 'price' and 'priceAdjustment'"),
        ({"priceAdjustment": "10%"}, "is not a price adjustment"),
        ({"priceAdjustment": "-150%"}, "is not a price adjustment"),
        ({"price": "-1"}, "is not a price"),
        ({"capacity": {"cpu": "2"}}, "invalid resource restricted"),
        ({"capacity": {"example.com/x": "lots"}}, "not a Kubernetes quantity"),
        ({"weight": 0}, "greater than or equal to 1"),
        ({"weight": 10001}, "less than or equal to 10000"),
        ({"requirements": [{"key": "team", "operator": "NotIn"}]}, "must have a value defined"),
        ({"requirements": [{"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["x"]}]}, "integer"),
        ({"requirments": []}, "Extra inputs are not permitted"),
    ],
)
def test_malformed_overlays_are_rejected_with_the_reason(spec: dict[str, Any], says: str) -> None:
    doc = {"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay", "metadata": {"name": "bad"}, "spec": spec}
    with pytest.raises(ValidationError, match=says.replace("(", r"\(").replace(")", r"\)")):
        NodeOverlay.model_validate(doc)


@pytest.mark.parametrize(
    ("requirement", "selected"),
    [
        ({"key": "team", "operator": "In", "values": ["a"]}, set()),  # a label the NodePool does not define
        ({"key": "team", "operator": "NotIn", "values": ["a"]}, {"c5.large", "m5.large", "m5.xlarge"}),
        ({"key": "team", "operator": "DoesNotExist"}, {"c5.large", "m5.large", "m5.xlarge"}),
        ({"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "Exists"}, set()),
        ({"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["2"]}, {"m5.xlarge"}),
        ({"key": "karpenter.k8s.aws/instance-memory", "operator": "Lte", "values": ["8192"]}, {"c5.large", "m5.large"}),
        ({"key": "kubernetes.io/arch", "operator": "NotIn", "values": ["amd64"]}, set()),
        ({"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["eu-west-1a"]}, set()),
    ],
)
def test_requirements_select_types_with_kubernetes_semantics(
    catalogue: list[InstanceType], requirement: dict[str, Any], selected: set[str]
) -> None:
    result = apply_overlays(
        overlays=[overlay("o", requirements=[requirement], price="1")],
        nodepools=[make_nodepool()],
        instance_types={"default": catalogue},
    )
    assert {name for _, name in result.price_overlays} == selected


def test_a_restricted_requirement_key_fails_runtime_validation_and_applies_nowhere(
    catalogue: list[InstanceType],
) -> None:
    restricted = overlay(
        "restricted",
        requirements=[{"key": "karpenter.sh/unknown", "operator": "Exists"}],
        priceAdjustment="-50%",
    )  # the CRD schema accepts it; Karpenter's RuntimeValidate refuses it
    assert restricted.runtime_errors()[0][0] == "spec.requirements[0].key"
    result = apply_overlays(overlays=[restricted], nodepools=[make_nodepool()], instance_types={"default": catalogue})
    verdict = result.verdicts["restricted"]
    assert (verdict.valid, verdict.reason) == (False, REASON_RUNTIME_VALIDATION)
    assert 'label domain "karpenter.sh" is restricted' in verdict.message
    assert result.instance_types["default"] is catalogue
