"""Reading legacy objects field by field, so every field is either converted or reported.

:class:`Fields` wraps one mapping of an input object. Converters ``take`` the fields they know;
:meth:`Fields.report_unused` then notes every other field as "not carried over". Helpers turn
seconds into Karpenter durations and YAML scalars into quantity strings.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nodesmith.core.convert.notes import NoteSink

__all__ = [
    "Fields",
    "canonical",
    "child_path",
    "compact_duration",
    "quantity_map",
    "scalar_str",
    "seconds_field",
]


def child_path(path: str, key: str | int) -> str:
    """``spec`` + ``limits`` -> ``spec.limits``; ``spec.taints`` + 0 -> ``spec.taints[0]``;
    keys with dots or slashes are quoted (``labels["karpenter.sh/x"]``)."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    if "." in key or "/" in key:
        return f'{path}["{key}"]'
    return f"{path}.{key}" if path else key


class Fields:
    """A mapping of an input object whose keys are consumed as they are converted.

    ``path`` is the mapping's field path in the input (``spec.provider``). A non-mapping value
    (other than None, read as empty) raises the sink's :class:`~.notes.ConversionError`.
    """

    def __init__(self, data: Any, path: str, notes: NoteSink) -> None:
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise notes.error(path, f"expected an object, got {type(data).__name__}")
        self._data: Mapping[str, Any] = data
        self._used: set[str] = set()
        self.path = path
        self.notes = notes

    def __contains__(self, key: str) -> bool:
        return key in self._data and self._data[key] is not None

    def at(self, key: str | int) -> str:
        """The field path of ``key`` under this mapping."""
        return child_path(self.path, key)

    def take(self, key: str) -> Any:
        """The value of ``key`` (None when absent), marking it converted."""
        self._used.add(key)
        return self._data.get(key)

    def take_fields(self, key: str) -> Fields:
        """The nested mapping at ``key`` (empty when absent), marking it converted."""
        return Fields(self.take(key), self.at(key), self.notes)

    def take_map(self, key: str) -> dict[str, Any]:
        """A mapping value at ``key`` as a new dict (empty when absent)."""
        value = self.take(key)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.notes.error(self.at(key), f"expected an object, got {type(value).__name__}")
        return {str(k): v for k, v in value.items()}

    def take_list(self, key: str) -> list[Any]:
        """A list value at ``key`` (empty when absent)."""
        value = self.take(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.notes.error(self.at(key), f"expected a list, got {type(value).__name__}")
        return list(value)

    def take_str(self, key: str) -> str | None:
        """A string value at ``key`` (None when absent)."""
        value = self.take(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.notes.error(self.at(key), f"expected a string, got {value!r}")
        return value

    def take_int(self, key: str) -> int | None:
        """An integer value at ``key`` (None when absent)."""
        value = self.take(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.notes.error(self.at(key), f"expected an integer, got {value!r}")
        return value

    def ignore(self, *keys: str) -> None:
        """Mark ``keys`` as handled without converting them (server-written fields)."""
        self._used.update(keys)

    def unused(self) -> list[str]:
        """Keys present but not taken, in input order."""
        return [k for k in self._data if k not in self._used]

    def report_unused(self, reason: str = "not a field this conversion knows") -> None:
        """Note every untaken key as "not carried over"."""
        for key in self.unused():
            self.notes.dropped(self.at(key), reason)


def scalar_str(value: Any) -> Any:
    """YAML numbers as strings (``1`` -> ``"1"``), other values unchanged (bools stay bools)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return str(value)
    return value


def quantity_map(values: Mapping[str, Any]) -> dict[str, Any]:
    """A ResourceList with YAML numbers turned into quantity strings (``cpu: 1`` -> ``"1"``)."""
    return {str(k): scalar_str(v) for k, v in values.items()}


def compact_duration(seconds: int) -> str:
    """Seconds as the shortest Karpenter duration: 2592000 -> ``720h``, 120 -> ``2m``, 90 -> ``90s``.

    Matches the CRD pattern ``^([0-9]+(s|m|h))+$``.
    """
    if seconds > 0 and seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds > 0 and seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"


def seconds_field(fields: Fields, key: str) -> int | None:
    """A non-negative integer number of seconds at ``key`` (v1alpha5 ``ttlSeconds*``), or None."""
    value = fields.take_int(key)
    if value is not None and value < 0:
        raise fields.notes.error(fields.at(key), f"must be a non-negative number of seconds, got {value}")
    return value


def canonical(value: Any) -> str:
    """A stable text form of a JSON-like value, to compare kubelet blocks."""
    return json.dumps(value, sort_keys=True, default=str)


def join_paths(paths: Iterable[str]) -> str:
    """``a, b and c``."""
    items = list(paths)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]
