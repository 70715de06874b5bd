"""v1alpha1 selector maps (``subnetSelector``, ``securityGroupSelector``, ``amiSelector``) -> v1 selector terms.

Rules, from the v1beta1 migration guide ("SubnetSelector, SecurityGroupSelector, and AMISelector")
and how Karpenter v0.31 itself read the maps (``[aws]:pkg/utils/nodeclass/nodeclass.go@v0.31.4``,
``pkg/providers/{subnet,amifamily}/*.go``, ``pkg/apis/v1alpha1/*_validation.go``):

* ``aws-ids`` / ``aws::ids: "a,b"`` -> one ``{id}`` term per id. v0.31 refused other keys next to it,
  and ignored tags on id terms, so any other key is dropped with a note.
* ``aws::name`` and ``aws::owners`` (AMIs) -> one ``{name, owner}`` term per (name, owner) pair,
  each also carrying the tag keys; an owner without a name or tags has no v1 form.
* Any other key is a tag. v0.31 matched a comma-separated tag value as any of its values; v1 matches
  tag values exactly, so such a value becomes one term per value (all combinations). ``"*"`` still
  means "any value".
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, Final, Literal

from nodesmith.core.convert.fields import child_path

if TYPE_CHECKING:
    from collections.abc import Mapping

    from nodesmith.core.convert.notes import NoteSink

__all__ = ["SelectorKind", "legacy_selector_terms"]

_ID_KEYS: Final = ("aws-ids", "aws::ids")
_AMI_NAME: Final = "aws::name"
_AMI_OWNERS: Final = "aws::owners"

SelectorKind = Literal["subnet", "securityGroup", "ami"]


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def legacy_selector_terms(
    selector: Mapping[str, Any], *, kind: SelectorKind, path: str, notes: NoteSink
) -> list[dict[str, Any]]:
    """The v1 selector terms equivalent to a v1alpha1 selector map (see the module rules).

    ``path`` is the selector's input path, for notes and errors. Raises
    :class:`~.notes.ConversionError` for an empty key or value, or an AMI owner with nothing to match.
    """
    values: dict[str, str] = {}
    for key, value in selector.items():
        text = "" if value is None else str(value).strip()
        if not str(key) or not text:
            raise notes.error(child_path(path, str(key)), "empty selector keys and values are not allowed")
        values[str(key)] = text

    id_key = next((k for k in _ID_KEYS if k in values), None)
    if id_key is not None:
        for other in values:
            if other != id_key:
                notes.dropped(child_path(path, other), f"ignored next to {id_key} (ids select on their own)")
        return [{"id": i} for i in _split(values[id_key])]

    if kind != "ami":
        return [{"tags": tags} for tags in _tag_combinations(values, path=path, notes=notes)]
    return _ami_terms(values, path=path, notes=notes)


def _ami_terms(values: dict[str, str], *, path: str, notes: NoteSink) -> list[dict[str, Any]]:
    """AMI terms: every (owner, name, tag combination), each part optional."""
    names: list[str | None] = list(_split(values.pop(_AMI_NAME, "")))
    owners: list[str | None] = list(_split(values.pop(_AMI_OWNERS, "")))
    if not names and not values:
        if owners:
            raise notes.error(
                child_path(path, _AMI_OWNERS),
                "an owner alone selects every AMI of that owner, which v1 cannot express; add aws::name or tags",
            )
        return []
    if len(names) * max(len(owners), 1) > 1:
        notes.changed(path, f"{_AMI_NAME}/{_AMI_OWNERS} lists became one amiSelectorTerm per (name, owner) pair")
    tag_terms: list[dict[str, str]] = _tag_combinations(values, path=path, notes=notes) or [{}]
    terms: list[dict[str, Any]] = []
    for owner, name, tags in itertools.product(owners or [None], names or [None], tag_terms):
        term: dict[str, Any] = {}
        if tags:
            term["tags"] = tags
        if name is not None:
            term["name"] = name
        if owner is not None:
            term["owner"] = owner
        terms.append(term)
    return terms


def _tag_combinations(tags: Mapping[str, str], *, path: str, notes: NoteSink) -> list[dict[str, str]]:
    """One tag map per combination of comma-separated values (v0.31 OR-ed them; v1 matches exactly)."""
    if not tags:
        return []
    options: list[list[str]] = []
    for key, value in tags.items():
        parts = [value] if value == "*" else _split(value)
        if len(parts) > 1:
            notes.changed(
                child_path(path, key),
                f"comma-separated value {value!r} matched any of its values; v1 matches tag values exactly, "
                f"so it became {len(parts)} terms",
            )
        options.append(parts)
    keys = list(tags)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*options)]
