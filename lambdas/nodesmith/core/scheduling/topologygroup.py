"""Topology groups: per-domain counts for one topology spread constraint or pod (anti-)affinity term.

Mirrors ``[core]:pkg/controllers/provisioning/scheduling/topologygroup.go`` and
``topologynodefilter.go`` (v1.14): the next allowed domains for spread (``maxSkew`` against the
global minimum, ``minDomains``), affinity (domains already holding a matching pod, or any domain
for the first self-selecting pod) and anti-affinity (domains holding no matching pod), with the
hostname special case for a single candidate node. Ties are broken by domain name (Karpenter uses
map order) and the affinity bootstrap picks one domain, so results are deterministic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodesmith.core.requirements import LABEL_HOSTNAME, Requirement
from nodesmith.core.scheduling.pods import ALL_NAMESPACES
from nodesmith.core.scheduling.taints import first_untolerated

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping, Sequence

    from nodesmith.core.model import LabelSelector, Taint, Toleration, TopologySpreadConstraint
    from nodesmith.core.requirements import Requirements
    from nodesmith.core.scheduling.pods import PodData

__all__ = ["AFFINITY", "ANTI_AFFINITY", "SPREAD", "NodeFilter", "TopologyGroup"]

SPREAD = "topology spread"
AFFINITY = "pod affinity"
ANTI_AFFINITY = "pod anti-affinity"

_MAX = 2**31 - 1


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

    def record_many(self, domain: str, pods: int) -> None:
        """Count ``pods`` (>= 1) more matching pods in ``domain``."""
        self.domains[domain] = self.domains.get(domain, 0) + pods
        self.empty.discard(domain)

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
