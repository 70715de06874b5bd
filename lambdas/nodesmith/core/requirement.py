"""One node requirement: the set of values a single label key may take (Karpenter's ``Requirement``).

A :class:`Requirement` is a finite set (``In``), the complement of a finite set (``NotIn``,
``Exists``) or the empty set (``DoesNotExist``), optionally narrowed by inclusive integer bounds
(``Gt``/``Lt``/``Gte``/``Lte``), with its intersection and rendering back to node selector
requirements. Semantics follow ``kubernetes-sigs/karpenter`` ``pkg/scheduling/requirement.go``; see
:mod:`nodesmith.core.requirements` for the set of requirements keyed by label.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from nodesmith.core.errors import NodesmithError
from nodesmith.core.labels import normalize_key
from nodesmith.core.model import NodeSelectorRequirement

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "OPERATORS",
    "Requirement",
    "RequirementError",
]

OPERATORS: Final = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte"})

_NEGATIVE = frozenset({"NotIn", "DoesNotExist"})


class RequirementError(NodesmithError, ValueError):
    """A requirement that cannot be interpreted: unknown operator, or a bound that is not one integer."""


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
