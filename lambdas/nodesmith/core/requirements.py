"""Karpenter's node requirement algebra.

A :class:`Requirement` is the set of values one label key may take: a finite set (``In``), the
complement of a finite set (``NotIn``, ``Exists``), the empty set (``DoesNotExist``), optionally
narrowed by integer bounds (``Gt``/``Lt``/``Gte``/``Lte``). :class:`Requirements` maps keys to
requirements; adding a requirement for a key that is already present intersects the two.

Semantics follow ``kubernetes-sigs/karpenter`` ``pkg/scheduling/requirement.go`` and
``requirements.go`` (v1.14):

* ``Gt N`` is stored as the inclusive bound ``>= N+1`` and ``Lt N`` as ``<= N-1``; a value only
  satisfies a bound when it parses as an integer.
* :meth:`Requirements.intersects` only looks at keys both sides define; a key both sides leave
  open never conflicts, and two "negative" requirements (``NotIn``/``DoesNotExist``) never
  conflict even when their value sets do not overlap.
* :meth:`Requirements.compatible` additionally refuses keys the other side asks for (with an
  operator other than ``NotIn``/``DoesNotExist``) that this side does not define at all, unless the
  key is in ``allow_undefined``. The scheduler passes :data:`WELL_KNOWN_LABELS` there when the
  left side is a NodePool (Karpenter's ``AllowUndefinedWellKnownLabels``): a custom label a pod
  selects on must be defined by the NodePool, a well-known one need not be.
* Deprecated label aliases (``beta.kubernetes.io/arch``, ``failure-domain.beta.kubernetes.io/zone``
  ...) are normalised to their stable keys on construction (``pkg/apis/v1/labels.go``
  ``NormalizedLabels``).

Where Karpenter picks a random value (``Requirement.Any`` for open sets) this module picks the
smallest admissible one so that results are deterministic.

One :class:`Requirement` lives in :mod:`nodesmith.core.requirement`, the label constants and alias
normalisation in :mod:`nodesmith.core.labels`; this module holds the set and re-exports both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodesmith.core.labels import (
    AWS_WELL_KNOWN_LABELS,
    LABEL_ARCH,
    LABEL_CAPACITY_TYPE,
    LABEL_HOSTNAME,
    LABEL_INITIALIZED,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    LABEL_OS,
    LABEL_REGION,
    LABEL_REGISTERED,
    LABEL_WINDOWS_BUILD,
    LABEL_ZONE,
    LABEL_ZONE_ID,
    NORMALIZED_LABELS,
    RESTRICTED_LABELS,
    WELL_KNOWN_LABELS,
    normalize_key,
)
from nodesmith.core.requirement import OPERATORS, Requirement, RequirementError

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Iterator, Mapping

    from nodesmith.core.model import NodeSelectorRequirement


__all__ = [
    "AWS_WELL_KNOWN_LABELS",
    "LABEL_ARCH",
    "LABEL_CAPACITY_TYPE",
    "LABEL_HOSTNAME",
    "LABEL_INITIALIZED",
    "LABEL_INSTANCE_TYPE",
    "LABEL_NODEPOOL",
    "LABEL_OS",
    "LABEL_REGION",
    "LABEL_REGISTERED",
    "LABEL_WINDOWS_BUILD",
    "LABEL_ZONE",
    "LABEL_ZONE_ID",
    "NORMALIZED_LABELS",
    "OPERATORS",
    "RESTRICTED_LABELS",
    "WELL_KNOWN_LABELS",
    "Requirement",
    "RequirementError",
    "Requirements",
    "normalize_key",
]


def _exists(key: str) -> Requirement:
    return Requirement(key, complement=True)


_LABEL_REQUIREMENTS: dict[tuple[str, str], Requirement] = {}
_LABEL_REQUIREMENTS_MAX = 65_536
"""Shared ``key In [value]`` requirements at most (each node's hostname is one): dropped whole past it."""


def _label_requirement(key: str, value: str) -> Requirement:
    """``normalize_key(key) In [value]``, built once per label and shared: a :class:`Requirement` is immutable, and
    a :class:`Requirements` set only ever replaces its entries."""
    req = _LABEL_REQUIREMENTS.get((key, value))
    if req is None:
        req = Requirement(normalize_key(key), complement=False, values=frozenset((value,)))
        if len(_LABEL_REQUIREMENTS) >= _LABEL_REQUIREMENTS_MAX:
            _LABEL_REQUIREMENTS.clear()
        _LABEL_REQUIREMENTS[(key, value)] = req
    return req


class Requirements:
    """A set of requirements keyed by label key (Karpenter's ``scheduling.Requirements``).

    Mutable through :meth:`add` only; every other operation returns new objects. Iteration yields
    keys in insertion order.
    """

    __slots__ = ("_reqs",)

    def __init__(self, *requirements: Requirement) -> None:
        self._reqs: dict[str, Requirement] = {}
        self.add(*requirements)

    @classmethod
    def from_node_selector_requirements(cls, requirements: Iterable[NodeSelectorRequirement]) -> Requirements:
        """Build from node selector requirements (NodePool ``spec.template.spec.requirements``, pod affinity terms).

        Raises
        ------
        RequirementError
            When a requirement has an unknown operator or a malformed bound.
        """
        return cls(*(Requirement.from_node_selector_requirement(r) for r in requirements))

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> Requirements:
        """One ``key In [value]`` per label (``NewLabelRequirements``): a node's labels, a pod's nodeSelector.

        The single-value requirements are shared (:func:`_label_requirement`): a pass builds the requirements of
        every node's labels, and most labels (zone, instance type, architecture, NodePool) recur on many nodes.
        """
        out = cls()
        reqs = out._reqs
        for key, value in labels.items():
            req = _label_requirement(key, value)
            existing = reqs.get(req.key)
            reqs[req.key] = req if existing is None else req.intersection(existing)
        return out

    def add(self, *requirements: Requirement) -> None:
        """Add requirements in place, intersecting with any requirement already present for the key."""
        reqs = self._reqs
        for req in requirements:
            existing = reqs.get(req.key)
            reqs[req.key] = req if existing is None else req.intersection(existing)

    def copy(self) -> Requirements:
        """A shallow copy (requirements themselves are immutable)."""
        out = Requirements()
        out._reqs = dict(self._reqs)
        return out

    def intersect(self, other: Requirements) -> Requirements:
        """A new set holding both sides' requirements, intersected per key."""
        out = self.copy()
        out.add(*other._reqs.values())
        return out

    def has(self, key: str) -> bool:
        """True when the key is defined (even as ``DoesNotExist``)."""
        return key in self._reqs

    def get(self, key: str) -> Requirement:
        """The requirement for ``key``; an undefined key allows any value (``Exists``)."""
        req = self._reqs.get(key)
        return req if req is not None else _exists(key)

    def peek(self, key: str) -> Requirement | None:
        """The requirement for ``key`` when defined, else None (no ``Exists`` placeholder built)."""
        return self._reqs.get(key)

    def keys(self) -> list[str]:
        """The defined keys, in insertion order."""
        return list(self._reqs)

    def values(self) -> list[Requirement]:
        """The requirements, in insertion order."""
        return list(self._reqs.values())

    def without(self, *keys: str) -> Requirements:
        """A copy without the given keys."""
        out = Requirements()
        out._reqs = {k: v for k, v in self._reqs.items() if k not in keys}
        return out

    def has_min_values(self) -> bool:
        """True when any requirement carries ``minValues``."""
        return any(r.min_values is not None for r in self._reqs.values())

    def intersects(self, other: Requirements) -> str | None:
        """None when every key both sides define has a common value, else the first conflict.

        Two negative requirements (``NotIn``/``DoesNotExist``) never conflict. Keys only one side
        defines are ignored. Mirrors ``Requirements.Intersects``.
        """
        small, large = (self._reqs, other._reqs) if len(self._reqs) <= len(other._reqs) else (other._reqs, self._reqs)
        mine = self._reqs
        for key in small:
            if key not in large:
                continue
            existing = mine[key]
            incoming = other._reqs[key]
            if existing is incoming or existing.has_intersection(incoming):
                continue
            if incoming.is_negative() and existing.is_negative():
                continue
            return f"key {key}, {incoming} not in {existing}"
        return None

    def compatible(self, other: Requirements, *, allow_undefined: Collection[str] = frozenset()) -> str | None:
        """None when ``other`` (e.g. a pod) can be satisfied by ``self`` (e.g. a NodePool or node), else why not.

        A key ``other`` requires with a positive operator must be defined by ``self`` unless it is
        in ``allow_undefined``; then :meth:`intersects` decides. Mirrors ``Requirements.Compatible``.
        """
        mine = self._reqs
        for key, incoming in other._reqs.items():
            if key in mine or key in allow_undefined or incoming.is_negative():
                continue
            return f'label "{key}" does not have known values{_label_hint(self, key, allow_undefined)}'
        return self.intersects(other)

    def is_compatible(self, other: Requirements, *, allow_undefined: Collection[str] = frozenset()) -> bool:
        """Boolean form of :meth:`compatible`."""
        return self.compatible(other, allow_undefined=allow_undefined) is None

    def labels(self) -> dict[str, str]:
        """Labels implied by single-valued ``In`` requirements (restricted labels such as hostname excluded)."""
        out: dict[str, str] = {}
        for key, req in self._reqs.items():
            if key in RESTRICTED_LABELS:
                continue
            value = req.single_value()
            if value is not None:
                out[key] = value
        return out

    def node_selector_requirements(self) -> tuple[NodeSelectorRequirement, ...]:
        """Render as node selector requirements, sorted by key (deterministic output)."""
        out: list[NodeSelectorRequirement] = []
        for key in sorted(self._reqs):
            out.extend(self._reqs[key].node_selector_requirements())
        return tuple(out)

    def frozen(self) -> frozenset[Requirement]:
        """A hashable snapshot (for caches keyed by a requirement set)."""
        return frozenset(self._reqs.values())

    def __contains__(self, key: object) -> bool:
        return key in self._reqs

    def __iter__(self) -> Iterator[str]:
        return iter(self._reqs)

    def __len__(self) -> int:
        return len(self._reqs)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Requirements):
            return NotImplemented
        return self._reqs == other._reqs

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Requirements({self})"

    def __str__(self) -> str:
        return ", ".join(sorted(str(r) for k, r in self._reqs.items() if k not in RESTRICTED_LABELS))


def _label_hint(reqs: Requirements, key: str, allow_undefined: Collection[str]) -> str:
    """A "(typo of ...?)" hint like Karpenter's ``labelHint``: a known key containing or ending like ``key``."""
    suffix = key.split("/", 1)[1] if "/" in key else key
    for known in [*sorted(allow_undefined), *sorted(reqs.keys())]:
        if known != key and (key in known or known.endswith(suffix)):
            return f' (typo of "{known}"?)'
    return ""
