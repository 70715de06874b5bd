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
from nodesmith.core.requirements import LABEL_HOSTNAME
from nodesmith.core.scheduling.pods import ALL_NAMESPACES, exists_requirement, pod_id, selector_key
from nodesmith.core.scheduling.taints import first_untolerated
from nodesmith.core.scheduling.topologygroup import AFFINITY, ANTI_AFFINITY, SPREAD, NodeFilter, TopologyGroup

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping, Sequence

    from nodesmith.core.model import Pod, PodAffinityTerm, Taint, TopologySpreadConstraint
    from nodesmith.core.requirements import Requirements
    from nodesmith.core.scheduling.pods import PodData

__all__ = ["AFFINITY", "ANTI_AFFINITY", "SPREAD", "DomainNode", "NodeFilter", "Topology", "TopologyGroup"]


@dataclass(frozen=True, slots=True)
class DomainNode:
    """An existing node as topology sees it: name, labels, taints, label requirements, bound pods."""

    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    requirements: Requirements
    pods: Sequence[Pod] = field(default_factory=tuple)


@dataclass(slots=True)
class _LabelSet:
    """Bound pods sharing a namespace and labels: how many each node (by index) holds."""

    namespace: str
    labels: Mapping[str, str]
    pods_by_node: dict[int, int] = field(default_factory=dict)


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
        self._label_sets: list[_LabelSet] | None = None
        self._domains: dict[tuple[object, ...], dict[int, str]] = {}
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
                if not pod.pod_anti_affinity or self._ignored(pod):
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
        domain_of = self._node_domains(tg.key, nf)
        tg.register(*domain_of.values())
        if not domain_of:
            return
        for label_set in self._bound_label_sets():
            if not tg.selects_pod(label_set.namespace, label_set.labels):
                continue
            for i, pods in label_set.pods_by_node.items():
                value = domain_of.get(i)
                if value is not None:
                    tg.record_many(value, pods)

    def _node_domains(self, key: str, nf: NodeFilter | None) -> dict[int, str]:
        """The domain on ``key`` of each existing node (by index, in node order) that ``nf`` includes;
        shared by the groups with the same key and node filter."""
        cache_key = (key, nf.key if nf is not None else None)
        hit = self._domains.get(cache_key)
        if hit is not None:
            return hit
        domain_of: dict[int, str] = {}
        for i, node in enumerate(self._nodes):
            if nf is not None and not nf.matches(node.taints, node.requirements, ()):
                continue
            value = node.labels.get(key)
            if value is None and key == LABEL_HOSTNAME:
                value = node.name
            if value is not None:
                domain_of[i] = value
        self._domains[cache_key] = domain_of
        return domain_of

    def _bound_label_sets(self) -> list[_LabelSet]:
        """The counted bound pods (not pending, terminal or deleting) grouped by namespace and labels,
        with how many of each every node holds; built on first use, as the pass does not change them."""
        if self._label_sets is None:
            by_labels: dict[tuple[str, frozenset[tuple[str, str]]], _LabelSet] = {}
            for i, node in enumerate(self._nodes):
                for pod in node.pods:
                    if self._ignored(pod):
                        continue
                    signature = (pod.namespace, frozenset(pod.labels.items()))
                    label_set = by_labels.get(signature)
                    if label_set is None:
                        label_set = by_labels[signature] = _LabelSet(pod.namespace, pod.labels)
                    label_set.pods_by_node[i] = label_set.pods_by_node.get(i, 0) + 1
            self._label_sets = list(by_labels.values())
        return self._label_sets

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

    def counts_pod(self, data: PodData) -> bool:
        """True when some group (spread, affinity, anti-affinity, or an inverse anti-affinity group) counts
        pods like this one, so where it lands can change what other pods may do."""
        return any(tg.selects(data) for tg in self.groups.values()) or any(
            tg.selects(data) for tg in self.inverse.values()
        )

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
