"""Rendering a scheduling result for ``nodesmith simulate``: one JSON object, or rich tables.

JSON shape (``-o json``; every list in a deterministic order)::

    {"nodeclaims": [{"nodepool": str, "instance_types": [str, cheapest first],
                     "capacity_type": "spot" | "on-demand" | null, "zone": str | null,
                     "price_per_hour": float, "pods": ["namespace/name", ...]}],
     "existing_nodes": [{"name": str, "pods": ["namespace/name", ...]}],
     "unschedulable": [{"pod": "namespace/name", "reason": str}],
     "cost_per_hour": float}

NodeClaims are sorted by NodePool then by their first pod; pods by ``namespace/name``;
``existing_nodes`` lists only the nodes that receive pending pods, by name; ``unschedulable`` is
sorted by pod. Prices are USD per hour, rounded to 6 decimals. Instance types keep the scheduler's
order (cheapest compatible offering first). ``capacity_type`` is what the launch would ask
CreateFleet for (:func:`launch_capacity_type`); ``zone`` is set only when the plan is pinned to one
zone (CreateFleet picks among the others).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nodesmith.core.scheduling.types import NodeClaimPlan, SchedulingResult

__all__ = ["launch_capacity_type", "price_note", "print_table", "result_to_json"]

_MAX_TYPES_SHOWN = 6
_MAX_PODS_SHOWN = 8


def _price(value: float) -> float:
    return round(float(value), 6)


def _sorted_claims(result: SchedulingResult) -> list[NodeClaimPlan]:
    def key(nc: NodeClaimPlan) -> tuple[str, str, int]:
        pods = sorted(p.key for p in nc.pods)
        return (nc.nodepool, pods[0] if pods else "", -len(pods))

    return sorted(result.nodeclaims, key=key)


def result_to_json(result: SchedulingResult) -> dict[str, Any]:
    """The JSON object ``-o json`` prints (shape and ordering in the module docstring)."""
    claims: list[dict[str, Any]] = [
        {
            "nodepool": nc.nodepool,
            "instance_types": [it.name for it in nc.instance_types],
            "capacity_type": launch_capacity_type(nc),
            "zone": nc.zone,
            "price_per_hour": _price(nc.price_per_hour),
            "pods": sorted(p.key for p in nc.pods),
        }
        for nc in _sorted_claims(result)
    ]
    existing = [
        {"name": name, "pods": sorted(p.key for p in pods)} for name, pods in sorted(result.existing.items()) if pods
    ]
    unschedulable = [{"pod": pod, "reason": reason} for pod, reason in sorted(result.unschedulable.items())]
    return {
        "nodeclaims": claims,
        "existing_nodes": existing,
        "unschedulable": unschedulable,
        "cost_per_hour": _price(sum(float(c["price_per_hour"]) for c in claims)),
    }


def launch_capacity_type(nc: NodeClaimPlan) -> str | None:
    """The capacity type CreateFleet would be asked for: the plan's when pinned, else Karpenter's rule.

    Karpenter ``getCapacityType`` (``[aws]:pkg/providers/instance/instance.go``, here
    :func:`nodesmith.adapters.aws.fleet.choose_offerings`): ``spot`` when spot is allowed and a
    kept type has an available spot offering in the plan's zones, else ``on-demand``. None when no
    offering could be launched at all.
    """
    if nc.capacity_type is not None:
        return nc.capacity_type
    from nodesmith.adapters.aws.fleet import choose_offerings

    choice = choose_offerings(
        instance_types=nc.instance_types,
        capacity_types=nc.capacity_types,
        zones=nc.zones,
        subnets=dict.fromkeys(nc.zones, "simulated"),  # simulate does not resolve subnets
        image_for=lambda _it: "simulated",
    )
    return choice.capacity_type if choice is not None else None


def price_note(result: SchedulingResult) -> str:
    """A sentence saying which planned prices are estimates, or "" when none is.

    A NodeClaim's price is estimated when the offering behind ``price_per_hour`` (its first
    instance type's cheapest offering of the chosen capacity type and zone) is marked
    ``price_estimated``.
    """
    estimated: set[str] = set()
    for nc in result.nodeclaims:
        for offering in _chosen_offerings(nc):
            if offering.price_estimated:
                estimated.add(offering.capacity_type)
    parts = []
    if "on-demand" in estimated:
        parts.append(
            "on-demand prices are estimates (not in the price table nor from the Pricing API; "
            "give --price-table or $NODESMITH_PRICE_TABLE)"
        )
    if "spot" in estimated:
        parts.append("spot prices are estimates (a share of on-demand: no spot price history)")
    return "; ".join(parts)


def _chosen_offerings(nc: NodeClaimPlan) -> list[Any]:
    if not nc.instance_types:
        return []
    first = nc.instance_types[0]
    return [
        o
        for o in first.offerings
        if o.available
        and (nc.capacity_type is None or o.capacity_type == nc.capacity_type)
        and (nc.zone is None or o.zone == nc.zone)
        and abs(o.price - nc.price_per_hour) < 1e-9
    ]


def _shorten(items: Sequence[str], limit: int) -> str:
    shown = ", ".join(items[:limit])
    return f"{shown} (+{len(items) - limit} more)" if len(items) > limit else shown


def print_table(result: SchedulingResult, *, file: TextIO, note: str = "") -> None:
    """Print the plan for people: NodeClaims, pods placed on existing nodes, unschedulable pods, total."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=file, soft_wrap=False)
    data = result_to_json(result)

    claims = Table(title=f"NodeClaims to launch ({len(data['nodeclaims'])})", title_justify="left", expand=False)
    claims.add_column("#", justify="right")
    claims.add_column("NodePool")
    claims.add_column("capacity")
    claims.add_column("zone")
    claims.add_column("USD/hour", justify="right")
    claims.add_column("instance types (cheapest first)", overflow="fold")
    claims.add_column("pods", overflow="fold")
    for i, nc in enumerate(data["nodeclaims"], start=1):
        claims.add_row(
            str(i),
            nc["nodepool"],
            nc["capacity_type"] or "any",
            nc["zone"] or "any",
            f"{nc['price_per_hour']:.4f}",
            f"{len(nc['instance_types'])}: {_shorten(nc['instance_types'], _MAX_TYPES_SHOWN)}",
            f"{len(nc['pods'])}: {_shorten(nc['pods'], _MAX_PODS_SHOWN)}",
        )
    console.print(claims)

    if data["existing_nodes"]:
        nodes = Table(title="Pods placed on existing nodes", title_justify="left")
        nodes.add_column("node")
        nodes.add_column("pods", overflow="fold")
        for node in data["existing_nodes"]:
            nodes.add_row(node["name"], f"{len(node['pods'])}: {_shorten(node['pods'], _MAX_PODS_SHOWN)}")
        console.print(nodes)

    if data["unschedulable"]:
        stuck = Table(title=f"Unschedulable pods ({len(data['unschedulable'])})", title_justify="left")
        stuck.add_column("pod")
        stuck.add_column("reason", overflow="fold")
        for item in data["unschedulable"]:
            stuck.add_row(item["pod"], item["reason"])
        console.print(stuck)

    console.print(f"New capacity: {len(data['nodeclaims'])} NodeClaim(s), {data['cost_per_hour']:.4f} USD/hour")
    if note:
        console.print(f"[yellow]Note:[/yellow] {note}")
