"""Load Kubernetes/Karpenter manifests (multi-document YAML) into core types.

``load_manifests(paths)`` reads one or many files (a directory means its ``*.yaml``/``*.yml``
files, sorted) and returns a :class:`ManifestBundle`: NodePools, EC2NodeClasses, NodeClaims
(pydantic models with Karpenter's defaults), and Pods, DaemonSets, Nodes and PodDisruptionBudgets
(core dataclasses). Workloads are expanded into the pods their controllers would create:

* ``Deployment`` -> one ReplicaSet ``<name>-<hash>`` -> ``replicas`` pods ``<rs>-<suffix>``;
* ``ReplicaSet`` -> ``replicas`` pods ``<name>-<suffix>``;
* ``StatefulSet`` -> pods ``<name>-0`` .. ``<name>-<n-1>`` with claims ``<template>-<pod>``;
* ``Job`` -> ``min(parallelism, completions)`` pods ``<name>-<suffix>`` (0 when suspended).

Names and uids are deterministic (hashes of namespace, name and index), so two loads agree; a
Pod document without ``metadata.uid`` gets one the same way.
Expanded pods, and Pod documents written without a ``status``, are pending and marked
unschedulable (``PodScheduled=False, reason=Unschedulable``) unless they set ``spec.nodeName``.
``List`` documents (``kubectl get -o yaml``) are unpacked. Unknown kinds are recorded in
``ManifestBundle.ignored``.

Errors: any invalid document rejects its whole file with :class:`~nodesmith.core.errors.ManifestError`
whose message names the file, the 1-based document number, the kind/name when known, the field path
(``spec.template.spec.requirements[0].operator``) and the reason.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import BaseModel, ValidationError

from nodesmith.core.api.common import format_loc
from nodesmith.core.api.ec2nodeclass import EC2NodeClass
from nodesmith.core.api.nodeclaim import NodeClaim
from nodesmith.core.api.nodepool import NodePool
from nodesmith.core.errors import ManifestError
from nodesmith.core.objects import (
    ObjectParseError,
    daemonset_from_dict,
    node_from_dict,
    pdb_from_dict,
    pod_from_dict,
)

if TYPE_CHECKING:
    from nodesmith.core.model import DaemonSet, Node, Pod, PodDisruptionBudget

__all__ = [
    "IgnoredDocument",
    "ManifestBundle",
    "load_manifest_file",
    "load_manifest_text",
    "load_manifests",
]

_UID_NAMESPACE = uuid.UUID("6f1d7a52-3c1e-5b7a-9d0e-6e6f6465736d")  # fixed: "nodesmith" manifests
_SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # Kubernetes rand.SafeEncodeString alphabet


@dataclass(frozen=True, slots=True)
class IgnoredDocument:
    """A document of a kind Nodesmith does not use (ConfigMap, Service, ...), with where it was."""

    kind: str
    name: str
    path: str
    document: int


@dataclass(slots=True)
class ManifestBundle:
    """Everything read from a set of manifests, grouped by kind (in file and document order)."""

    nodepools: list[NodePool] = field(default_factory=list)
    ec2nodeclasses: list[EC2NodeClass] = field(default_factory=list)
    nodeclaims: list[NodeClaim] = field(default_factory=list)
    pods: list[Pod] = field(default_factory=list)
    daemonsets: list[DaemonSet] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    pdbs: list[PodDisruptionBudget] = field(default_factory=list)
    ignored: list[IgnoredDocument] = field(default_factory=list)

    @property
    def ignored_kinds(self) -> list[str]:
        """Sorted distinct kinds that were ignored."""
        return sorted({d.kind for d in self.ignored})

    def extend(self, other: ManifestBundle) -> None:
        """Append everything from ``other`` (in place)."""
        self.nodepools.extend(other.nodepools)
        self.ec2nodeclasses.extend(other.ec2nodeclasses)
        self.nodeclaims.extend(other.nodeclaims)
        self.pods.extend(other.pods)
        self.daemonsets.extend(other.daemonsets)
        self.nodes.extend(other.nodes)
        self.pdbs.extend(other.pdbs)
        self.ignored.extend(other.ignored)


class _DocumentError(Exception):
    """Internal: a document-level failure with field path and reason (context added by the caller)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(reason)
        self.field = field
        self.reason = reason


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


# --- kinds --------------------------------------------------------------------------------------


def _model(cls: type[BaseModel], doc: Mapping[str, Any]) -> Any:
    return cls.model_validate(dict(doc))


def _nodepool(bundle: ManifestBundle, doc: Mapping[str, Any]) -> None:
    bundle.nodepools.append(_model(NodePool, doc))


def _ec2nodeclass(bundle: ManifestBundle, doc: Mapping[str, Any]) -> None:
    bundle.ec2nodeclasses.append(_model(EC2NodeClass, doc))


def _nodeclaim(bundle: ManifestBundle, doc: Mapping[str, Any]) -> None:
    bundle.nodeclaims.append(_model(NodeClaim, doc))


def _pod(bundle: ManifestBundle, doc: Mapping[str, Any]) -> None:
    meta = doc.get("metadata")
    if isinstance(meta, Mapping) and not meta.get("uid") and isinstance(meta.get("name"), str):
        namespace = meta.get("namespace") or "default"
        uid = str(uuid.uuid5(_UID_NAMESPACE, f"Pod/{namespace}/{meta['name']}"))
        doc = {**doc, "metadata": {**meta, "uid": uid}}
    if doc.get("status") is None:
        spec = doc.get("spec")
        node_name = spec.get("nodeName") if isinstance(spec, Mapping) else None
        doc = {**doc, "status": _status(bound=bool(node_name))}
    bundle.pods.append(pod_from_dict(doc))


def _node(bundle: ManifestBundle, doc: Mapping[str, Any]) -> None:
    bundle.nodes.append(node_from_dict(doc))


def _daemonset(bundle: ManifestBundle, doc: Mapping[str, Any]) -> None:
    bundle.daemonsets.append(daemonset_from_dict(doc))


def _pdb(bundle: ManifestBundle, doc: Mapping[str, Any]) -> None:
    bundle.pdbs.append(pdb_from_dict(doc))


def _deployment(bundle: ManifestBundle, doc: Mapping[str, Any]) -> None:
    meta, spec, template = _workload(doc)
    name = meta["name"]
    rs_name = f"{name}-{_encode(_digest(json.dumps(template, sort_keys=True, default=str)), 10)}"
    replicas = _count(spec, "replicas", 1)
    names = [f"{rs_name}-{_encode(_digest(f'{rs_name}/{i}'), 5)}" for i in range(replicas)]
    extra_labels = {"pod-template-hash": rs_name.rsplit("-", 1)[1]}
    bundle.pods.extend(
        _expand_pods(
            owner_meta=meta,
            template=template,
            names=names,
            owner_kind="ReplicaSet",
            owner_name=rs_name,
            owner_api_version="apps/v1",
            extra_labels=extra_labels,
        )
    )


def _replicaset(bundle: ManifestBundle, doc: Mapping[str, Any]) -> None:
    meta, spec, template = _workload(doc)
    name = meta["name"]
    names = [f"{name}-{_encode(_digest(f'{name}/{i}'), 5)}" for i in range(_count(spec, "replicas", 1))]
    bundle.pods.extend(
        _expand_pods(
            owner_meta=meta,
            template=template,
            names=names,
            owner_kind="ReplicaSet",
            owner_name=name,
            owner_api_version="apps/v1",
            extra_labels={},
        )
    )


def _statefulset(bundle: ManifestBundle, doc: Mapping[str, Any]) -> None:
    meta, spec, template = _workload(doc)
    name = meta["name"]
    claims: list[str] = []
    for i, raw in enumerate(spec.get("volumeClaimTemplates") or []):
        claim_meta = raw.get("metadata") if isinstance(raw, Mapping) else None
        claim_name = claim_meta.get("name") if isinstance(claim_meta, Mapping) else None
        if not isinstance(claim_name, str) or not claim_name:
            raise _DocumentError(f"spec.volumeClaimTemplates[{i}].metadata.name", "is required")
        claims.append(claim_name)
    pods: list[Pod] = []
    for ordinal in range(_count(spec, "replicas", 1)):
        pod_name = f"{name}-{ordinal}"
        tspec = dict(template.get("spec") or {})
        volumes = [v for v in tspec.get("volumes") or [] if not (isinstance(v, Mapping) and v.get("name") in claims)]
        volumes += [{"name": c, "persistentVolumeClaim": {"claimName": f"{c}-{pod_name}"}} for c in claims]
        tspec["volumes"] = volumes
        labels = {"statefulset.kubernetes.io/pod-name": pod_name, "apps.kubernetes.io/pod-index": str(ordinal)}
        pods.extend(
            _expand_pods(
                owner_meta=meta,
                template={**template, "spec": tspec},
                names=[pod_name],
                owner_kind="StatefulSet",
                owner_name=name,
                owner_api_version="apps/v1",
                extra_labels=labels,
            )
        )
    bundle.pods.extend(pods)


def _job(bundle: ManifestBundle, doc: Mapping[str, Any]) -> None:
    meta, spec, template = _workload(doc)
    name = meta["name"]
    parallelism = _count(spec, "parallelism", 1)
    completions = spec.get("completions")
    count = parallelism if completions is None else min(parallelism, _count(spec, "completions", 1))
    if spec.get("suspend") is True:
        count = 0
    names = [f"{name}-{_encode(_digest(f'{name}/{i}'), 5)}" for i in range(count)]
    labels = {"job-name": name, "batch.kubernetes.io/job-name": name}
    bundle.pods.extend(
        _expand_pods(
            owner_meta=meta,
            template=template,
            names=names,
            owner_kind="Job",
            owner_name=name,
            owner_api_version="batch/v1",
            extra_labels=labels,
        )
    )


_HANDLERS = {
    "NodePool": _nodepool,
    "EC2NodeClass": _ec2nodeclass,
    "NodeClaim": _nodeclaim,
    "Pod": _pod,
    "Node": _node,
    "DaemonSet": _daemonset,
    "PodDisruptionBudget": _pdb,
    "Deployment": _deployment,
    "ReplicaSet": _replicaset,
    "StatefulSet": _statefulset,
    "Job": _job,
}


# --- workload expansion -------------------------------------------------------------------------


def _workload(doc: Mapping[str, Any]) -> tuple[dict[str, Any], Mapping[str, Any], Mapping[str, Any]]:
    meta = doc.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise _DocumentError("metadata.name", "is required")
    spec = doc.get("spec")
    if not isinstance(spec, Mapping):
        raise _DocumentError("spec", "is required")
    template = spec.get("template")
    if not isinstance(template, Mapping):
        raise _DocumentError("spec.template", "is required")
    if not isinstance(template.get("spec"), Mapping):
        raise _DocumentError("spec.template.spec", "is required")
    out_meta = dict(meta)
    out_meta.setdefault("namespace", "default")
    return out_meta, spec, template


def _count(spec: Mapping[str, Any], key: str, default: int) -> int:
    value = spec.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _DocumentError(f"spec.{key}", f"must be a non-negative integer, got {value!r}")
    return value


def _status(*, bound: bool) -> dict[str, Any]:
    if bound:
        return {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]}
    return {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
    }


def _expand_pods(
    *,
    owner_meta: Mapping[str, Any],
    template: Mapping[str, Any],
    names: Sequence[str],
    owner_kind: str,
    owner_name: str,
    owner_api_version: str,
    extra_labels: Mapping[str, str],
) -> list[Pod]:
    namespace = str(owner_meta.get("namespace") or "default")
    tmeta = template.get("metadata") or {}
    if not isinstance(tmeta, Mapping):
        raise _DocumentError("spec.template.metadata", "expected an object")
    tspec = template["spec"]
    owner_uid = str(uuid.uuid5(_UID_NAMESPACE, f"{owner_kind}/{namespace}/{owner_name}"))
    pods: list[Pod] = []
    template_labels = tmeta.get("labels") or {}
    if not isinstance(template_labels, Mapping):
        raise _DocumentError("spec.template.metadata.labels", "expected an object")
    for pod_name in names:
        labels = {**template_labels, **extra_labels}
        meta: dict[str, Any] = {
            **tmeta,
            "name": pod_name,
            "namespace": namespace,
            "uid": str(uuid.uuid5(_UID_NAMESPACE, f"Pod/{namespace}/{pod_name}")),
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": owner_api_version,
                    "kind": owner_kind,
                    "name": owner_name,
                    "uid": owner_uid,
                    "controller": True,
                }
            ],
        }
        if owner_meta.get("creationTimestamp") is not None:
            meta["creationTimestamp"] = owner_meta["creationTimestamp"]
        pod_doc = {"metadata": meta, "spec": tspec, "status": _status(bound=bool(tspec.get("nodeName")))}
        try:
            pods.append(pod_from_dict(pod_doc))
        except ObjectParseError as exc:
            raise _DocumentError(_template_path(exc.field), exc.reason) from exc
    return pods


def _template_path(field_path: str) -> str:
    """Map a pod field path to the workload's template path (``spec.x`` -> ``spec.template.spec.x``)."""
    for prefix in ("spec", "metadata"):
        if field_path == prefix or field_path.startswith(prefix + ".") or field_path.startswith(prefix + "["):
            return f"spec.template.{field_path}"
    return field_path


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def _encode(digest: bytes, length: int) -> str:
    """Deterministic suffix in Kubernetes' safe alphabet (no vowels, no 0/1/3)."""
    number = int.from_bytes(digest, "big")
    out = []
    for _ in range(length):
        number, rem = divmod(number, len(_SAFE_ALPHABET))
        out.append(_SAFE_ALPHABET[rem])
    return "".join(out)
