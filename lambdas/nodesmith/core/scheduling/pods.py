"""What the scheduler derives from a pod: which pods it provisions for, in which order, and the
pod's requirements, host ports and (relaxable) soft constraints.

Sources (kubernetes-sigs/karpenter v1.14):

* pending pods: ``pkg/utils/pod/scheduling.go IsProvisionable``;
* queue order: ``pkg/controllers/provisioning/scheduling/queue.go byCPUAndMemoryDescending``;
* requirements: ``pkg/scheduling/requirements.go newPodRequirements`` (node selector + the first
  required node-affinity term + the heaviest preferred term treated as required);
* relaxation: ``pkg/controllers/provisioning/scheduling/preferences.go Relax``;
* host ports: ``pkg/scheduling/hostportusage.go``.

Pods with identical constraints share one :class:`PodData` (interned by :class:`PodDataCache`), so
per-pod work in the scheduler's hot loops is cache lookups keyed by ``id(PodData)``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from nodesmith.core.requirements import Requirement, RequirementError, Requirements
from nodesmith.core.resources import CPU, MEMORY, PODS
from nodesmith.core.scheduling.taints import PREFER_NO_SCHEDULE_TOLERATION

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from nodesmith.core.model import (
        LabelSelector,
        NodeSelectorRequirement,
        NodeSelectorTerm,
        Pod,
        PodAffinityTerm,
        Toleration,
        TopologySpreadConstraint,
        WeightedNodeSelectorTerm,
        WeightedPodAffinityTerm,
    )
    from nodesmith.core.resources import Resources

__all__ = [
    "ALL_NAMESPACES",
    "Constraints",
    "HostPort",
    "PodData",
    "PodDataCache",
    "host_ports",
    "is_provisionable",
    "pod_id",
    "ports_conflict",
    "queue_key",
]

HostPort = tuple[str, int, str]
"""``(protocol, port, hostIP)`` with defaults filled in (TCP, ``0.0.0.0``)."""

ALL_NAMESPACES = "*"
"""Marker in a term's namespace set meaning every namespace (an empty ``namespaceSelector``)."""

_UNSPECIFIED_IPS = frozenset({"", "0.0.0.0", "::"})


def is_provisionable(pod: Pod) -> bool:
    """True for a pod Karpenter provisions for: marked Unschedulable by kube-scheduler, not bound,
    not preempting (no ``nominatedNodeName``), not owned by a DaemonSet, not a mirror/static pod.
    """
    return (
        pod.unschedulable
        and not pod.node_name
        and not pod.nominated_node_name
        and not pod.is_daemonset
        and not pod.is_mirror
        and pod.owner_kind != "Node"
    )


def pod_id(pod: Pod) -> str:
    """The pod's identity inside one pass: its UID, or ``namespace/name`` when the UID is empty."""
    return pod.uid or pod.key


def queue_key(pod: Pod) -> tuple[int, int, float, str, str]:
    """Sort key: cpu desc, memory desc, creation time asc, uid, then ``namespace/name`` (total order)."""
    return (-pod.requests.get(CPU, 0), -pod.requests.get(MEMORY, 0), pod.creation_timestamp, pod.uid, pod.key)


def host_ports(pod: Pod) -> tuple[HostPort, ...]:
    """The pod's host ports as ``(protocol, port, ip)``; protocol defaults to TCP and IP to ``0.0.0.0``."""
    out: list[HostPort] = []
    for port, protocol, ip in pod.host_ports:
        if port:
            out.append((protocol or "TCP", int(port), ip or "0.0.0.0"))
    return tuple(out)


def ports_conflict(new: Iterable[HostPort], used: Iterable[HostPort]) -> HostPort | None:
    """The first port of ``new`` that clashes with ``used`` (same protocol and port, and same IP
    unless either is unspecified), or None.
    """
    used_list = list(used)
    for proto, port, ip in new:
        for u_proto, u_port, u_ip in used_list:
            if (
                proto == u_proto
                and port == u_port
                and (ip == u_ip or ip in _UNSPECIFIED_IPS or u_ip in _UNSPECIFIED_IPS)
            ):
                return (proto, port, ip)
    return None


def _by_weight(terms: Sequence[WeightedNodeSelectorTerm | WeightedPodAffinityTerm]) -> tuple[int, ...]:
    return tuple(sorted(range(len(terms)), key=lambda i: -terms[i].weight))


@dataclass(frozen=True, slots=True)
class Constraints:
    """A pod's relaxable constraints in their current relaxation state.

    Preferred terms are kept heaviest first (stable), so "the heaviest" is always index 0.
    """

    required_terms: tuple[NodeSelectorTerm, ...]
    preferred_terms: tuple[WeightedNodeSelectorTerm, ...]
    preferred_pod_affinity: tuple[WeightedPodAffinityTerm, ...]
    preferred_pod_anti_affinity: tuple[WeightedPodAffinityTerm, ...]
    topology_spread: tuple[TopologySpreadConstraint, ...]
    extra_tolerations: tuple[Toleration, ...] = ()

    @classmethod
    def from_pod(cls, pod: Pod, *, respect_preferences: bool = True) -> Constraints:
        """The pod's constraints before any relaxation (preferences dropped when not respected)."""
        pref = pod.preferred_node_affinity
        paff = pod.preferred_pod_affinity
        panti = pod.preferred_pod_anti_affinity
        spreads = pod.topology_spread
        if not respect_preferences:
            pref, paff, panti = (), (), ()
            spreads = tuple(s for s in spreads if s.when_unsatisfiable != "ScheduleAnyway")
        return cls(
            required_terms=pod.required_node_affinity,
            preferred_terms=tuple(pref[i] for i in _by_weight(pref)),
            preferred_pod_affinity=tuple(paff[i] for i in _by_weight(paff)),
            preferred_pod_anti_affinity=tuple(panti[i] for i in _by_weight(panti)),
            topology_spread=spreads,
        )

    def relax(  # noqa: PLR0911 - one return per relaxation step, in Karpenter order
        self, *, tolerations: Sequence[Toleration], tolerate_prefer_no_schedule: bool
    ) -> tuple[Constraints, str] | None:
        """The next relaxation step and what it removed, or None when nothing is left to relax.

        Order (``preferences.go Relax``): drop the first required node-affinity term when more
        than one remain (terms are ORed); drop the heaviest preferred pod-affinity term; the
        heaviest preferred pod-anti-affinity term; the heaviest preferred node-affinity term; the
        first ``ScheduleAnyway`` spread constraint; finally tolerate ``PreferNoSchedule`` taints
        (only when some NodePool has one).
        """
        if len(self.required_terms) > 1:
            return replace(self, required_terms=self.required_terms[1:]), "required node affinity term 1"
        if self.preferred_pod_affinity:
            return replace(self, preferred_pod_affinity=self.preferred_pod_affinity[1:]), "preferred pod affinity"
        if self.preferred_pod_anti_affinity:
            rest = self.preferred_pod_anti_affinity[1:]
            return replace(self, preferred_pod_anti_affinity=rest), "preferred pod anti-affinity"
        if self.preferred_terms:
            return replace(self, preferred_terms=self.preferred_terms[1:]), "preferred node affinity"
        for i, tsc in enumerate(self.topology_spread):
            if tsc.when_unsatisfiable == "ScheduleAnyway":
                rest_tsc = self.topology_spread[:i] + self.topology_spread[i + 1 :]
                return replace(self, topology_spread=rest_tsc), "ScheduleAnyway topology spread"
        if tolerate_prefer_no_schedule and not self.extra_tolerations:
            probe = PREFER_NO_SCHEDULE_TOLERATION
            if not any(t.operator == "Exists" and not t.key and t.effect in (None, probe.effect) for t in tolerations):
                return replace(self, extra_tolerations=(probe,)), "PreferNoSchedule taints tolerated"
        return None


def _term_requirements(term: NodeSelectorTerm) -> Requirements:
    return Requirements.from_node_selector_requirements(term.match_expressions)


def _namespaces(pod: Pod, term: PodAffinityTerm) -> frozenset[str] | None:
    """The namespaces a term selects, or None when it uses a namespaceSelector we cannot evaluate."""
    if term.namespace_selector is not None:
        sel = term.namespace_selector
        if sel.match_labels or sel.match_expressions:
            return None
        return frozenset((ALL_NAMESPACES,))
    if term.namespaces:
        return frozenset(term.namespaces)
    return frozenset((pod.namespace,))


class PodData:
    """Everything the scheduler needs from a pod in one relaxation state (shared by identical pods).

    ``requests`` (cpu millicores, memory bytes, ``pods`` >= 1 ...); ``requirements`` = node selector +
    first required term + heaviest preferred term + the pod's volume topology
    (:mod:`~nodesmith.core.scheduling.volumes`); ``strict`` = the same without the preferred term
    (``NewStrictPodRequirements``; used for topology domains); ``node_filter_terms`` = node selector
    ANDed with each required term (ORed; topology spread node inclusion, volumes left out as
    Karpenter does); ``affinity`` /
    ``anti_affinity`` = ``(term, namespaces)`` required plus not-yet-relaxed preferred terms.
    ``error`` is set when the pod cannot be scheduled by this implementation at all (malformed
    requirement, unsupported namespaceSelector) and says why.
    """

    __slots__ = (
        "affinity",
        "anti_affinity",
        "constraints",
        "error",
        "host_ports",
        "labels",
        "namespace",
        "node_filter_terms",
        "requests",
        "required_anti_affinity",
        "requirements",
        "spreads",
        "strict",
        "tolerations",
    )

    def __init__(self, pod: Pod, constraints: Constraints, volume: tuple[NodeSelectorRequirement, ...] = ()) -> None:
        requests = dict(pod.requests)
        if requests.get(PODS, 0) < 1:
            requests[PODS] = 1
        self.requests: Resources = requests
        self.namespace = pod.namespace
        self.labels = dict(pod.labels)
        self.constraints = constraints
        self.tolerations: tuple[Toleration, ...] = pod.tolerations + constraints.extra_tolerations
        self.host_ports = host_ports(pod)
        self.spreads = constraints.topology_spread
        self.error: str | None = None
        self.requirements = Requirements()
        self.strict = Requirements()
        self.node_filter_terms: tuple[Requirements, ...] = ()
        self.affinity: tuple[tuple[PodAffinityTerm, frozenset[str]], ...] = ()
        self.anti_affinity: tuple[tuple[PodAffinityTerm, frozenset[str]], ...] = ()
        self.required_anti_affinity: tuple[tuple[PodAffinityTerm, frozenset[str]], ...] = ()
        try:
            self._build_requirements(pod, constraints)
        except RequirementError as exc:
            self.error = f"invalid node affinity: {exc}"
            return
        if volume:
            try:
                from_volumes = Requirements.from_node_selector_requirements(volume).values()
            except RequirementError as exc:
                self.error = f"invalid volume topology: {exc}"
                return
            self.requirements.add(*from_volumes)
            self.strict.add(*from_volumes)
        self._build_pod_affinity(pod, constraints)

    def _build_requirements(self, pod: Pod, constraints: Constraints) -> None:
        selector = Requirements.from_labels(pod.node_selector)
        strict = selector.copy()
        if constraints.required_terms:
            strict.add(*_term_requirements(constraints.required_terms[0]).values())
        self.strict = strict
        requirements = strict.copy()
        if constraints.preferred_terms:
            requirements.add(*_term_requirements(constraints.preferred_terms[0].term).values())
        self.requirements = requirements
        if pod.required_node_affinity:
            terms = []
            for term in constraints.required_terms:
                reqs = selector.copy()
                reqs.add(*_term_requirements(term).values())
                terms.append(reqs)
            self.node_filter_terms = tuple(terms)
        else:
            self.node_filter_terms = (selector,)

    def _build_pod_affinity(self, pod: Pod, constraints: Constraints) -> None:
        required_aff = []
        for term in pod.pod_affinity:
            ns = _namespaces(pod, term)
            if ns is None:
                self.error = "podAffinity with a non-empty namespaceSelector is not supported yet"
                return
            required_aff.append((term, ns))
        required_anti = []
        for term in pod.pod_anti_affinity:
            ns = _namespaces(pod, term)
            if ns is None:
                self.error = "podAntiAffinity with a non-empty namespaceSelector is not supported yet"
                return
            required_anti.append((term, ns))
        # Preferred terms with a namespaceSelector we cannot evaluate are dropped: they are only preferences.
        pref_aff = [(w.term, ns) for w in constraints.preferred_pod_affinity if (ns := _namespaces(pod, w.term))]
        pref_anti = [(w.term, ns) for w in constraints.preferred_pod_anti_affinity if (ns := _namespaces(pod, w.term))]
        self.affinity = (*required_aff, *pref_aff)
        self.anti_affinity = (*required_anti, *pref_anti)
        self.required_anti_affinity = tuple(required_anti)

    @property
    def has_topology(self) -> bool:
        """True when the pod owns any topology constraint (spread, pod affinity or anti-affinity)."""
        return bool(self.spreads or self.affinity or self.anti_affinity)


def _freeze(mapping: Mapping[str, object]) -> frozenset[tuple[str, object]]:
    return frozenset(mapping.items())


def _base_signature(pod: Pod) -> tuple[object, ...]:
    return (
        pod.namespace,
        _freeze(pod.labels),
        _freeze(pod.requests),
        _freeze(pod.node_selector),
        pod.tolerations,
        pod.host_ports,
        pod.required_node_affinity,
        pod.pod_affinity,
        pod.pod_anti_affinity,
    )


class PodDataCache:
    """Interns :class:`PodData` per (pod signature, constraints) so identical pods share one object, and keeps each
    pod's unrelaxed :class:`Constraints`.

    ``volumes`` maps a pod key (``namespace/name``) to its volume topology requirements. Pods are known by
    :func:`pod_id`, so one cache serves any number of scheduling passes over the same pods with the same
    ``volumes`` (a consolidation's trials, :class:`~nodesmith.core.scheduling.types.SchedulingInput` ``pod_data``):
    the PodData it hands out are immutable and kept alive by the cache, so a pass's caches keyed by their
    identity never see one reused.
    """

    __slots__ = ("_by_key", "_original", "_signatures", "volumes")

    def __init__(self, volumes: Mapping[str, tuple[NodeSelectorRequirement, ...]] | None = None) -> None:
        self._by_key: dict[tuple[object, ...], PodData] = {}
        self._signatures: dict[str, tuple[object, ...]] = {}
        self._original: dict[str, Constraints] = {}
        self.volumes: Mapping[str, tuple[NodeSelectorRequirement, ...]] = volumes or {}

    def serves(self, volumes: Mapping[str, tuple[NodeSelectorRequirement, ...]]) -> bool:
        """Whether the cache was made for ``volumes`` (the same mapping, or an equal one)."""
        return volumes is self.volumes or dict(volumes) == dict(self.volumes)

    def original(self, pod: Pod) -> Constraints:
        """``pod``'s constraints before any relaxation (:meth:`Constraints.from_pod`), derived once per pod."""
        pid = pod_id(pod)
        constraints = self._original.get(pid)
        if constraints is None:
            constraints = self._original[pid] = Constraints.from_pod(pod)
        return constraints

    def get(self, pod: Pod, constraints: Constraints) -> PodData:
        """The shared :class:`PodData` for ``pod`` in relaxation state ``constraints``."""
        pid = pod_id(pod)
        sig = self._signatures.get(pid)
        if sig is None:
            sig = (*_base_signature(pod), self.volumes.get(pod.key, ()))
            self._signatures[pid] = sig
        key = (sig, constraints)
        data = self._by_key.get(key)
        if data is None:
            data = PodData(pod, constraints, self.volumes.get(pod.key, ()))
            self._by_key[key] = data
        return data


def selector_key(selector: LabelSelector | None) -> tuple[object, ...] | None:
    """A canonical, hashable form of a label selector (order of labels/expressions ignored)."""
    if selector is None:
        return None
    exprs = tuple(sorted((e.key, e.operator, tuple(sorted(e.values))) for e in selector.match_expressions))
    return (tuple(sorted(selector.match_labels)), exprs)


def exists_requirement(key: str) -> Requirement:
    """``key Exists`` (any value)."""
    return Requirement(key, complement=True)
