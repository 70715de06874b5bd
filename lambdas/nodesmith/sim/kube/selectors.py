"""Label and field selectors, parsed like ``k8s.io/apimachinery/pkg/labels.Parse`` and ``fields``.

``labelSelector`` syntax: comma-separated requirements ``k=v``, ``k==v``, ``k!=v``,
``k in (a,b)``, ``k notin (a,b)``, ``k`` (exists), ``!k`` (does not exist), ``k>n`` / ``k<n``.
``fieldSelector`` syntax: ``path=v``, ``path==v``, ``path!=v`` joined by commas; a missing field
reads as ``""`` (so ``spec.nodeName=`` selects unbound pods) and booleans as ``true``/``false``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from nodesmith.sim.kube.errors import bad_request

__all__ = [
    "FieldSelector",
    "LabelPredicate",
    "fields_match",
    "match_label_selector",
    "parse_field_selector",
    "parse_label_selector",
]

LabelPredicate = Callable[[Mapping[str, str]], bool]
FieldSelector = list[tuple[str, str, str]]  # (field label, "=" | "!=", value)

_SET_RE = re.compile(r"^\s*(!?)\s*([^\s!=<>(),]+)\s*(?:(in|notin)\s*\(([^)]*)\)|(==|=|!=|<|>)\s*([^\s,]*))?\s*$")


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p for p in (s.strip() for s in parts) if p]


def _set_requirement(key: str, op: str, raw_values: str) -> LabelPredicate:
    values = frozenset(v.strip() for v in raw_values.split(",") if v.strip())
    if op == "in":
        return lambda labels: key in labels and labels[key] in values
    return lambda labels: key not in labels or labels[key] not in values


def _compare_requirement(text: str, key: str, op: str, value: str) -> LabelPredicate:
    try:
        bound = int(value)
    except ValueError:
        raise bad_request(f"unable to parse requirement: {text!r}: {op} needs an integer") from None

    def compare(labels: Mapping[str, str]) -> bool:
        try:
            actual = int(labels[key])
        except (KeyError, ValueError):
            return False
        return actual > bound if op == ">" else actual < bound

    return compare


def _requirement(text: str) -> LabelPredicate:
    m = _SET_RE.match(text)
    if m is None:
        raise bad_request(f"unable to parse requirement: {text!r}")
    negate, key, set_op, set_values, op, value = m.groups()
    if negate and (set_op or op):
        raise bad_request(f"unable to parse requirement: {text!r}")
    if negate:
        return lambda labels: key not in labels
    if set_op:
        return _set_requirement(key, set_op, set_values)
    if op is None:
        return lambda labels: key in labels
    if op in ("=", "=="):
        return lambda labels: labels.get(key) == value
    if op == "!=":
        return lambda labels: labels.get(key) != value
    return _compare_requirement(text, key, op, value)


def parse_label_selector(text: str | None) -> LabelPredicate:
    """A predicate over a labels mapping for a ``labelSelector`` string (empty selects all).

    Raises ``ApiError`` 400 on a malformed selector, as the API server does.
    """
    if not text or not text.strip():
        return lambda _labels: True
    reqs = [_requirement(part) for part in _split_top_level(text)]
    return lambda labels: all(r(labels) for r in reqs)


def parse_field_selector(text: str | None, allowed: Mapping[str, str]) -> FieldSelector:
    """Parse a ``fieldSelector``; each label must be in ``allowed`` (label -> dotted path).

    Raises ``ApiError`` 400 ``field label not supported: <label>`` for any other label, as the
    API server does (nodes, for instance, do not select on ``spec.providerID``).
    """
    out: FieldSelector = []
    if not text or not text.strip():
        return out
    for part in _split_top_level(text):
        for op in ("!=", "==", "="):
            if op in part:
                label, value = part.split(op, 1)
                label = label.strip()
                if label not in allowed:
                    raise bad_request(
                        f'"{label}" is not a known field selector: only "{", ".join(sorted(allowed))}"'
                        f" (field label not supported: {label})"
                    )
                out.append((allowed[label], "!=" if op == "!=" else "=", value.strip()))
                break
        else:
            raise bad_request(f"invalid selector: {part!r}; can't understand {part!r}")
    return out


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return ""
        cur = cur[part]
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def fields_match(obj: Mapping[str, Any], selector: FieldSelector) -> bool:
    """True when ``obj`` satisfies every (path, op, value) of a parsed field selector."""
    for path, op, value in selector:
        actual = _field_value(obj, path)
        if (actual == value) != (op == "="):
            return False
    return True


def match_label_selector(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Evaluate a ``metav1.LabelSelector`` object (``matchLabels`` + ``matchExpressions``).

    ``None`` selects nothing and ``{}`` selects everything (policy/v1 PodDisruptionBudget rules).
    An unknown operator selects nothing.
    """
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key = expr.get("key", "")
        op = expr.get("operator", "")
        values = expr.get("values") or []
        present = key in labels
        if op == "In":
            ok = present and labels[key] in values
        elif op == "NotIn":
            ok = not present or labels[key] not in values
        elif op == "Exists":
            ok = present
        elif op == "DoesNotExist":
            ok = not present
        else:
            ok = False
        if not ok:
            return False
    return True
