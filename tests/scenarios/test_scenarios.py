"""Karpenter-semantics scenarios run through ``nodesmith simulate -o json``.

Each directory next to this file is one scenario: Kubernetes/Karpenter manifests (``*.yaml``) and
an ``expect.yaml`` of *properties* the simulation must have (not a full expected output, which
would break on every catalogue or price change). A scenario can be replayed by hand with::

    nodesmith simulate -o json --price-table ../shared/data/ec2-ondemand-prices-us-east-1.json \\
        $(for f in tests/scenarios/<name>/*.yaml; do [ "${f##*/}" = expect.yaml ] || echo -f "$f"; done)

adding ``--capacity-reservations tests/scenarios/<name>/capacity-reservations.json`` when the scenario has that
file (a saved ``aws ec2 describe-capacity-reservations`` answer).

Properties (every key optional; an unknown key fails the scenario, so a typo cannot pass):

``nodeclaims: N``                   number of new NodeClaims
``nodepool: NAME``                  every NodeClaim comes from this NodePool (and there is one)
``instance_types: [T, ...]``        every NodeClaim keeps exactly these instance types
``all_instance_types_match``        ``{label: [values]}``: every kept type has one of the values
``all_instance_types_satisfy``      ``[{key, operator, values}]``: every kept type's labels satisfy
                                    each requirement (In, NotIn, Exists, DoesNotExist, Gt, Lt)
``cheapest_first: true``            each NodeClaim's types are in non-decreasing price order
``capacity_type`` / ``zone``        every NodeClaim is pinned to this capacity type / zone
``distinct_zones: N``               N NodeClaims, each pinned to a different zone
``all_scheduled: true``             nothing is unschedulable
``scheduled: [ns/pod, ...]``        these pods are placed (new or existing capacity)
``scheduled_count: N``              this many pods are placed in total
``unschedulable: [ns/pod, ...]``    exactly these pods are unschedulable
``unschedulable_count: N``          this many pods are unschedulable
``reason_contains: {ns/pod: text}`` the pod's reason contains the text (case-insensitive)
``all_reasons_contain: text``       every unschedulable pod's reason contains the text
``existing_node_pods``              ``{node: [ns/pod]}``: exactly these existing nodes receive exactly
                                    these pods
``pods_on_nodepool``                ``{pool: [ns/pod]}``: new NodeClaims of the pool hold exactly these
``cost_per_hour: X``                total new cost (USD/hour), static NodeClaims included
``first_instance_type: T``          every NodeClaim's cheapest (first) kept type is T
``overlays_not_applied: [N, ...]``  exactly these NodeOverlays are reported not applied (conflict)
``static_nodepools``                ``{pool: {launch, nodes, remove, blocked, holds}}``: the static NodePool launches
                                    ``launch`` NodeClaims, has ``nodes`` active, removes exactly the nodes ``remove``
                                    (in that order), ``blocked`` is in why fewer launch, and its new NodeClaims hold
                                    exactly the pods ``holds`` (every key optional)

The instance catalogue is the embedded (moto) EC2 catalogue, loaded once per session (a scenario
whose EC2NodeClass changes capacity — kubelet, block devices — gets its own); prices come from the
shared on-demand price table, without which the suite is skipped.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodesmith.adapters.manifests import load_manifests
from nodesmith.cli.simulate import load_catalogue, run_simulate
from nodesmith.cli.simulate_catalogue import CatalogueSource
from nodesmith.core.model import InstanceType

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PRICE_TABLE = REPO.parent / "shared" / "data" / "ec2-ondemand-prices-us-east-1.json"
REGION = "us-east-1"
RESERVATIONS = "capacity-reservations.json"
SCENARIOS = sorted(p for p in HERE.iterdir() if (p / "expect.yaml").is_file())

Result = Mapping[str, Any]
Catalogue = Mapping[str, InstanceType]


@pytest.fixture(scope="session")
def catalogue() -> list[InstanceType]:
    """The embedded EC2 catalogue priced from the shared table, built once for every scenario."""
    if not PRICE_TABLE.is_file():
        pytest.skip(
            f"scenario suite needs the on-demand price table at {PRICE_TABLE} "
            "(the shared data directory beside the repository); it is absent on this machine"
        )
    return load_catalogue(region=REGION, price_table=PRICE_TABLE, use_aws=False)


def _shapes_capacity(files: Sequence[Path]) -> bool:
    """True when an EC2NodeClass sets what changes instance capacity (kubelet, block devices, instance store)."""
    return any(
        nc.spec.kubelet is not None or nc.spec.block_device_mappings or nc.spec.instance_store_policy
        for nc in load_manifests(list(files)).ec2nodeclasses
    )


def _simulate(scenario: Path, instance_types: Sequence[InstanceType], capsys: pytest.CaptureFixture[str]) -> Result:
    files = sorted(p for p in scenario.glob("*.yaml") if p.name != "expect.yaml")
    code = run_simulate(
        files=files,
        source=CatalogueSource(
            region=REGION,
            price_table=PRICE_TABLE,
            # The shared catalogue has Karpenter's default node settings; a scenario whose node class
            # changes capacity gets the catalogue simulate builds for it (from the on-disk cache).
            instance_types=None if _shapes_capacity(files) else instance_types,
        ),
        output="json",
        capacity_reservations=reservations if (reservations := scenario / RESERVATIONS).is_file() else None,
    )
    captured = capsys.readouterr()
    assert code == 0, f"simulate exited {code}: {captured.err}"
    result: dict[str, Any] = json.loads(captured.out)
    return result


# ------------------------------------------------------------------------------------------ helpers


def _placements(result: Result) -> list[str]:
    """Every placed pod, once per placement (duplicates reveal a pod placed twice)."""
    pods = [p for nc in result["nodeclaims"] for p in nc["pods"]]
    pods += [p for node in result["existing_nodes"] for p in node["pods"]]
    return pods


def _kept_types(result: Result, catalogue: Catalogue) -> list[InstanceType]:
    names = [name for nc in result["nodeclaims"] for name in nc["instance_types"]]
    unknown = sorted(set(names) - set(catalogue))
    assert not unknown, f"NodeClaims name instance types missing from the catalogue: {unknown}"
    return [catalogue[name] for name in names]


def _compare(value: str | None, bound: str, greater: bool) -> bool:
    try:
        number, limit = int(value or ""), int(bound)
    except ValueError:
        return False
    return number > limit if greater else number < limit


_OPERATORS: dict[str, Callable[[str | None, Sequence[str]], bool]] = {
    "In": lambda value, values: value is not None and value in values,
    "NotIn": lambda value, values: value is None or value not in values,
    "Exists": lambda value, _: value is not None,
    "DoesNotExist": lambda value, _: value is None,
    "Gt": lambda value, values: _compare(value, values[0], greater=True),
    "Lt": lambda value, values: _compare(value, values[0], greater=False),
}


def _satisfies(labels: Mapping[str, str], key: str, operator: str, values: Sequence[str]) -> bool:
    """Kubernetes node-selector semantics of one requirement against a label set."""
    assert operator in _OPERATORS, f"expect.yaml: unknown operator {operator!r}"
    return _OPERATORS[operator](labels.get(key), values)


def _require_nodeclaims(result: Result, prop: str) -> list[Mapping[str, Any]]:
    claims: list[Mapping[str, Any]] = result["nodeclaims"]
    assert claims, f"{prop}: expected at least one NodeClaim, got none (unschedulable: {result['unschedulable']})"
    return claims


# ------------------------------------------------------------------------------------- properties


def _check_nodeclaims(want: int, result: Result, _: Catalogue) -> None:
    got = len(result["nodeclaims"])
    pods = [nc["pods"] for nc in result["nodeclaims"]]
    assert got == want, f"nodeclaims: want {want}, got {got} holding {pods}"


def _check_nodepool(want: str, result: Result, _: Catalogue) -> None:
    pools = sorted({nc["nodepool"] for nc in _require_nodeclaims(result, "nodepool")})
    assert pools == [want], f"nodepool: want only {want!r}, got {pools}"


def _check_instance_types(want: list[str], result: Result, _: Catalogue) -> None:
    for nc in _require_nodeclaims(result, "instance_types"):
        assert sorted(nc["instance_types"]) == sorted(want), f"instance_types: want {want}, got {nc['instance_types']}"


def _check_all_match(want: Mapping[str, list[Any]], result: Result, catalogue: Catalogue) -> None:
    _require_nodeclaims(result, "all_instance_types_match")
    for it in _kept_types(result, catalogue):
        for key, values in want.items():
            allowed = [str(v) for v in values]
            assert it.labels.get(key) in allowed, f"{it.name}: {key}={it.labels.get(key)!r}, want one of {allowed}"


def _check_all_satisfy(want: list[Mapping[str, Any]], result: Result, catalogue: Catalogue) -> None:
    _require_nodeclaims(result, "all_instance_types_satisfy")
    for it in _kept_types(result, catalogue):
        for req in want:
            key, op, values = req["key"], req["operator"], [str(v) for v in req.get("values", [])]
            assert _satisfies(it.labels, key, op, values), (
                f"{it.name}: {key}={it.labels.get(key)!r} does not satisfy {op} {values}"
            )


def _check_cheapest_first(want: bool, result: Result, catalogue: Catalogue) -> None:
    assert want is True, "cheapest_first only takes `true`"
    for nc in _require_nodeclaims(result, "cheapest_first"):
        capacity = frozenset({nc["capacity_type"]}) if nc["capacity_type"] else None
        zones = frozenset({nc["zone"]}) if nc["zone"] else None
        prices = [catalogue[name].cheapest_price(capacity_types=capacity, zones=zones) for name in nc["instance_types"]]
        assert None not in prices, (
            f"a kept type has no compatible offering: {list(zip(nc['instance_types'], prices, strict=True))}"
        )
        assert prices == sorted(prices), f"not cheapest first: {list(zip(nc['instance_types'], prices, strict=True))}"  # type: ignore[type-var]
        assert math.isclose(nc["price_per_hour"], prices[0], rel_tol=1e-9), (  # type: ignore[arg-type]
            f"price_per_hour {nc['price_per_hour']} is not the first type's price {prices[0]}"
        )


def _check_capacity_type(want: str, result: Result, _: Catalogue) -> None:
    got = sorted({str(nc["capacity_type"]) for nc in _require_nodeclaims(result, "capacity_type")})
    assert got == [want], f"capacity_type: want {want}, got {got}"


def _check_zone(want: str, result: Result, _: Catalogue) -> None:
    got = sorted({str(nc["zone"]) for nc in _require_nodeclaims(result, "zone")})
    assert got == [want], f"zone: want {want}, got {got}"


def _check_distinct_zones(want: int, result: Result, _: Catalogue) -> None:
    zones = [nc["zone"] for nc in _require_nodeclaims(result, "distinct_zones")]
    assert None not in zones, f"distinct_zones: a NodeClaim is not pinned to a zone: {zones}"
    assert len(set(zones)) == len(zones) == want, f"distinct_zones: want {want} different zones, got {zones}"


def _check_all_scheduled(want: bool, result: Result, _: Catalogue) -> None:
    assert want is True, "all_scheduled only takes `true`"
    assert result["unschedulable"] == [], f"unschedulable pods: {result['unschedulable']}"


def _check_scheduled(want: list[str], result: Result, _: Catalogue) -> None:
    missing = sorted(set(want) - set(_placements(result)))
    assert not missing, f"not placed: {missing}; unschedulable: {result['unschedulable']}"


def _check_scheduled_count(want: int, result: Result, _: Catalogue) -> None:
    got = len(_placements(result))
    assert got == want, f"scheduled_count: want {want}, got {got}"


def _check_unschedulable(want: list[str], result: Result, _: Catalogue) -> None:
    got = sorted(u["pod"] for u in result["unschedulable"])
    assert got == sorted(want), f"unschedulable: want {sorted(want)}, got {result['unschedulable']}"


def _check_unschedulable_count(want: int, result: Result, _: Catalogue) -> None:
    got = len(result["unschedulable"])
    assert got == want, f"unschedulable_count: want {want}, got {got}: {result['unschedulable']}"


def _check_all_reasons_contain(want: str, result: Result, _: Catalogue) -> None:
    for item in result["unschedulable"]:
        assert want.lower() in item["reason"].lower(), (
            f"{item['pod']}: reason {item['reason']!r} does not mention {want!r}"
        )


def _check_reason_contains(want: Mapping[str, str], result: Result, _: Catalogue) -> None:
    reasons = {u["pod"]: u["reason"] for u in result["unschedulable"]}
    for pod, text in want.items():
        assert pod in reasons, f"reason_contains: {pod} is not unschedulable"
        assert text.lower() in reasons[pod].lower(), f"{pod}: reason {reasons[pod]!r} does not mention {text!r}"


def _check_existing_node_pods(want: Mapping[str, list[str]], result: Result, _: Catalogue) -> None:
    got = {n["name"]: sorted(n["pods"]) for n in result["existing_nodes"]}
    assert got == {k: sorted(v) for k, v in want.items()}, f"existing_node_pods: want {dict(want)}, got {got}"


def _check_pods_on_nodepool(want: Mapping[str, list[str]], result: Result, _: Catalogue) -> None:
    got: dict[str, list[str]] = {}
    for nc in result["nodeclaims"]:
        got.setdefault(nc["nodepool"], []).extend(nc["pods"])
    got = {k: sorted(v) for k, v in got.items()}
    assert got == {k: sorted(v) for k, v in want.items()}, f"pods_on_nodepool: want {dict(want)}, got {got}"


def _check_cost(want: float, result: Result, _: Catalogue) -> None:
    assert math.isclose(result["cost_per_hour"], float(want), abs_tol=1e-9), (
        f"cost_per_hour: want {want}, got {result['cost_per_hour']}"
    )


def _check_first_type(want: str, result: Result, _: Catalogue) -> None:
    firsts = [nc["instance_types"][0] for nc in _require_nodeclaims(result, "first_instance_type")]
    assert set(firsts) == {want}, f"first_instance_type: want {want}, got {firsts}"


def _check_overlays_not_applied(want: list[str], result: Result, _: Catalogue) -> None:
    assert "overlays" in result, "overlays_not_applied: the result has no overlays (no NodeOverlay was read)"
    got = sorted(o["name"] for o in result["overlays"] if not o["valid"])
    assert got == sorted(want), f"overlays_not_applied: want {sorted(want)}, got {got}"


def _check_static(want: Mapping[str, Mapping[str, Any]], result: Result, _: Catalogue) -> None:
    got = {entry["nodepool"]: entry for entry in result.get("static_nodepools", [])}
    assert set(got) == set(want), f"static_nodepools: want {sorted(want)}, got {sorted(got)}"
    on_node = {n["name"]: n["pods"] for n in result["existing_nodes"]}
    for pool, props in want.items():
        entry = got[pool]
        unknown = sorted(set(props) - {"launch", "nodes", "remove", "blocked", "holds"})
        assert not unknown, f"static_nodepools.{pool}: unknown properties {unknown}"
        for key in ("launch", "nodes", "remove"):
            if key in props:
                assert entry[key] == props[key], f"static_nodepools.{pool}.{key}: want {props[key]}, got {entry[key]}"
        if "blocked" in props:
            assert props["blocked"] in entry["blocked"], f"static_nodepools.{pool}: blocked {entry['blocked']!r}"
        if "holds" in props:
            held = sorted(p for name in entry["new_nodes"] for p in on_node.get(name, []))
            assert held == sorted(props["holds"]), f"static_nodepools.{pool}: new NodeClaims hold {held}"
        assert len(entry["new_nodes"]) == entry["launch"], entry
        assert bool(entry["instance_type"]) == bool(entry["launch"]), entry


CHECKS: dict[str, Callable[[Any, Result, Catalogue], None]] = {
    "nodeclaims": _check_nodeclaims,
    "nodepool": _check_nodepool,
    "instance_types": _check_instance_types,
    "all_instance_types_match": _check_all_match,
    "all_instance_types_satisfy": _check_all_satisfy,
    "cheapest_first": _check_cheapest_first,
    "capacity_type": _check_capacity_type,
    "zone": _check_zone,
    "distinct_zones": _check_distinct_zones,
    "all_scheduled": _check_all_scheduled,
    "scheduled": _check_scheduled,
    "scheduled_count": _check_scheduled_count,
    "unschedulable": _check_unschedulable,
    "unschedulable_count": _check_unschedulable_count,
    "reason_contains": _check_reason_contains,
    "all_reasons_contain": _check_all_reasons_contain,
    "existing_node_pods": _check_existing_node_pods,
    "pods_on_nodepool": _check_pods_on_nodepool,
    "cost_per_hour": _check_cost,
    "first_instance_type": _check_first_type,
    "overlays_not_applied": _check_overlays_not_applied,
    "static_nodepools": _check_static,
}


def _check_invariants(result: Result) -> None:
    """What every simulation result must satisfy, whatever the scenario."""
    assert set(result) - {"overlays", "static_nodepools"} == {
        "nodeclaims",
        "existing_nodes",
        "unschedulable",
        "cost_per_hour",
    }
    placed = _placements(result)
    unschedulable = [u["pod"] for u in result["unschedulable"]]
    everything = placed + unschedulable
    assert len(everything) == len(set(everything)), f"a pod is reported twice: {sorted(everything)}"
    for nc in result["nodeclaims"]:
        assert nc["instance_types"], f"a NodeClaim with no instance type: {nc}"
        assert nc["pods"], f"a NodeClaim with no pod: {nc}"
        assert nc["capacity_type"] in ("reserved", "spot", "on-demand", None)
    total = sum(nc["price_per_hour"] for nc in result["nodeclaims"])
    total += sum(s["price_per_hour"] * s["launch"] for s in result.get("static_nodepools", []))
    assert math.isclose(result["cost_per_hour"], total, abs_tol=1e-6), "cost_per_hour is not the sum of NodeClaims"
    names = [n["name"] for n in result["existing_nodes"]]
    assert names == sorted(names), "existing_nodes are not sorted by name"
    assert all(n["pods"] for n in result["existing_nodes"]), "existing_nodes lists a node that received no pod"


def test_every_scenario_directory_has_manifests_and_expectations() -> None:
    assert len(SCENARIOS) >= 20
    for scenario in SCENARIOS:
        manifests = [p for p in scenario.glob("*.yaml") if p.name != "expect.yaml"]
        assert manifests, f"{scenario.name}: no manifests"
        expect = yaml.safe_load((scenario / "expect.yaml").read_text())
        assert isinstance(expect, dict) and expect, f"{scenario.name}: expect.yaml is empty"
        unknown = sorted(set(expect) - set(CHECKS))
        assert not unknown, f"{scenario.name}: unknown properties {unknown}; known: {sorted(CHECKS)}"


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_scenario(scenario: Path, catalogue: list[InstanceType], capsys: pytest.CaptureFixture[str]) -> None:
    expect: dict[str, Any] = yaml.safe_load((scenario / "expect.yaml").read_text())
    result = _simulate(scenario, catalogue, capsys)
    _check_invariants(result)
    by_name = {it.name: it for it in catalogue}
    failures = []
    for prop, want in expect.items():
        try:
            CHECKS[prop](want, result, by_name)
        except AssertionError as exc:
            failures.append(f"{prop}: {exc}")
    assert not failures, "\n".join(failures) + "\n\nresult (instance types shortened):\n" + _summary(result)


def _summary(result: Result) -> str:
    """The result as indented JSON with each NodeClaim's instance types cut to the first five."""
    short = dict(result)
    short["nodeclaims"] = [
        {
            **nc,
            "instance_types": nc["instance_types"][:5]
            + ([f"... {len(nc['instance_types'])} in all"] if len(nc["instance_types"]) > 5 else []),
        }
        for nc in result["nodeclaims"]
    ]
    return json.dumps(short, indent=1)
