"""Working out the details of an explanation: instance-type funnels, hints, existing-node summaries.

Used by the scheduler on the failure path (and for pods asked about with
``SchedulingInput.explain``) to turn the :class:`~nodesmith.core.scheduling.reasons.Rejection` a
NodePool gave into a :class:`~nodesmith.core.scheduling.reasons.PoolVerdict`:

* the **funnel** applies the NodePool's instance types to the pod one filter at a time, in
  Karpenter's order (``filterInstanceTypesByRequirements``: requirements, offerings, resources
  with DaemonSet overhead; then limits and host ports), and counts the types left after each, so
  the first filter that leaves none is the constraint that removed the last option;
* **hints** say what would fit elsewhere: the same pod in another zone or capacity type of the
  NodePool, or instance types outside the NodePool's requirements;
* the **existing-node summary** groups the nodes that did not take the pod by the first check
  they failed (taints, labels, host ports, resources with the most free, topology).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodesmith.core.requirements import LABEL_CAPACITY_TYPE, LABEL_ZONE, LABEL_ZONE_ID, Requirement, Requirements
from nodesmith.core.scheduling.instancetypes import OfferingFilter, cheapest_offering, has_offering
from nodesmith.core.scheduling.pods import ports_conflict
from nodesmith.core.scheduling.reasons import (
    CHOSEN,
    NodeSummary,
    PoolVerdict,
    Rejection,
    Step,
    amount,
    resource_order,
)
from nodesmith.core.scheduling.taints import first_untolerated, format_taint

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nodesmith.core.model import Pod
    from nodesmith.core.scheduling.existing import SimExistingNode
    from nodesmith.core.scheduling.nodeclaim import SimNodeClaim, Template
    from nodesmith.core.scheduling.pods import PodData
    from nodesmith.core.scheduling.topology import Topology

__all__ = ["existing_summary", "fit_verdict", "funnel", "hints", "rejected_verdict"]

_DOMAIN_KEYS = (LABEL_ZONE, LABEL_CAPACITY_TYPE, LABEL_ZONE_ID)
_MAX_HINTS = 3


def _free_label(tpl: Template) -> str:
    return " free after DaemonSets" if tpl.has_overhead else " allocatable"


def _offering_label(tpl: Template, reqs: Requirements) -> str | None:
    """``an available offering in zone a, capacity type spot`` when the pod narrowed zone/capacity type."""
    parts = []
    for key, name in ((LABEL_ZONE, "zone"), (LABEL_CAPACITY_TYPE, "capacity type"), (LABEL_ZONE_ID, "zone id")):
        req = reqs.peek(key)
        if req is not None and req != tpl.requirements.peek(key):
            parts.append(f"{name} {', '.join(req.sorted_values())}" if not req.complement else str(req))
    return f"an available offering in {', '.join(parts)}" if parts else None


def funnel(tpl: Template, reqs: Requirements, data: PodData) -> tuple[tuple[Step, ...], int]:
    """The instance-type funnel of ``tpl`` for the pod under ``reqs``: steps and the types left at the end."""
    mask = tpl.all_mask
    steps = [Step("instance types the NodePool allows", mask.bit_count())]
    narrowed = sorted(
        k for k in reqs if k in tpl.type_keys and k not in _DOMAIN_KEYS and reqs.get(k) != tpl.requirements.get(k)
    )
    for key in narrowed:
        req = reqs.get(key)
        mask &= tpl.requirement_mask(Requirements(req))
        steps.append(Step(str(req), mask.bit_count()))
    label = _offering_label(tpl, reqs)
    if label is not None:
        offers = OfferingFilter(reqs)
        keep = 0
        for i, t in enumerate(tpl.types):
            if mask >> i & 1 and has_offering(t, offers):
                keep |= 1 << i
        mask = keep
        steps.append(Step(label, mask.bit_count()))
    for resource in resource_order(data.requests):
        need = data.requests[resource]
        if need > 0:
            mask &= ~tpl.too_small({resource: need})
            steps.append(Step(f"{amount(resource, need)} {resource}{_free_label(tpl)}", mask.bit_count()))
    if tpl.remaining is not None:
        allowed, _ = tpl.within_limits()
        mask &= allowed
        steps.append(Step("within the NodePool's remaining limits", mask.bit_count()))
    if data.host_ports:
        mask &= ~tpl.port_blocked(data.host_ports)
        ports = ", ".join(f"{p[1]}/{p[0]}" for p in data.host_ports)
        steps.append(Step(f"host port {ports} free of DaemonSets", mask.bit_count()))
    return _until_empty(steps), mask


def _until_empty(steps: list[Step]) -> tuple[Step, ...]:
    """The steps up to the first that leaves no type: that one removed the last option."""
    for i, step in enumerate(steps):
        if not step.remaining:
            return tuple(steps[: i + 1])
    return tuple(steps)


def _pool_values(tpl: Template, key: str) -> list[str]:
    values: set[str] = set()
    for t in tpl.types:
        req = t.requirements.peek(key)
        if req is not None and not req.complement:
            values.update(req.values)
    pool = tpl.requirements.peek(key)
    return sorted(v for v in values if pool is None or pool.has(v))


def _elsewhere(tpl: Template, reqs: Requirements, data: PodData, key: str, label: str) -> str | None:
    """``3 types would fit in us-east-1b, 2 in us-east-1c`` when the pod pins ``key`` and other values would do."""
    req = reqs.peek(key)
    if req is None or req.complement or req == tpl.requirements.peek(key):
        return None
    found = []
    for value in _pool_values(tpl, key):
        if req.has(value):
            continue
        alt = reqs.without(key, LABEL_ZONE_ID) if key == LABEL_ZONE else reqs.without(key)
        alt.add(Requirement(key, complement=False, values=frozenset((value,))))
        _, mask = funnel(tpl, alt, data)
        if mask:
            found.append((mask.bit_count(), value))
    if not found:
        return None
    found.sort(key=lambda e: (-e[0], e[1]))
    shown = [f"{count} in {value}" for count, value in found[:_MAX_HINTS]]
    count0, value0 = found[0]
    shown[0] = f"{count0} type{'s' if count0 != 1 else ''} would fit in {label}{value0}"
    return ", ".join(shown)


def _outside(tpl: Template, reqs: Requirements, data: PodData) -> str | None:
    """``2 instance types outside this NodePool's requirements have room for it ... (cheapest m5.24xlarge)``."""
    own = {t.name for t in tpl.types}
    offers = OfferingFilter(reqs)
    best: tuple[float, str] | None = None
    count = 0
    for t in tpl.catalogue:
        if t.name in own or t.requirements.intersects(data.requirements) is not None:
            continue
        if not all(t.allocatable.get(r, 0) >= need for r, need in data.requests.items() if need > 0):
            continue
        offering = cheapest_offering(t, offers)
        if offering is None:
            continue
        count += 1
        if best is None or (offering.price, t.name) < best:
            best = (offering.price, t.name)
    if not count or best is None:
        return None
    return (
        f"{count} instance type{'s' if count != 1 else ''} outside this NodePool's requirements "
        f"{'have' if count != 1 else 'has'} room for it before DaemonSets (cheapest {best[1]})"
    )


def hints(tpl: Template, rejection: Rejection, data: PodData) -> tuple[str, ...]:
    """What would fit elsewhere, for a rejection at the instance-type stages (else nothing)."""
    reqs = rejection.requirements
    if reqs is None or rejection.stage not in ("instance types", "offerings", "resources", "host ports", "limits"):
        return ()
    out = [
        hint
        for key, label in ((LABEL_ZONE, ""), (LABEL_CAPACITY_TYPE, "capacity type "))
        if (hint := _elsewhere(tpl, reqs, data, key, label)) is not None
    ]
    if not out and rejection.stage in ("instance types", "resources"):
        outside = _outside(tpl, reqs, data)
        if outside is not None:
            out.append(outside)
    return tuple(out)


def rejected_verdict(tpl: Template | None, name: str, rejection: Rejection, data: PodData, verdict: str) -> PoolVerdict:
    """A NodePool's verdict from its rejection, with the funnel and hints when types were the problem."""
    steps: tuple[Step, ...] = ()
    extra: tuple[str, ...] = ()
    if tpl is not None and rejection.requirements is not None:
        steps, _ = funnel(tpl, rejection.requirements, data)
        extra = hints(tpl, rejection, data)
    return PoolVerdict(
        nodepool=name,
        verdict=verdict,
        stage=rejection.stage,
        constraint=rejection.constraint,
        message=rejection.message,
        numbers=dict(rejection.numbers),
        funnel=steps,
        hints=extra,
    )


def fit_verdict(tpl: Template, nc: SimNodeClaim, data: PodData, verdict: str) -> PoolVerdict:
    """A NodePool that accepts the pod on a new NodeClaim ``nc``: how many types fit, the cheapest and its price."""
    from nodesmith.core.scheduling.nodeclaim import SIMULATION_KEYS
    from nodesmith.core.scheduling.plan import MAX_INSTANCE_TYPES

    chosen = tpl.chosen(nc.requirements.without(*SIMULATION_KEYS), nc.mask, MAX_INSTANCE_TYPES)
    count = nc.mask.bit_count()
    cheapest = chosen.types[0].name if chosen.types else "?"
    where = f" in {', '.join(sorted(chosen.zones))}" if len(chosen.zones) == 1 else ""
    opened = "new NodeClaim: " if verdict == CHOSEN else "a new NodeClaim would take it: "
    steps, _ = funnel(tpl, nc.requirements, data)
    return PoolVerdict(
        nodepool=tpl.name,
        verdict=verdict,
        stage="fits",
        constraint="",
        message=f"{opened}{count} instance type{'s' if count != 1 else ''} fit, cheapest {cheapest} "
        f"at {chosen.price:.4f} USD/hour{where}",
        numbers={"types": str(count), "cheapest": cheapest, "USD/hour": f"{chosen.price:.4f}"},
        funnel=steps,
    )


def _node_check(node: SimExistingNode, pod: Pod, data: PodData, topology: Topology) -> tuple[str, str, int]:
    """``(group, detail, free)``: the first check the node fails for the pod (free is for resources)."""
    taint = first_untolerated(node.taints, data.tolerations)
    if taint is not None:
        return f"taint {format_taint(taint)}", f"have taint {format_taint(taint)} the pod does not tolerate", 0
    conflict = node.requirements.compatible(data.requirements)
    if conflict is not None:
        return "labels", f"have labels the pod's node selector/affinity excludes (e.g. {conflict})", 0
    if data.host_ports and ports_conflict(data.host_ports, node.ports) is not None:
        ports = ", ".join(f"{p[1]}/{p[0]}" for p in data.host_ports)
        return "ports", f"already use host port {ports}", 0
    for resource in resource_order(data.requests):
        need = data.requests[resource]
        have = node.remaining.get(resource, 0)
        if need > 0 and need > have:
            return f"resource {resource}", resource, have
    if node.can_add(pod, data, topology) is None:
        return "topology", "are excluded by the pod's topology spread or (anti-)affinity", 0
    return "fits", "would fit now", 0


def existing_summary(
    nodes: Sequence[SimExistingNode], pod: Pod, data: PodData, topology: Topology
) -> NodeSummary | None:
    """Why none of ``nodes`` (existing nodes and in-flight NodeClaims) took the pod, grouped; None without nodes."""
    if not nodes:
        return None
    groups: dict[str, tuple[int, str, int]] = {}
    cordoned = 0
    for node in nodes:
        if node.node.unschedulable:
            cordoned += 1
            continue
        key, detail, free = _node_check(node, pod, data, topology)
        count, _, most = groups.get(key, (0, detail, free))
        groups[key] = (count + 1, detail, max(most, free))
    reasons: list[tuple[int, str]] = []
    for key, (count, detail, most) in groups.items():
        if key.startswith("resource "):
            need = data.requests[detail]
            text = f"have too little {detail} free (most {amount(detail, most)}, needs {amount(detail, need)})"
            reasons.append((count, text))
        else:
            reasons.append((count, detail))
    if cordoned:
        reasons.append((cordoned, "are cordoned or being deleted"))
    reasons.sort(key=lambda e: (-e[0], e[1]))
    return NodeSummary(considered=len(nodes), reasons=tuple(reasons))
