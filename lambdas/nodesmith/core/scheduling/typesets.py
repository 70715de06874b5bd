"""Instance-type sets as Python ints used as bitsets, and what a NodeClaim launches with.

Bit ``i`` of a mask is the template's ``types[i]``. :class:`SortedAmounts` keeps the types sorted by
one per-type amount (allocatable after DaemonSets, or capacity) with prefix bitsets, so "types with
less than N free" is one bisect and one lookup (``[core]:.../scheduling/nodeclaim.go`` filters the
instance-type list type by type instead).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from nodesmith.core.model import InstanceType
    from nodesmith.core.requirements import Requirement
    from nodesmith.core.scheduling.instancetypes import TypeInfo

__all__ = ["Chosen", "SortedAmounts", "iter_bits"]


def iter_bits(mask: int) -> Iterator[int]:
    """Indices of the set bits of ``mask``, ascending."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


@dataclass(frozen=True, slots=True)
class Chosen:
    """What a NodeClaim launches with: types (cheapest allowed offering first) and their offerings' domains."""

    types: tuple[TypeInfo, ...]
    instance_types: tuple[InstanceType, ...]
    instance_type_requirement: Requirement
    zones: frozenset[str]
    capacity_types: frozenset[str]
    price: float


class SortedAmounts:
    """Types sorted by one per-type amount, with prefix bitsets (types ``[:k]`` of that order)."""

    __slots__ = ("order", "prefix", "values")

    def __init__(self, amounts: Sequence[int]) -> None:
        self.order = sorted(range(len(amounts)), key=lambda i: (amounts[i], i))
        self.values = [amounts[i] for i in self.order]
        prefix = [0]
        acc = 0
        for i in self.order:
            acc |= 1 << i
            prefix.append(acc)
        self.prefix = prefix

    def below(self, amount: int) -> int:
        """Bitset of the types whose amount is < ``amount``."""
        return self.prefix[bisect_left(self.values, amount)]

    def above(self, amount: int) -> int:
        """Bitset of the types whose amount is > ``amount``."""
        return self.prefix[-1] & ~self.prefix[bisect_right(self.values, amount)]
