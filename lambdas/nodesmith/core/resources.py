"""Resource quantities as integers.

Inside the core every quantity is an ``int``: ``cpu`` in millicores, ``memory`` and
``ephemeral-storage`` in bytes, ``pods`` and extended resources (``nvidia.com/gpu``) as counts.
A *resource list* is a plain ``dict[str, int]`` (``Resources``) so that hot loops in the
scheduler stay cheap; the helpers here never mutate their arguments.

Quantity syntax follows Kubernetes ``resource.Quantity``
(https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/):
decimal suffixes ``n u m k M G T P E``, binary suffixes ``Ki Mi Gi Ti Pi Ei`` and exponents
``1e3``.
"""

from __future__ import annotations

import functools
import math
import re
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = [
    "CPU",
    "EPHEMERAL_STORAGE",
    "GPU_AMD",
    "GPU_NVIDIA",
    "MEMORY",
    "PODS",
    "QuantityError",
    "Resources",
    "add",
    "exceeded",
    "fits",
    "format_quantity",
    "max_of",
    "parse_quantity",
    "parse_resource_list",
    "sub",
    "total",
]

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
EPHEMERAL_STORAGE = "ephemeral-storage"
GPU_NVIDIA = "nvidia.com/gpu"
GPU_AMD = "amd.com/gpu"

Resources = dict[str, int]
"""Resource name to integer amount (millicores for ``cpu``, bytes for memory/storage, else counts)."""

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$")


class QuantityError(ValueError):
    """A resource quantity that is not valid Kubernetes quantity syntax (or is negative)."""


def parse_quantity(value: str | int | float, *, resource: str = "") -> int:
    """Parse a Kubernetes quantity into the core's integer unit for ``resource``.

    ``cpu`` becomes millicores (``"500m"`` -> 500, ``"2"`` -> 2000); every other resource
    becomes its base unit (bytes for ``"1Gi"`` -> 1073741824, counts for ``"3"`` -> 3).
    Fractions round up, as the kubelet rounds requests (``"0.5m"`` cpu -> 1).

    Raises
    ------
    QuantityError
        If ``value`` is not a quantity, or is negative.
    """
    if isinstance(value, bool):
        raise QuantityError(f"{resource or 'quantity'}: {value!r} is not a quantity")
    return _parse_quantity(value, resource)


@functools.lru_cache(maxsize=4096)
def _parse_quantity(value: str | int | float, resource: str) -> int:
    """:func:`parse_quantity` without the bool check, cached: a pass parses the same few quantities
    (``"450m"``, ``"512Mi"``) tens of thousands of times (``1`` and ``1.0`` share an entry and a value)."""
    if isinstance(value, int | float):
        amount = Decimal(str(value))
    else:
        text = str(value).strip()
        match = _QUANTITY.match(text)
        if not match:
            raise QuantityError(f"{resource or 'quantity'}: {value!r} is not a Kubernetes quantity")
        number, suffix = match.group(1), match.group(2) or ""
        try:
            amount = Decimal(number)
        except InvalidOperation as exc:
            raise QuantityError(f"{resource or 'quantity'}: {value!r} is not a Kubernetes quantity") from exc
        amount *= _BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix]
    if amount < 0:
        raise QuantityError(f"{resource or 'quantity'}: {value!r} is negative")
    if resource == CPU:
        amount *= 1000
    return math.ceil(amount)


def parse_resource_list(values: Mapping[str, str | int | float] | None) -> Resources:
    """Parse a Kubernetes ``ResourceList`` (``{"cpu": "500m", "memory": "1Gi"}``) into ``Resources``.

    Raises
    ------
    QuantityError
        If any value is not a valid quantity; the message names the resource.
    """
    if not values:
        return {}
    return {name: parse_quantity(v, resource=name) for name, v in values.items()}


def format_quantity(resource: str, amount: int) -> str:
    """Render an integer amount back as a short Kubernetes quantity (``1500`` cpu -> ``"1500m"``)."""
    if resource == CPU:
        return f"{amount // 1000}" if amount % 1000 == 0 else f"{amount}m"
    if resource in (MEMORY, EPHEMERAL_STORAGE):
        for suffix, factor in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if amount and amount % factor == 0:
                return f"{amount // factor}{suffix}"
    return str(amount)


def add(a: Mapping[str, int], b: Mapping[str, int]) -> Resources:
    """Return ``a + b`` per resource (missing entries count as 0)."""
    out = dict(a)
    for name, amount in b.items():
        out[name] = out.get(name, 0) + amount
    return out


def sub(a: Mapping[str, int], b: Mapping[str, int]) -> Resources:
    """Return ``a - b`` per resource; results may be negative (an over-committed node)."""
    out = dict(a)
    for name, amount in b.items():
        out[name] = out.get(name, 0) - amount
    return out


def total(items: Iterable[Mapping[str, int]]) -> Resources:
    """Sum many resource lists."""
    out: Resources = {}
    for item in items:
        for name, amount in item.items():
            out[name] = out.get(name, 0) + amount
    return out


def max_of(a: Mapping[str, int], b: Mapping[str, int]) -> Resources:
    """Per-resource maximum of two lists (used for init containers, Kubernetes pod requests rule)."""
    out = dict(a)
    for name, amount in b.items():
        if amount > out.get(name, 0):
            out[name] = amount
    return out


def fits(requests: Mapping[str, int], available: Mapping[str, int]) -> bool:
    """True when every requested amount is at most what is available.

    A resource absent from ``available`` counts as 0, so a pod asking for ``nvidia.com/gpu`` does
    not fit a node without GPUs; zero requests always fit.
    """
    return all(not (amount > 0 and amount > available.get(name, 0)) for name, amount in requests.items())


def exceeded(requests: Mapping[str, int], available: Mapping[str, int]) -> list[str]:
    """Names of the resources whose request is larger than what is available (sorted)."""
    return sorted(n for n, a in requests.items() if a > 0 and a > available.get(n, 0))
