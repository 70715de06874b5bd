"""Go durations (``time.ParseDuration``) as Kubernetes and Karpenter read them, in seconds.

Karpenter's API fields (``expireAfter``, ``consolidateAfter``, ``terminationGracePeriod``, budget durations)
and the ``karpenter.sh/do-not-disrupt`` annotation are Go durations; one parser reads them all. Pure.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Final

__all__ = ["parse_go_duration"]

_UNIT_NANOSECONDS: Final = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # MICRO SIGN
    "\u03bcs": 1_000,  # GREEK SMALL LETTER MU
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_MAX_NANOSECONDS: Final = 2**63 - 1


def _digits(text: str, pos: int) -> int:
    """The index of the first non-digit at or after ``pos``."""
    while pos < len(text) and "0" <= text[pos] <= "9":
        pos += 1
    return pos


@lru_cache(maxsize=256)  # a pass reads the same few durations of every NodeClaim and NodePool
def parse_go_duration(text: str) -> float:
    """Seconds in ``text`` read as Go's ``time.ParseDuration`` reads it.

    Grammar: an optional sign, then ``"0"`` alone or one or more ``<decimal><unit>`` terms, units ``ns``,
    ``us`` (``µs``, ``μs``), ``ms``, ``s``, ``m``, ``h``; no spaces. A term's fraction is truncated to whole
    nanoseconds, as Go does. Raises ``ValueError`` with Go's message (``time: invalid duration "x"``,
    ``time: missing unit in duration "1"``, ``time: unknown unit "d" in duration "1d"``) for anything else,
    including a value past Go's ``int64`` nanoseconds.
    """
    quoted = f'"{text}"'
    s = text
    negative = False
    if s and s[0] in "+-":
        negative = s[0] == "-"
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise ValueError(f"time: invalid duration {quoted}")
    total = 0
    pos = 0
    while pos < len(s):
        if not (s[pos] == "." or "0" <= s[pos] <= "9"):
            raise ValueError(f"time: invalid duration {quoted}")
        end = _digits(s, pos)
        whole = s[pos:end]
        pos = end
        fraction = ""
        if pos < len(s) and s[pos] == ".":
            end = _digits(s, pos + 1)
            fraction = s[pos + 1 : end]
            pos = end
        if not whole and not fraction:
            raise ValueError(f"time: invalid duration {quoted}")
        start = pos
        while pos < len(s) and s[pos] != "." and not ("0" <= s[pos] <= "9"):
            pos += 1
        unit = s[start:pos]
        if not unit:
            raise ValueError(f"time: missing unit in duration {quoted}")
        scale = _UNIT_NANOSECONDS.get(unit)
        if scale is None:
            raise ValueError(f'time: unknown unit "{unit}" in duration {quoted}')
        term = int(whole or "0") * scale
        if fraction:
            term += int(fraction) * scale // 10 ** len(fraction)
        total += term
        if total > _MAX_NANOSECONDS + (1 if negative else 0):
            raise ValueError(f"time: invalid duration {quoted}")
    return (-total if negative else total) / 1e9
