"""The NodeClaims planned during one pass.

A :class:`SimNodeClaim` (``[core]:.../scheduling/nodeclaim.go``) holds the pods placed on it and the set of instance
types that still fit *all* of them: requirements intersect, an available offering is allowed by
the narrowed zone/capacity-type requirements, and ``requests + DaemonSet overhead <= allocatable``.
The NodePool it comes from is a :class:`~nodesmith.core.scheduling.template.Template` (re-exported here).

Instance-type sets are Python ints used as bitsets over the template's type list, so adding a pod to a NodeClaim
is a handful of big-int operations instead of a loop over instance types.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodesmith.core.requirements import (
    LABEL_HOSTNAME,
    LABEL_INITIALIZED,
    LABEL_REGISTERED,
    WELL_KNOWN_LABELS,
    Requirement,
    Requirements,
)
from nodesmith.core.scheduling.instancetypes import min_values_shortfall
from nodesmith.core.scheduling.pods import ports_conflict
from nodesmith.core.scheduling.reasons import Rejection, fit_failure
from nodesmith.core.scheduling.taints import first_untolerated, format_taint
from nodesmith.core.scheduling.template import PricedType, Template
from nodesmith.core.scheduling.typesets import iter_bits

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nodesmith.core.model import Pod
    from nodesmith.core.resources import Resources
    from nodesmith.core.scheduling.pods import HostPort, PodData
    from nodesmith.core.scheduling.topology import Topology

__all__ = ["SIMULATION_KEYS", "PricedType", "SimNodeClaim", "Template", "iter_bits", "new_nodeclaim"]

SIMULATION_KEYS = frozenset({LABEL_HOSTNAME, LABEL_REGISTERED, LABEL_INITIALIZED})
"""Requirement keys that exist only during the simulation and never reach a NodeClaim."""


class SimNodeClaim:
    """A NodeClaim planned in this pass: its pods, narrowed requirements and surviving instance types."""

    __slots__ = (
        "_ceiling",
        "_merged",
        "_singles",
        "charged",
        "datas",
        "hostname",
        "mask",
        "pods",
        "ports",
        "requests",
        "requirements",
        "seq",
        "template",
    )

    def __init__(self, template: Template, *, seq: int, hostname: str, requirements: Requirements, mask: int) -> None:
        self.template = template
        self.seq = seq
        self.hostname = hostname
        self.requirements = requirements
        self.mask = mask
        self.charged = mask  # the types NodePool limits were charged for (``subtractMax`` at creation)
        self.requests: Resources = {}
        self.pods: list[Pod] = []
        self.datas: list[PodData] = []
        self.ports: list[HostPort] = []
        self._merged: dict[int, tuple[Requirements | None, bool]] = {}
        self._singles: dict[str, str | None] = {}
        self._ceiling: dict[str, int] = {}

    def single(self, key: str) -> str | None:
        """The only value the NodeClaim's requirement on ``key`` allows, or None (cached)."""
        try:
            return self._singles[key]
        except KeyError:
            req = self.requirements.peek(key)
            value = req.single_value() if req is not None else None
            self._singles[key] = value
            return value

    def excluded_by(self, filters: Sequence[tuple[str, frozenset[str]]]) -> bool:
        """True when the NodeClaim is pinned to a domain outside one of ``filters`` (``Topology.domain_filters``)."""
        for key, allowed in filters:
            value = self.single(key)
            if value is not None and value not in allowed:
                return True
        return False

    def _no_room(self, data: PodData) -> bool:
        """True when, for some resource, even the roomiest type left has less free than the pods' sum
        (a necessary condition of :meth:`can_add`, checked first because it is the cheapest)."""
        ceiling = self._ceiling
        requests = self.requests
        for name, amount in data.requests.items():
            if amount > 0:
                room = ceiling.get(name)
                if room is None:
                    room = ceiling[name] = self.template.max_free(self.mask, name)
                if requests.get(name, 0) + amount > room:
                    return True
        return False

    def can_add(  # noqa: PLR0911, PLR0912 - early returns follow Karpenter CanAdd check order
        self, pod: Pod, data: PodData, topology: Topology
    ) -> tuple[Requirements, int] | None:
        """``(requirements, instance-type bitset)`` after adding the pod, or None when it does not fit."""
        tpl = self.template
        if self._no_room(data) or tpl.untolerated(data):
            return None
        hit = self._merged.get(id(data))
        if hit is None:
            if self.requirements.compatible(data.requirements, allow_undefined=WELL_KNOWN_LABELS) is not None:
                hit = (None, False)
            else:
                merged = self.requirements.intersect(data.requirements)
                hit = (merged, merged != self.requirements)
            self._merged[id(data)] = hit
        reqs, changed = hit
        if reqs is None:
            return None
        if data.host_ports and ports_conflict(data.host_ports, self.ports) is not None:
            return None
        if topology.matching(pod, data):
            reqs2, _ = topology.add_requirements(pod, data, reqs, WELL_KNOWN_LABELS)
            if reqs2 is None:
                return None
            if reqs2 is not reqs:
                changed = changed or reqs2 != self.requirements
                reqs = reqs2
        mask = self.mask
        if changed:
            mask &= tpl.compatible_mask(reqs)
        total = dict(self.requests)
        for name, amount in data.requests.items():
            total[name] = total.get(name, 0) + amount
        mask &= ~tpl.too_small(total)
        if data.host_ports:
            mask &= ~tpl.port_blocked(data.host_ports)
        if not mask:
            return None
        if reqs.has_min_values() and min_values_shortfall((tpl.types[i] for i in iter_bits(mask)), reqs) is not None:
            return None
        return reqs, mask

    def place(self, pods: Sequence[Pod], datas: Sequence[PodData]) -> None:
        """Put pods that no topology group counts on this (new, empty) NodeClaim: only requests change."""
        self.pods.extend(pods)
        self.datas.extend(datas)
        for data in datas:
            for name, amount in data.requests.items():
                self.requests[name] = self.requests.get(name, 0) + amount

    def add(self, pod: Pod, data: PodData, reqs: Requirements, mask: int, topology: Topology) -> None:
        """Place the pod (after a successful :meth:`can_add`) and record it in the topology."""
        if not self.pods:
            topology.register(LABEL_HOSTNAME, self.hostname)
        self.pods.append(pod)
        self.datas.append(data)
        for name, amount in data.requests.items():
            self.requests[name] = self.requests.get(name, 0) + amount
        self.ports.extend(data.host_ports)
        if reqs is not self.requirements and reqs != self.requirements:
            self.requirements = reqs
            self._merged = {}
            self._singles = {}
        if mask != self.mask:
            self._ceiling = {}
        self.mask = mask
        topology.record(pod, data, self.template.taints, reqs, WELL_KNOWN_LABELS)


def new_nodeclaim(  # noqa: PLR0911 - early returns follow Karpenter check order
    tpl: Template,
    pod: Pod,
    data: PodData,
    topology: Topology,
    *,
    seq: int,
    hostname: str,
) -> tuple[SimNodeClaim | None, Rejection | None]:
    """Try to open a NodeClaim from ``tpl`` for the pod; ``(nodeclaim, None)`` or ``(None, rejection)``.

    Checks in Karpenter's order (``scheduler.go addToNewNodeClaim`` + ``NodeClaim.CanAdd``): taints,
    requirement compatibility, limits, topology, then instance types (requirements, offerings,
    fit with DaemonSet overhead, host ports, minValues). Nothing is changed (limits are charged by
    the caller).
    """
    reason = tpl.untolerated(data)
    if reason:
        taint = first_untolerated(tpl.taints, data.tolerations)
        return None, Rejection("taints", format_taint(taint) if taint else "taints", reason)
    base, reason = tpl.merged(data)
    if base is None:
        return None, Rejection("requirements", reason.removeprefix("incompatible requirements: "), reason)
    allowed, limited = tpl.within_limits()
    if not allowed:
        return None, limited
    reqs = base.copy()
    reqs.add(Requirement(LABEL_HOSTNAME, complement=False, values=frozenset((hostname,))))
    if topology.matching(pod, data):
        narrowed, reason = topology.add_requirements(pod, data, reqs, WELL_KNOWN_LABELS, explain=True)
        if narrowed is None:
            what, _, counts = reason.partition(" cannot be satisfied")
            numbers = {"matching pods per domain": counts.strip(" ()").removeprefix("matching pods per domain: ")}
            return None, Rejection("topology", what.partition(":")[0], reason, numbers if counts else {})
        reqs = narrowed
    compatible = tpl.compatible_mask(reqs)
    mask = compatible & allowed & ~tpl.too_small(data.requests)
    if data.host_ports:
        mask &= ~tpl.port_blocked(data.host_ports)
    if not mask:
        return None, fit_failure(tpl, reqs, data, compatible=compatible, allowed=allowed)
    if reqs.has_min_values():
        short = min_values_shortfall((tpl.types[i] for i in iter_bits(mask)), reqs)
        if short is not None:
            return None, Rejection(
                "minValues",
                f"{short[0]} minValues {short[2]}",
                f"minValues: {short[0]} needs {short[2]} distinct values, the instance types that fit offer {short[1]}",
                {"needs": str(short[2]), "offered": str(short[1])},
                reqs,
            )
    nc = SimNodeClaim(tpl, seq=seq, hostname=hostname, requirements=reqs, mask=mask)
    return nc, None
