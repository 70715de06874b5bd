"""What every Kubernetes object parser shares: the parse error, typed field readers, timestamps, selectors.

:class:`ObjectParseError` carries the path of the offending field; the ``_``-prefixed readers
(``_map``, ``_list``, ``_str``, ...) read one field of a JSON object, check its type and raise that
error with the path, and are private to :mod:`nodesmith.core.objects`. :func:`parse_timestamp`
turns RFC 3339 into epoch seconds; :func:`label_selector_from_dict` reads a ``metav1.LabelSelector``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from nodesmith.core import resources as res
from nodesmith.core.model import LabelSelector, LabelSelectorRequirement

__all__ = [
    "ObjectParseError",
    "label_selector_from_dict",
    "parse_timestamp",
]


class ObjectParseError(ValueError):
    """A Kubernetes object that cannot be read. ``field`` is the path (``spec.containers[0].name``)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}" if field else reason)
        self.field = field
        self.reason = reason


# --- small typed readers -------------------------------------------------------------------------


def _map(obj: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ObjectParseError(_join(path, key), f"expected an object, got {type(value).__name__}")
    return value


def _list(obj: Mapping[str, Any], key: str, path: str) -> list[Any]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ObjectParseError(_join(path, key), f"expected a list, got {type(value).__name__}")
    return value


def _item_map(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ObjectParseError(path, f"expected an object, got {type(value).__name__}")
    return value


def _str(obj: Mapping[str, Any], key: str, path: str, default: str = "") -> str:
    value = obj.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise ObjectParseError(_join(path, key), f"expected a string, got {type(value).__name__}")
    return value


def _int(obj: Mapping[str, Any], key: str, path: str, default: int) -> int:
    value = obj.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ObjectParseError(_join(path, key), f"expected an integer, got {value!r}")
    return value


def _str_map(obj: Mapping[str, Any], key: str, path: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in _map(obj, key, path).items():
        if not isinstance(v, str):
            raise ObjectParseError(f"{_join(path, key)}.{k}", f"expected a string, got {v!r}")
        out[str(k)] = v
    return out


def _str_tuple(obj: Mapping[str, Any], key: str, path: str) -> tuple[str, ...]:
    items = _list(obj, key, path)
    for i, v in enumerate(items):
        if not isinstance(v, str):
            raise ObjectParseError(f"{_join(path, key)}[{i}]", f"expected a string, got {v!r}")
    return tuple(items)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def parse_timestamp(value: Any, *, field: str = "") -> float | None:
    """RFC 3339 timestamp (``"2024-05-01T12:00:00Z"``) or ``datetime`` -> epoch seconds; None stays None.

    Naive datetimes are taken as UTC. Raises :class:`ObjectParseError` for anything else.
    """
    if value is None:
        return None
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError as exc:
            raise ObjectParseError(field, f"{value!r} is not an RFC 3339 timestamp") from exc
    else:
        raise ObjectParseError(field, f"{value!r} is not an RFC 3339 timestamp")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _resource_list(obj: Mapping[str, Any], key: str, path: str) -> res.Resources:
    out: res.Resources = {}
    for name, value in _map(obj, key, path).items():
        try:
            out[str(name)] = res.parse_quantity(value, resource=str(name))
        except res.QuantityError as exc:
            raise ObjectParseError(f"{_join(path, key)}.{name}", f"{value!r} is not a valid quantity") from exc
    return out


# --- selectors -----------------------------------------------------------------------------------


def label_selector_from_dict(obj: Mapping[str, Any] | None, *, path: str = "") -> LabelSelector | None:
    """``metav1.LabelSelector`` -> :class:`LabelSelector`; None when ``obj`` is None.

    Raises :class:`ObjectParseError` for a bad operator or malformed entries.
    """
    if obj is None:
        return None
    obj = _item_map(obj, path)
    match_labels = tuple(sorted(_str_map(obj, "matchLabels", path).items()))
    exprs: list[LabelSelectorRequirement] = []
    for i, raw in enumerate(_list(obj, "matchExpressions", path)):
        p = f"{_join(path, 'matchExpressions')}[{i}]"
        item = _item_map(raw, p)
        op = _str(item, "operator", p)
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise ObjectParseError(f"{p}.operator", f"{op!r} is not one of In, NotIn, Exists, DoesNotExist")
        exprs.append(
            LabelSelectorRequirement(key=_str(item, "key", p), operator=op, values=_str_tuple(item, "values", p))
        )
    return LabelSelector(match_labels=match_labels, match_expressions=tuple(exprs))
