"""The ``nodesmith`` packing policy: re-group the pods of planned NodeClaims for a lower total price.

After the Karpenter-faithful pass (:mod:`nodesmith.core.scheduling.scheduler`), NodeClaims whose
pods carry no placement-sensitive constraint are pooled per (NodePool, requirements) and their pods
packed again by :func:`nodesmith.core.scheduling.packing.pack`, which minimises USD/hour over the
NodePool's instance types (cheapest allowed offering, DaemonSet overhead deducted). The new
grouping replaces the old one only when it is strictly cheaper, so the ``nodesmith`` policy never
costs more than the ``karpenter`` one for the same input.

What stays on the Karpenter path (its NodeClaims are kept as planned):

* pods with topology spread, pod affinity or anti-affinity, and pods some topology group counts
  (a selector of another pod's spread or affinity, or a running pod's anti-affinity, matches them):
  moving them would change domain counts those constraints were checked against;
* pods with host ports (ports are per node);
* NodeClaims with ``minValues`` requirements (each NodeClaim must keep enough distinct types);
* NodeClaims of a NodePool offered capacity reservations (their slots are counted per NodeClaim,
  :mod:`~nodesmith.core.scheduling.reservations`).

Pooling by identical requirements keeps every constraint: a NodeClaim's requirements are the
intersection of its NodePool's and all its pods' requirements, so any node meeting them meets
every pod's. NodePool ``limits`` are re-checked as Karpenter charges them (``subtractMax`` of each
NodeClaim's instance types, ``[core]:.../scheduling/scheduler.go``): the old NodeClaims' charge is
given back, each new NodeClaim keeps only types within what remains, and a grouping that does not
fit the limits is dropped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodesmith.core.requirements import LABEL_HOSTNAME, Requirement
from nodesmith.core.scheduling.nodeclaim import SIMULATION_KEYS, SimNodeClaim
from nodesmith.core.scheduling.packing import pack
from nodesmith.core.scheduling.plan import MAX_INSTANCE_TYPES

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from nodesmith.core.model import Pod
    from nodesmith.core.requirements import Requirements
    from nodesmith.core.scheduling.nodeclaim import Template
    from nodesmith.core.scheduling.pods import PodData
    from nodesmith.core.scheduling.topology import Topology

__all__ = ["movable", "repack"]

_SAVING = 1e-9
"""USD/hour a new grouping must save to replace Karpenter's (ties keep Karpenter's grouping)."""


def movable(nc: SimNodeClaim, topology: Topology) -> bool:
    """True when the NodeClaim's pods may be re-grouped freely (see the module docstring)."""
    if nc.requirements.has_min_values() or nc.template.reserved:
        return False
    return all(not d.has_topology and not d.host_ports and not topology.counts_pod(d) for d in nc.datas)


def _price(tpl: Template, reqs: Requirements, mask: int) -> float:
    return tpl.chosen(reqs, mask, MAX_INSTANCE_TYPES).price


def repack(
    claims: Sequence[SimNodeClaim], *, topology: Topology, new_hostname: Callable[[int], str], next_seq: int
) -> list[SimNodeClaim]:
    """``claims`` with every movable group re-packed when that is cheaper, in the original order
    (a group's new NodeClaims take the place of its first old one). ``new_hostname(seq)`` names
    the placeholder hostname of a new NodeClaim with sequence number ``seq`` (from ``next_seq``).
    """
    groups: dict[tuple[int, frozenset[Requirement]], list[SimNodeClaim]] = {}
    for nc in claims:
        if movable(nc, topology):
            key = (id(nc.template), nc.requirements.without(LABEL_HOSTNAME).frozen())
            groups.setdefault(key, []).append(nc)
    replaced: dict[int, list[SimNodeClaim]] = {}
    dropped: set[int] = set()
    seq = next_seq
    for members in groups.values():
        if sum(len(nc.pods) for nc in members) < 2:
            continue
        new = _repack_group(members, new_hostname=new_hostname, seq=seq)
        if new is None:
            continue
        seq += len(new)
        dropped.update(id(nc) for nc in members)
        replaced[id(members[0])] = new
    if not replaced:
        return list(claims)
    out: list[SimNodeClaim] = []
    for nc in claims:
        if id(nc) in replaced:
            out.extend(replaced[id(nc)])
        elif id(nc) not in dropped:
            out.append(nc)
    return out


def _repack_group(
    members: Sequence[SimNodeClaim], *, new_hostname: Callable[[int], str], seq: int
) -> list[SimNodeClaim] | None:
    """New NodeClaims for the pods of ``members`` (same NodePool and requirements), or None when
    the packing is not cheaper or does not fit the NodePool's limits (nothing is changed then)."""
    tpl = members[0].template
    base = members[0].requirements.without(LABEL_HOSTNAME)
    launch = base.without(*SIMULATION_KEYS)
    pods: list[Pod] = [p for nc in members for p in nc.pods]
    datas: list[PodData] = [d for nc in members for d in nc.datas]
    dims = sorted({r for d in datas for r, amount in d.requests.items() if amount > 0})
    classes: dict[tuple[int, ...], list[int]] = {}
    for i, d in enumerate(datas):
        classes.setdefault(tuple(d.requests.get(r, 0) for r in dims), []).append(i)
    demands = list(classes)
    compatible = tpl.compatible_mask(base)
    priced = [e for e in tpl.priced(launch) if compatible >> e[2] & 1]
    bins = pack(
        demands=demands,
        counts=[len(v) for v in classes.values()],
        capacities=[tuple(tpl.free(r, e[2]) for r in dims) for e in priced],
        prices=[e[0] for e in priced],
    )
    if bins is None:
        return None
    old_cost = sum(_price(tpl, nc.requirements.without(*SIMULATION_KEYS), nc.mask) for nc in members)
    for nc in members:
        tpl.charge(nc.charged, sign=-1)
    queues = list(classes.values())
    taken = [0] * len(queues)
    masks: dict[tuple[int, ...], int] = {}
    new: list[SimNodeClaim] = []
    cost = 0.0
    ordered = sorted(bins, key=lambda b: (-priced[b.type_index][0], priced[b.type_index][1], b.counts))
    for b in ordered:
        totals = {r: sum(n * demands[k][j] for k, n in enumerate(b.counts) if n) for j, r in enumerate(dims)}
        key = tuple(totals.values())
        mask = masks.get(key)
        if mask is None:
            mask = compatible & ~tpl.too_small(totals)
            masks[key] = mask
        allowed, _ = tpl.within_limits()
        mask &= allowed
        if not mask:
            _undo(tpl, new, members)
            return None
        hostname = new_hostname(seq + len(new))
        reqs = base.copy()
        reqs.add(Requirement(LABEL_HOSTNAME, complement=False, values=frozenset((hostname,))))
        nc = SimNodeClaim(tpl, seq=seq + len(new), hostname=hostname, requirements=reqs, mask=mask)
        picked: list[int] = []
        for k, n in enumerate(b.counts):
            if n:
                picked.extend(queues[k][taken[k] : taken[k] + n])
                taken[k] += n
        picked.sort()
        nc.place([pods[i] for i in picked], [datas[i] for i in picked])
        tpl.charge(mask)
        cost += _price(tpl, launch, mask)
        new.append(nc)
    if cost >= old_cost - _SAVING:
        _undo(tpl, new, members)
        return None
    return new


def _undo(tpl: Template, new: Sequence[SimNodeClaim], members: Sequence[SimNodeClaim]) -> None:
    """Give back the new NodeClaims' limit charges and charge the old ones again."""
    for nc in new:
        tpl.charge(nc.charged, sign=-1)
    for nc in members:
        tpl.charge(nc.charged)
