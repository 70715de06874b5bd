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
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from nodesmith.core.errors import NodesmithError
from nodesmith.core.model import NodeSelectorRequirement

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Iterator, Mapping

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

LABEL_ZONE: Final = "topology.kubernetes.io/zone"
LABEL_REGION: Final = "topology.kubernetes.io/region"
LABEL_INSTANCE_TYPE: Final = "node.kubernetes.io/instance-type"
LABEL_ARCH: Final = "kubernetes.io/arch"
LABEL_OS: Final = "kubernetes.io/os"
LABEL_HOSTNAME: Final = "kubernetes.io/hostname"
LABEL_WINDOWS_BUILD: Final = "node.kubernetes.io/windows-build"
LABEL_CAPACITY_TYPE: Final = "karpenter.sh/capacity-type"
LABEL_NODEPOOL: Final = "karpenter.sh/nodepool"
LABEL_REGISTERED: Final = "karpenter.sh/registered"
LABEL_INITIALIZED: Final = "karpenter.sh/initialized"
LABEL_ZONE_ID: Final = "topology.k8s.aws/zone-id"

_AWS = "karpenter.k8s.aws/"

AWS_WELL_KNOWN_LABELS: Final = frozenset(
    {
        LABEL_ZONE_ID,
        *(
            _AWS + suffix
            for suffix in (
                "capacity-reservation-id",
                "capacity-reservation-type",
                "capacity-reservation-interruptible",
                "instance-hypervisor",
                "instance-encryption-in-transit-supported",
                "nitro-sandbox",
                "instance-category",
                "instance-capability-flex",
                "instance-family",
                "instance-generation",
                "instance-size",
                "instance-local-nvme",
                "instance-cpu",
                "instance-cpu-manufacturer",
                "instance-cpu-sustained-clock-speed-mhz",
                "instance-memory",
                "instance-ebs-bandwidth",
                "instance-network-bandwidth",
                "instance-gpu-name",
                "instance-gpu-manufacturer",
                "instance-gpu-count",
                "instance-gpu-memory",
                "instance-accelerator-name",
                "instance-accelerator-manufacturer",
                "instance-accelerator-count",
                "instance-tenancy",
                "placement-group-id",
                "placement-group-partition",
            )
        ),
    }
)
"""Labels the AWS provider adds to the well-known set (``[aws]:pkg/apis/v1/labels.go`` ``init``)."""

WELL_KNOWN_LABELS: Final = frozenset(
    {
        LABEL_NODEPOOL,
        LABEL_ZONE,
        LABEL_REGION,
        LABEL_INSTANCE_TYPE,
        LABEL_ARCH,
        LABEL_OS,
        LABEL_CAPACITY_TYPE,
        LABEL_WINDOWS_BUILD,
        *AWS_WELL_KNOWN_LABELS,
    }
)
"""Labels Karpenter knows values for even when a NodePool does not mention them: core
``v1.WellKnownLabels`` plus the AWS provider's instance labels (:data:`AWS_WELL_KNOWN_LABELS`).
"""

RESTRICTED_LABELS: Final = frozenset({LABEL_HOSTNAME})
"""Labels a NodePool may not set (``v1.RestrictedLabels``)."""

NORMALIZED_LABELS: Final[Mapping[str, str]] = {
    "failure-domain.beta.kubernetes.io/zone": LABEL_ZONE,
    "failure-domain.beta.kubernetes.io/region": LABEL_REGION,
    "beta.kubernetes.io/arch": LABEL_ARCH,
    "beta.kubernetes.io/os": LABEL_OS,
    "beta.kubernetes.io/instance-type": LABEL_INSTANCE_TYPE,
}
"""Deprecated aliases and the stable key they mean (``v1.NormalizedLabels``)."""

OPERATORS: Final = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte"})

_NEGATIVE = frozenset({"NotIn", "DoesNotExist"})


class RequirementError(NodesmithError, ValueError):
    """A requirement that cannot be interpreted: unknown operator, or a bound that is not one integer."""


def normalize_key(key: str) -> str:
    """Map a deprecated label alias to its stable key; other keys are returned unchanged."""
    return NORMALIZED_LABELS.get(key, key)


def _as_int(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


def _within(value: str, gte: int | None, lte: int | None) -> bool:
    if gte is None and lte is None:
        return True
    number = _as_int(value)
    if number is None:
        return False
    return (gte is None or number >= gte) and (lte is None or number <= lte)


def _max_opt(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if a > b else b


def _min_opt(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if a < b else b


class Requirement:
    """The values one label key may take. Treat as immutable (it is hashable); never assign to it.

    ``complement`` False means "one of ``values``" (``In``; empty = ``DoesNotExist``); True means
    "anything except ``values``" (``NotIn``; empty = ``Exists``). ``gte``/``lte`` are inclusive
    integer bounds; ``min_values`` is Karpenter's ``minValues`` (the launch's instance types must
    cover at least that many distinct values of the key).
    """

    __slots__ = ("_hash", "_rendered", "complement", "gte", "key", "lte", "min_values", "values")

    def __init__(
        self,
        key: str,
        *,
        complement: bool,
        values: frozenset[str] = frozenset(),
        gte: int | None = None,
        lte: int | None = None,
        min_values: int | None = None,
    ) -> None:
        self.key = key
        self.complement = complement
        self.values = values
        self.gte = gte
        self.lte = lte
        self.min_values = min_values
        self._hash = hash((key, complement, values, gte, lte, min_values))
        self._rendered: tuple[NodeSelectorRequirement, ...] | None = None

    @classmethod
    def new(
        cls,
        key: str,
        operator: str,
        values: Iterable[str] = (),
        *,
        min_values: int | None = None,
    ) -> Requirement:
        """Build a requirement from a node selector ``key``/``operator``/``values`` triple.

        The key is normalised (deprecated aliases). ``Gt``/``Lt``/``Gte``/``Lte`` take exactly one
        integer value. Mirrors ``NewRequirementWithFlexibility`` in Karpenter's ``requirement.go``.

        Raises
        ------
        RequirementError
            On an unknown operator, or a bound operator without exactly one integer value.
        """
        key = normalize_key(key)
        if operator in ("In", "NotIn", "Exists", "DoesNotExist"):
            kept = frozenset(values) if operator in ("In", "NotIn") else frozenset()
            return cls(key, complement=operator in ("NotIn", "Exists"), values=kept, min_values=min_values)
        if operator not in OPERATORS:
            raise RequirementError(
                f"requirement {key}: unknown operator {operator!r} (expected one of {sorted(OPERATORS)})"
            )
        vals = list(values)
        bound = _as_int(vals[0]) if len(vals) == 1 else None
        if bound is None:
            raise RequirementError(f"requirement {key} {operator}: needs exactly one integer value, got {vals!r}")
        # Gt N is canonicalised to >= N+1 and Lt N to <= N-1 (requirement.go).
        gte = {"Gt": bound + 1, "Gte": bound}.get(operator)
        lte = {"Lt": bound - 1, "Lte": bound}.get(operator)
        return cls(key, complement=True, gte=gte, lte=lte, min_values=min_values)

    @classmethod
    def from_node_selector_requirement(cls, req: NodeSelectorRequirement) -> Requirement:
        """Build from a core :class:`~nodesmith.core.model.NodeSelectorRequirement` (keeps ``min_values``)."""
        return cls.new(req.key, req.operator, req.values, min_values=req.min_values)

    # -- views -------------------------------------------------------------------------------

    @property
    def operator(self) -> str:
        """``In``, ``NotIn``, ``Exists`` or ``DoesNotExist`` (bounds are reported separately, as Karpenter does)."""
        if self.complement:
            return "NotIn" if self.values else "Exists"
        return "In" if self.values else "DoesNotExist"

    def is_negative(self) -> bool:
        """True for ``NotIn``/``DoesNotExist``: requirements an undefined label satisfies."""
        return self.operator in _NEGATIVE

    def has(self, value: str) -> bool:
        """True when ``value`` is allowed (``Requirement.Has``)."""
        if self.gte is None and self.lte is None:
            return (value not in self.values) if self.complement else (value in self.values)
        if self.complement:
            return value not in self.values and _within(value, self.gte, self.lte)
        return value in self.values and _within(value, self.gte, self.lte)

    def sorted_values(self) -> list[str]:
        """The stored values, sorted (the allowed set for ``In``, the excluded set for ``NotIn``)."""
        return sorted(self.values)

    def single_value(self) -> str | None:
        """The only allowed value when the requirement is ``In`` exactly one value, else None."""
        if not self.complement and len(self.values) == 1:
            (value,) = self.values
            return value
        return None

    def any(self) -> str:
        """One allowed value, chosen deterministically; ``""`` when nothing is allowed.

        ``In``: the smallest value. Open sets (``NotIn``/``Exists``): the smallest non-negative
        integer within the bounds that is not excluded (Karpenter picks a random one).
        """
        if not self.complement:
            return min(self.values) if self.values else ""
        candidate = max(self.gte, 0) if self.gte is not None else 0
        while self.lte is None or candidate <= self.lte:
            if str(candidate) not in self.values:
                return str(candidate)
            candidate += 1
        return ""

    # -- algebra -----------------------------------------------------------------------------

    def intersection(self, other: Requirement) -> Requirement:
        """The values allowed by both (``Requirement.Intersection``); ``min_values`` is the larger one."""
        complement = self.complement and other.complement
        gte = _max_opt(self.gte, other.gte)
        lte = _min_opt(self.lte, other.lte)
        min_values = _max_opt(self.min_values, other.min_values)
        if gte is not None and lte is not None and gte > lte:
            return Requirement(self.key, complement=False, min_values=min_values)
        if self.complement and other.complement:
            values = self.values | other.values
        elif self.complement:
            values = other.values - self.values
        elif other.complement:
            values = self.values - other.values
        else:
            values = self.values & other.values
        if (gte is not None or lte is not None) and values:
            values = frozenset(v for v in values if _within(v, gte, lte))
        if not complement:
            gte = lte = None
        return Requirement(self.key, complement=complement, values=values, gte=gte, lte=lte, min_values=min_values)

    def has_intersection(self, other: Requirement) -> bool:
        """True when at least one value is allowed by both (``Requirement.HasIntersection``)."""
        gte = _max_opt(self.gte, other.gte)
        lte = _min_opt(self.lte, other.lte)
        if gte is not None and lte is not None and gte > lte:
            return False
        if self.complement and other.complement:
            return True
        if self.complement:
            return any(v not in self.values and _within(v, gte, lte) for v in other.values)
        if other.complement:
            return any(v not in other.values and _within(v, gte, lte) for v in self.values)
        small, large = self.values, other.values
        if len(small) > len(large):
            small, large = large, small
        return any(v in large and _within(v, gte, lte) for v in small)

    def node_selector_requirements(self) -> tuple[NodeSelectorRequirement, ...]:
        """Render as node selector requirements (two when both bounds are set), like ``NodeSelectorRequirement()``.

        Memoised: a requirement is immutable, and large ``In`` lists (instance types) are sorted once.
        """
        if self._rendered is None:
            self._rendered = self._render()
        return self._rendered

    def _render(self) -> tuple[NodeSelectorRequirement, ...]:
        if self.gte is not None and self.lte is not None:
            return (
                NodeSelectorRequirement(self.key, "Gte", (str(self.gte),), self.min_values),
                NodeSelectorRequirement(self.key, "Lte", (str(self.lte),), self.min_values),
            )
        if self.gte is not None:
            return (NodeSelectorRequirement(self.key, "Gte", (str(self.gte),), self.min_values),)
        if self.lte is not None:
            return (NodeSelectorRequirement(self.key, "Lte", (str(self.lte),), self.min_values),)
        op = self.operator
        values = tuple(self.sorted_values()) if op in ("In", "NotIn") else ()
        return (NodeSelectorRequirement(self.key, op, values, self.min_values),)

    # -- protocol ----------------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Requirement):
            return NotImplemented
        return (
            self._hash == other._hash
            and self.key == other.key
            and self.complement == other.complement
            and self.values == other.values
            and self.gte == other.gte
            and self.lte == other.lte
            and self.min_values == other.min_values
        )

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"Requirement({self})"

    def __str__(self) -> str:
        op = self.operator
        if op in ("Exists", "DoesNotExist"):
            text = f"{self.key} {op}"
        else:
            values = self.sorted_values()
            shown = ", ".join(values[:5]) + (f" and {len(values) - 5} others" if len(values) > 5 else "")
            text = f"{self.key} {op} [{shown}]"
        if self.gte is not None:
            text += f" >={self.gte}"
        if self.lte is not None:
            text += f" <={self.lte}"
        if self.min_values is not None:
            text += f" minValues {self.min_values}"
        return text


def _exists(key: str) -> Requirement:
    return Requirement(key, complement=True)


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
        """One ``key In [value]`` per label (``NewLabelRequirements``): a node's labels, a pod's nodeSelector."""
        out = cls()
        reqs = out._reqs
        for key, value in labels.items():
            req = Requirement(normalize_key(key), complement=False, values=frozenset((value,)))
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
