"""Topology: topology spread constraints, pod affinity and pod anti-affinity during one pass.

A :class:`TopologyGroup` counts the pods a selector matches per domain (value of the topology key)
and is shared by every pod with the same constraint; the pods that carry the constraint are its
owners. Before a pod is placed, each group it owns (and each *inverse* anti-affinity group whose
owners repel it) narrows the candidate node's requirements to the allowed domains; after placement
the group counts are updated. Mirrors ``[core]:pkg/controllers/provisioning/scheduling/topology.go``,
``topologygroup.go`` and ``topologynodefilter.go`` (v1.14), with two deliberate differences:

* ties between equally good domains are broken by name instead of by map order (deterministic);
* the affinity bootstrap (first self-selecting pod, no domain counted yet) picks exactly one
  domain: the first allowed by both pod and node, else the first allowed by the pod.

Domains: for a key, every value a NodePool x instance type can produce (``buildDomainGroups``),
every value an existing node carries, and the hostname of every NodeClaim planned in this pass.
Counts start from the bound pods on existing nodes (pods being scheduled excluded).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nodesmith.core.model import LabelSelector, LabelSelectorRequirement
from nodesmith.core.requirements import LABEL_HOSTNAME, Requirement, Requirements
from nodesmith.core.scheduling.pods import ALL_NAMESPACES, exists_requirement, pod_id, selector_key
from nodesmith.core.scheduling.taints import first_untolerated

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping, Sequence

    from nodesmith.core.model import Pod, PodAffinityTerm, Taint, Toleration, TopologySpreadConstraint
    from nodesmith.core.scheduling.pods import PodData

__all__ = ["AFFINITY", "ANTI_AFFINITY", "SPREAD", "DomainNode", "NodeFilter", "Topology", "TopologyGroup"]

SPREAD = "topology spread"
AFFINITY = "pod affinity"
ANTI_AFFINITY = "pod anti-affinity"

_MAX = 2**31 - 1

DomainUniverse = "Callable[[str], Mapping[str, Sequence[tuple[Taint, ...]]]]"


@dataclass(frozen=True, slots=True)
class DomainNode:
    """An existing node as topology sees it: name, labels, taints, label requirements, bound pods."""

    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    requirements: Requirements
    pods: Sequence[Pod] = field(default_factory=tuple)


class NodeFilter:
    """Which nodes count for a topology spread constraint (``nodeAffinityPolicy``/``nodeTaintsPolicy``).

    With ``Honor`` affinity (default) a node counts when its requirements are compatible with the
    pod's node selector ANDed with any required node-affinity term; with ``Honor`` taints (default
    ``Ignore``) only when the pod tolerates the node's taints.
    """

    __slots__ = ("honor_affinity", "honor_taints", "key", "terms", "tolerations", "trivial")

    def __init__(self, data: PodData, tsc: TopologySpreadConstraint) -> None:
        self.honor_affinity = tsc.node_affinity_policy != "Ignore"
        self.honor_taints = tsc.node_taints_policy == "Honor"
        self.terms = data.node_filter_terms
        self.tolerations: tuple[Toleration, ...] = data.tolerations
        self.trivial = not self.honor_taints and (not self.honor_affinity or all(len(t) == 0 for t in self.terms))
        self.key = (
            self.honor_affinity,
            self.honor_taints,
            tuple(t.frozen() for t in self.terms) if self.honor_affinity else (),
            self.tolerations if self.honor_taints else (),
        )

    def matches(self, taints: Sequence[Taint], reqs: Requirements, allow_undefined: Collection[str]) -> bool:
        """True when a node with these taints and requirements takes part in the spread."""
        if self.trivial:
            return True
        if (
            self.honor_affinity
            and self.terms
            and not any(reqs.compatible(t, allow_undefined=allow_undefined) is None for t in self.terms)
        ):
            return False
        return not (self.honor_taints and first_untolerated(taints, self.tolerations) is not None)


class TopologyGroup:
    """Per-domain counts of the pods ``selector`` matches in ``namespaces``, for one constraint."""

    __slots__ = (
        "_selects",
        "domains",
        "empty",
        "key",
        "kind",
        "max_skew",
        "min_domains",
        "namespaces",
        "node_filter",
        "owners",
        "selector",
    )

    def __init__(
        self,
        *,
        kind: str,
        key: str,
        namespaces: frozenset[str],
        selector: LabelSelector | None,
        max_skew: int = _MAX,
        min_domains: int | None = None,
        node_filter: NodeFilter | None = None,
    ) -> None:
        self.kind = kind
        self.key = key
        self.namespaces = namespaces
        self.selector = selector
        self.max_skew = max_skew
        self.min_domains = min_domains
        self.node_filter = node_filter
        self.owners: set[str] = set()
        self.domains: dict[str, int] = {}
        self.empty: set[str] = set()
        self._selects: dict[int, bool] = {}

    def selects_pod(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """True when a pod in ``namespace`` with ``labels`` is counted by this group (nil selector: none)."""
        if self.selector is None:
            return False
        if ALL_NAMESPACES not in self.namespaces and namespace not in self.namespaces:
            return False
        return self.selector.matches(labels)

    def selects(self, data: PodData) -> bool:
        """:meth:`selects_pod` for a pending pod, cached per shared :class:`PodData`."""
        cached = self._selects.get(id(data))
        if cached is None:
            cached = self.selects_pod(data.namespace, data.labels)
            self._selects[id(data)] = cached
        return cached

    def counts(
        self, data: PodData, taints: Sequence[Taint], reqs: Requirements, allow_undefined: Collection[str]
    ) -> bool:
        """True when placing the pod on a node with these taints/requirements changes this group's counts."""
        if not self.selects(data):
            return False
        return self.node_filter is None or self.node_filter.matches(taints, reqs, allow_undefined)

    def register(self, *domains: str) -> None:
        """Make domains known (count 0 when new)."""
        for d in domains:
            if d not in self.domains:
                self.domains[d] = 0
                self.empty.add(d)

    def record(self, *domains: str) -> None:
        """Count one more matching pod in each domain."""
        for d in domains:
            self.domains[d] = self.domains.get(d, 0) + 1
            self.empty.discard(d)

    # -- choosing domains ---------------------------------------------------------------------

    def next_domains(self, *, selects: bool, pod_domains: Requirement, node_domains: Requirement) -> Requirement:
        """The domains the pod may use on a node allowing ``node_domains`` (empty ``In`` = none)."""
        if self.kind == SPREAD:
            return self._next_spread(selects, pod_domains, node_domains)
        if self.kind == AFFINITY:
            return self._next_affinity(selects, pod_domains, node_domains)
        return self._next_anti_affinity(pod_domains, node_domains)

    def _req(self, values: Collection[str]) -> Requirement:
        return Requirement(self.key, complement=False, values=frozenset(values))

    def _min_count(self, pod_domains: Requirement) -> int:
        if self.key == LABEL_HOSTNAME:
            return 0  # a new node is always a possible empty hostname domain
        low = _MAX
        supported = 0
        for domain, count in self.domains.items():
            if pod_domains.has(domain):
                supported += 1
                low = min(low, count)
        if self.min_domains is not None and supported < self.min_domains:
            low = 0
        return low

    def _single_hostname(self, node_domains: Requirement) -> str | None:
        if self.key == LABEL_HOSTNAME:
            return node_domains.single_value()
        return None

    def _next_spread(self, selects: bool, pod_domains: Requirement, node_domains: Requirement) -> Requirement:
        host = self._single_hostname(node_domains)
        if host is not None:
            count = self.domains.get(host, 0) + (1 if selects else 0)
            return self._req((host,) if count <= self.max_skew else ())
        low = self._min_count(pod_domains)
        candidates = node_domains.values if not node_domains.complement else self.domains.keys()
        best: tuple[int, str] | None = None
        extra = 1 if selects else 0
        for domain in candidates:
            found = self.domains.get(domain)
            if found is None or not node_domains.has(domain):
                continue
            count = found + extra
            if count - low <= self.max_skew and (best is None or (count, domain) < best):
                best = (count, domain)
        return self._req((best[1],) if best else ())

    def _next_affinity(  # noqa: PLR0911 - mirrors nextDomainAffinity branch by branch
        self, selects: bool, pod_domains: Requirement, node_domains: Requirement
    ) -> Requirement:
        host = self._single_hostname(node_domains)
        bootstrap = selects and (len(self.domains) == len(self.empty) or not self._any_counted(pod_domains))
        if host is not None:
            if not pod_domains.has(host):
                return self._req(())
            if self.domains.get(host, 0) > 0 or bootstrap:
                return self._req((host,))
            return self._req(())
        options = [d for d, c in self.domains.items() if c > 0 and pod_domains.has(d) and node_domains.has(d)]
        if options:
            return self._req(options)
        if bootstrap:
            ordered = sorted(self.domains)
            both = [d for d in ordered if pod_domains.has(d) and node_domains.has(d)]
            if both:
                return self._req(both[:1])
            pod_only = [d for d in ordered if pod_domains.has(d)]
            return self._req(pod_only[:1])
        return self._req(())

    def _any_counted(self, pod_domains: Requirement) -> bool:
        return any(c > 0 and pod_domains.has(d) for d, c in self.domains.items())

    def _next_anti_affinity(self, pod_domains: Requirement, node_domains: Requirement) -> Requirement:
        host = self._single_hostname(node_domains)
        if host is not None:
            return self._req((host,) if self.domains.get(host, 0) == 0 else ())
        if not node_domains.complement and len(node_domains.values) < len(self.empty):
            return self._req([d for d in node_domains.values if d in self.empty and pod_domains.has(d)])
        return self._req([d for d in self.empty if node_domains.has(d) and pod_domains.has(d)])

    def allowed_domains(self, selects: bool, pod_domains: Requirement) -> frozenset[str]:
        """The domains a node pinned to exactly one domain may have for this pod (non-hostname keys).

        Equals what :meth:`next_domains` accepts for ``node_domains = In [d]``, so it can pre-screen
        candidates exactly.
        """
        if self.kind == SPREAD:
            low = self._min_count(pod_domains)
            extra = 1 if selects else 0
            return frozenset(d for d, c in self.domains.items() if c + extra - low <= self.max_skew)
        if self.kind == AFFINITY:
            counted = frozenset(d for d, c in self.domains.items() if c > 0 and pod_domains.has(d))
            if counted:
                return counted
            if selects:  # bootstrap: any domain the pod allows
                return frozenset(d for d in self.domains if pod_domains.has(d))
            return frozenset()
        return frozenset(d for d in self.empty if pod_domains.has(d))

    def host_allows(self, host: str, data: PodData) -> bool:
        """Whether a node whose hostname is ``host`` is an allowed domain, for a pod that accepts any
        hostname (the hostname special cases of ``nextDomainTopologySpread``/``Affinity``/``AntiAffinity``).
        """
        count = self.domains.get(host, 0)
        if self.kind == ANTI_AFFINITY:
            return count == 0
        if self.kind == SPREAD:
            return count + (1 if self.selects(data) else 0) <= self.max_skew
        return count > 0 or (self.selects(data) and len(self.domains) == len(self.empty))

    def describe(self, pod_domains: Requirement, node_domains: Requirement) -> str:
        """Why no domain was left, with the counts (at most 8 domains shown)."""
        what = f"{self.kind} on {self.key}"
        if self.kind == SPREAD:
            what += f" (maxSkew {self.max_skew})"
        shown = sorted(d for d in self.domains if node_domains.has(d) and pod_domains.has(d))
        counts = ", ".join(f"{d}={self.domains[d]}" for d in shown[:8])
        if len(shown) > 8:
            counts += f" and {len(shown) - 8} more"
        return f"{what} cannot be satisfied (matching pods per domain: {counts or 'no domain available'})"


class Topology:
    """All topology groups of one pass, with owners per pod and inverse anti-affinity groups."""

    def __init__(
        self,
        *,
        universe: Callable[[str], Mapping[str, Sequence[tuple[Taint, ...]]]],
        nodes: Sequence[DomainNode],
        excluded: Collection[str],
    ) -> None:
        self._universe = universe
        self._nodes = nodes
        self._excluded = frozenset(excluded)
        self.groups: dict[tuple[object, ...], TopologyGroup] = {}
        self.inverse: dict[tuple[object, ...], TopologyGroup] = {}
        self._by_key: dict[str, list[TopologyGroup]] = {}
        self._owned: dict[str, list[TopologyGroup]] = {}
        self._inverse_for: dict[int, list[TopologyGroup]] = {}
        self._match_cache: dict[str, tuple[int, list[TopologyGroup]]] = {}
        self._registered: dict[str, list[str]] = {}
        self._selecting: dict[int, tuple[int, list[TopologyGroup]]] = {}
        for node in nodes:
            for pod in node.pods:
                if self._ignored(pod) or not pod.pod_anti_affinity:
                    continue
                for term in pod.pod_anti_affinity:
                    if term.namespace_selector is not None:  # cannot evaluate namespace labels: repel from all
                        namespaces = frozenset((ALL_NAMESPACES,))
                    elif term.namespaces:
                        namespaces = frozenset(term.namespaces)
                    else:
                        namespaces = frozenset((pod.namespace,))
                    tg = self._inverse_group(term, namespaces)
                    domain = node.labels.get(tg.key) or (node.name if tg.key == LABEL_HOSTNAME else None)
                    if domain is not None:
                        tg.record(domain)

    def _ignored(self, pod: Pod) -> bool:
        return pod_id(pod) in self._excluded or pod.is_terminal or pod.deletion_timestamp is not None

    def _index(self, tg: TopologyGroup) -> None:
        self._by_key.setdefault(tg.key, []).append(tg)

    def _groups_selecting(self, data: PodData) -> list[TopologyGroup]:
        """The (non-inverse) groups whose selector counts this pod, cached until a group is added."""
        hit = self._selecting.get(id(data))
        if hit is not None and hit[0] == len(self.groups):
            return hit[1]
        found = [tg for tg in self.groups.values() if tg.selects(data)]
        self._selecting[id(data)] = (len(self.groups), found)
        return found

    def _inverse_group(self, term: PodAffinityTerm, namespaces: frozenset[str]) -> TopologyGroup:
        gkey = (ANTI_AFFINITY, term.topology_key, namespaces, selector_key(term.label_selector))
        tg = self.inverse.get(gkey)
        if tg is None:
            tg = TopologyGroup(
                kind=ANTI_AFFINITY, key=term.topology_key, namespaces=namespaces, selector=term.label_selector
            )
            for domain in self._universe(tg.key):
                tg.register(domain)
            for domain in self._registered.get(tg.key, ()):
                tg.register(domain)
            self.inverse[gkey] = tg
            self._index(tg)
            self._inverse_for.clear()
            self._match_cache.clear()
        return tg

    def update(self, pod: Pod, data: PodData) -> None:
        """(Re)register the pod as owner of the groups its current constraints create (``Topology.Update``)."""
        pid = pod_id(pod)
        self._match_cache.pop(pid, None)
        for tg in self._owned.pop(pid, ()):
            tg.owners.discard(pid)
        for term, namespaces in data.required_anti_affinity:
            self._inverse_group(term, namespaces).owners.add(pid)
        owned: list[TopologyGroup] = []
        for tsc in data.spreads:
            owned.append(self._spread_group(data, tsc))
        for term, namespaces in data.affinity:
            owned.append(self._term_group(AFFINITY, term, namespaces))
        for term, namespaces in data.anti_affinity:
            owned.append(self._term_group(ANTI_AFFINITY, term, namespaces))
        for tg in owned:
            tg.owners.add(pid)
        if owned:
            self._owned[pid] = owned

    def _spread_group(self, data: PodData, tsc: TopologySpreadConstraint) -> TopologyGroup:
        selector = tsc.label_selector
        extra = tuple(
            LabelSelectorRequirement(k, "In", (data.labels[k],)) for k in tsc.match_label_keys if k in data.labels
        )
        if extra:
            base = selector or LabelSelector()
            selector = LabelSelector(base.match_labels, base.match_expressions + extra)
        node_filter = NodeFilter(data, tsc)
        namespaces = frozenset((data.namespace,))
        gkey = (
            SPREAD,
            tsc.topology_key,
            namespaces,
            selector_key(selector),
            tsc.max_skew,
            tsc.min_domains,
            node_filter.key,
        )
        tg = self.groups.get(gkey)
        if tg is None:
            tg = TopologyGroup(
                kind=SPREAD,
                key=tsc.topology_key,
                namespaces=namespaces,
                selector=selector,
                max_skew=tsc.max_skew,
                min_domains=tsc.min_domains,
                node_filter=node_filter,
            )
            self._count(tg)
            self.groups[gkey] = tg
        return tg

    def _term_group(self, kind: str, term: PodAffinityTerm, namespaces: frozenset[str]) -> TopologyGroup:
        gkey = (kind, term.topology_key, namespaces, selector_key(term.label_selector))
        tg = self.groups.get(gkey)
        if tg is None:
            tg = TopologyGroup(kind=kind, key=term.topology_key, namespaces=namespaces, selector=term.label_selector)
            self._count(tg)
            self.groups[gkey] = tg
        return tg

    def _count(self, tg: TopologyGroup) -> None:
        """Seed domains from the universe and existing nodes, then count bound pods (``countDomains``)."""
        self._index(tg)
        nf = tg.node_filter
        for domain in self._registered.get(tg.key, ()):
            tg.register(domain)
        for domain, taint_sets in self._universe(tg.key).items():
            if (
                nf is None
                or not nf.honor_taints
                or any(first_untolerated(ts, nf.tolerations) is None for ts in taint_sets)
            ):
                tg.register(domain)
        for node in self._nodes:
            if nf is not None and not nf.matches(node.taints, node.requirements, ()):
                continue
            value = node.labels.get(tg.key)
            if value is None and tg.key == LABEL_HOSTNAME:
                value = node.name
            if value is None:
                continue
            tg.register(value)
            for pod in node.pods:
                if not self._ignored(pod) and tg.selects_pod(pod.namespace, pod.labels):
                    tg.record(value)

    def register(self, key: str, domain: str) -> None:
        """Make a new domain (a planned NodeClaim's hostname) known to every group on ``key``, including
        groups created later in the pass."""
        self._registered.setdefault(key, []).append(domain)
        for tg in self._by_key.get(key, ()):
            tg.register(domain)

    def matching(self, pod: Pod, data: PodData) -> list[TopologyGroup]:
        """Groups that constrain where the pod may go: those it owns plus inverse anti-affinity
        groups whose owners repel it (``getMatchingTopologies``). Cached per pod until :meth:`update`.
        """
        pid = pod_id(pod)
        hit = self._match_cache.get(pid)
        if hit is not None and hit[0] == id(data):
            return hit[1]
        owned = self._owned.get(pid, [])
        inverse = self._inverse_for.get(id(data))
        if inverse is None:
            inverse = [tg for tg in self.inverse.values() if tg.selects(data)]
            self._inverse_for[id(data)] = inverse
        found = owned + inverse if inverse else owned
        self._match_cache[pid] = (id(data), found)
        return found

    def exclusive_host_groups(self, pod: Pod, data: PodData) -> list[TopologyGroup]:
        """Anti-affinity groups on hostname the pod must respect: it may only go to a host whose
        count in each is zero (i.e. a host in every group's ``empty`` set).
        """
        return [tg for tg in self.matching(pod, data) if tg.kind == ANTI_AFFINITY and tg.key == LABEL_HOSTNAME]

    def domain_filters(self, pod: Pod, data: PodData) -> list[tuple[str, frozenset[str]]]:
        """``(key, allowed domains)`` for each non-hostname group of the pod: a node whose requirement
        on ``key`` is a single value outside ``allowed`` is certainly refused (cheap pre-screen).
        """
        out: list[tuple[str, frozenset[str]]] = []
        for tg in self.matching(pod, data):
            if tg.key == LABEL_HOSTNAME:
                continue
            pod_domains = data.strict.peek(tg.key) or exists_requirement(tg.key)
            out.append((tg.key, tg.allowed_domains(tg.selects(data), pod_domains)))
        return out

    def add_requirements(
        self,
        pod: Pod,
        data: PodData,
        node_reqs: Requirements,
        allow_undefined: Collection[str],
        *,
        explain: bool = False,
    ) -> tuple[Requirements | None, str]:
        """Narrow ``node_reqs`` to the domains the pod's topology allows (``Topology.AddRequirements``).

        Returns ``(node_reqs, "")`` unchanged when no group applies, the narrowed requirements, or
        ``(None, reason)`` when no domain is left (the reason is only worded when ``explain`` is set).
        """
        matching = self.matching(pod, data)
        if not matching:
            return node_reqs, ""
        host = node_reqs.peek(LABEL_HOSTNAME)
        single_host = host.single_value() if host is not None else None
        pod_any_host = not data.strict.has(LABEL_HOSTNAME)
        result: Requirements | None = None
        for tg in matching:
            if single_host is not None and pod_any_host and tg.key == LABEL_HOSTNAME:
                # Fast path: a candidate node is one hostname domain; nothing to narrow, only accept or refuse.
                if tg.host_allows(single_host, data):
                    continue
                return None, tg.describe(exists_requirement(tg.key), host) if explain and host else ""
            pod_domains = data.strict.peek(tg.key) or exists_requirement(tg.key)
            node_domains = node_reqs.peek(tg.key) or exists_requirement(tg.key)
            domains = tg.next_domains(selects=tg.selects(data), pod_domains=pod_domains, node_domains=node_domains)
            if not domains.values:
                return None, tg.describe(pod_domains, node_domains) if explain else ""
            if result is None:
                result = node_reqs.copy()
            result.add(domains)
        if result is None:
            return node_reqs, ""
        conflict = node_reqs.compatible(result, allow_undefined=allow_undefined)
        if conflict is not None:
            return None, f"topology constraints conflict: {conflict}" if explain else ""
        return result, ""

    def record(
        self, pod: Pod, data: PodData, taints: Sequence[Taint], reqs: Requirements, allow_undefined: Collection[str]
    ) -> None:
        """Count the pod where it was placed (``Topology.Record``)."""
        for tg in self._groups_selecting(data):
            if tg.node_filter is not None and not tg.node_filter.matches(taints, reqs, allow_undefined):
                continue
            domains = reqs.get(tg.key)
            if domains.complement:
                continue
            if tg.kind == ANTI_AFFINITY or len(domains.values) == 1:
                tg.record(*domains.values)
        pid = pod_id(pod)
        for tg in self.inverse.values():
            if pid in tg.owners:
                domains = reqs.get(tg.key)
                if not domains.complement:
                    tg.record(*domains.values)
