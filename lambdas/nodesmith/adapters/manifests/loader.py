"""Reading manifest files: the public ``load_*`` entry points, multi-document YAML and ``List``
unpacking, dispatch of each document to its kind handler, and turning failures into
:class:`~nodesmith.core.errors.ManifestError` (file, document number, kind/name, field path, reason).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import ValidationError

from nodesmith.adapters.manifests.bundle import IgnoredDocument, ManifestBundle, _DocumentError
from nodesmith.adapters.manifests.kinds import _HANDLERS
from nodesmith.core.api.common import format_loc
from nodesmith.core.errors import ManifestError
from nodesmith.core.objects import ObjectParseError

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

__all__ = [
    "load_manifest_file",
    "load_manifest_text",
    "load_manifests",
]


# --- public entry points ------------------------------------------------------------------------


def load_manifests(paths: Sequence[str | Path]) -> ManifestBundle:
    """Load every file in ``paths`` (directories: their ``*.yaml``/``*.yml`` files, sorted).

    Raises :class:`ManifestError` for an unreadable or invalid file, or for two objects of the same
    kind, namespace and name.
    """
    bundle = ManifestBundle()
    for path in _expand(paths):
        bundle.extend(load_manifest_file(path))
    _check_duplicates(bundle)
    return bundle


def load_manifest_file(path: str | Path) -> ManifestBundle:
    """Load one multi-document YAML file. Raises :class:`ManifestError` naming the file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ManifestError(f"{p}: cannot read: {exc.strerror or exc}", path=str(p)) from exc
    return load_manifest_text(text, source=str(p))


def load_manifest_text(text: str, *, source: str = "<string>") -> ManifestBundle:
    """Load multi-document YAML ``text``; ``source`` names it in errors. Raises :class:`ManifestError`."""
    bundle = ManifestBundle()
    for number, doc in _documents(text, source):
        if doc is None:
            continue
        if not isinstance(doc, Mapping):
            raise ManifestError(
                f"{source}: document {number}: expected an object with apiVersion and kind, got {type(doc).__name__}",
                path=source,
                document=number,
            )
        for item in _unpack_lists(doc, source, number):
            _add(bundle, item, source, number)
    return bundle


# --- reading ------------------------------------------------------------------------------------


def _expand(paths: Sequence[str | Path]) -> Iterator[Path]:
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            yield from sorted(f for f in p.iterdir() if f.suffix in (".yaml", ".yml") and f.is_file())
        else:
            yield p


def _documents(text: str, source: str) -> Iterator[tuple[int, Any]]:
    number = 0
    loader = yaml.safe_load_all(text)
    while True:
        number += 1
        try:
            doc = next(loader)
        except StopIteration:
            return
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
            problem = getattr(exc, "problem", None) or str(exc)
            raise ManifestError(
                f"{source}: document {number}: invalid YAML{where}: {problem}", path=source, document=number
            ) from exc
        yield number, doc


def _unpack_lists(doc: Mapping[str, Any], source: str, number: int) -> Iterator[Mapping[str, Any]]:
    kind = doc.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list):
        for i, item in enumerate(doc["items"]):
            if not isinstance(item, Mapping):
                raise ManifestError(
                    f"{source}: document {number} ({kind}): items[{i}]: expected an object",
                    path=source,
                    document=number,
                    field=f"items[{i}]",
                )
            yield item
    else:
        yield doc


def _add(bundle: ManifestBundle, doc: Mapping[str, Any], source: str, number: int) -> None:
    kind = doc.get("kind")
    api_version = doc.get("apiVersion")
    meta = doc.get("metadata")
    raw_name = meta.get("name") if isinstance(meta, Mapping) else None
    name = raw_name if isinstance(raw_name, str) else ""
    label = f"{kind} {name}".strip() if isinstance(kind, str) and kind else ""

    def fail(field_path: str, reason: str) -> ManifestError:
        where = f" ({label})" if label else ""
        at = f"{field_path}: " if field_path else ""
        return ManifestError(
            f"{source}: document {number}{where}: {at}{reason}", path=source, document=number, field=field_path
        )

    if not isinstance(api_version, str) or not api_version:
        raise fail("apiVersion", "is required")
    if not isinstance(kind, str) or not kind:
        raise fail("kind", "is required")
    handler = _HANDLERS.get(kind)
    if handler is None:
        bundle.ignored.append(IgnoredDocument(kind=kind, name=name, path=source, document=number))
        return
    try:
        handler(bundle, doc)
    except ValidationError as exc:
        field_path, reason = _first_error(exc)
        raise fail(field_path, reason) from exc
    except ObjectParseError as exc:
        raise fail(exc.field, exc.reason) from exc
    except _DocumentError as exc:
        raise fail(exc.field, exc.reason) from exc


def _first_error(exc: ValidationError) -> tuple[str, str]:
    """The most telling error: an unknown field first (it usually explains a "missing" one)."""
    errors = exc.errors(include_url=False)
    errors.sort(key=lambda e: e.get("type") != "extra_forbidden")
    first = errors[0]
    loc = tuple(first.get("loc", ()))
    reason = str(first.get("msg", "invalid"))
    for prefix in ("Value error, ", "Assertion failed, "):
        reason = reason.removeprefix(prefix)
    if first.get("type") == "extra_forbidden":
        reason = "unknown field (not in the CRD schema)"
        missing = [str(e["loc"][-1]) for e in errors if e.get("type") == "missing" and tuple(e["loc"][:-1]) == loc[:-1]]
        close = difflib.get_close_matches(str(loc[-1]), missing, n=1) if loc else []
        if close:
            reason += f"; did you mean {close[0]!r}?"
            errors = [e for e in errors if tuple(e["loc"]) != (*loc[:-1], close[0])]
    if len(errors) > 1:
        reason += f" (and {len(errors) - 1} more error{'s' if len(errors) > 2 else ''})"
    return format_loc(loc), reason


def _check_duplicates(bundle: ManifestBundle) -> None:
    groups: list[tuple[str, list[tuple[str, str]]]] = [
        ("NodePool", [("", m.metadata.name) for m in bundle.nodepools]),
        ("EC2NodeClass", [("", m.metadata.name) for m in bundle.ec2nodeclasses]),
        ("NodeClaim", [("", m.metadata.name) for m in bundle.nodeclaims]),
        ("NodeOverlay", [("", m.metadata.name) for m in bundle.nodeoverlays]),
        ("Pod", [(p.namespace, p.name) for p in bundle.pods]),
        ("Node", [("", n.name) for n in bundle.nodes]),
        ("DaemonSet", [(d.namespace, d.name) for d in bundle.daemonsets]),
        ("PodDisruptionBudget", [(p.namespace, p.name) for p in bundle.pdbs]),
    ]
    for kind, keys in groups:
        seen: set[tuple[str, str]] = set()
        for key in keys:
            if key in seen:
                shown = "/".join(k for k in key if k)
                raise ManifestError(f"duplicate {kind} {shown}: each object may appear only once")
            seen.add(key)
