"""Renamed annotations and labels on any object: ``do-not-evict`` / ``do-not-consolidate`` ->
``do-not-disrupt``, ``karpenter.sh/provisioner-name`` -> ``karpenter.sh/nodepool`` in pod scheduling
constraints, and the server-written metadata a manifest should not carry.

Rules (Karpenter's upgrade guides ``[aws]:website/content/en/v1.0/upgrading/v1beta1-migration.md``
"Annotations, Labels, and Status Conditions" and ``v1-migration.md`` "Deprecated annotations ...
are removed for v1.0.0"):

* ``karpenter.sh/do-not-evict`` (pods) and ``karpenter.sh/do-not-consolidate`` (nodes) were replaced
  by ``karpenter.sh/do-not-disrupt`` in v1beta1 and are ignored by v1. v1alpha5 honoured them only
  with the value ``"true"``, so other values are dropped rather than renamed.
* The owner label ``karpenter.sh/provisioner-name`` became ``karpenter.sh/nodepool``. A NodePool
  converted from a Provisioner keeps its name, so renaming the key in a pod's ``nodeSelector`` or
  node affinity keeps the pod on the same pool; Karpenter v1 nodes never carry the old key.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from nodesmith.core.convert.fields import child_path

if TYPE_CHECKING:
    from nodesmith.core.convert.notes import NoteSink

__all__ = [
    "DO_NOT_DISRUPT",
    "OLD_OPT_OUT_ANNOTATIONS",
    "PROVISIONER_NAME_LABEL",
    "clean_metadata",
    "rewrite_annotations",
    "rewrite_object",
]

DO_NOT_DISRUPT: Final = "karpenter.sh/do-not-disrupt"
OLD_OPT_OUT_ANNOTATIONS: Final = ("karpenter.sh/do-not-evict", "karpenter.sh/do-not-consolidate")
PROVISIONER_NAME_LABEL: Final = "karpenter.sh/provisioner-name"
NODEPOOL_LABEL: Final = "karpenter.sh/nodepool"

# Written by kubectl or Karpenter, never by users; a converted manifest must not carry them
# (a stale hash would be compared against the new object; the last-applied copy is the old API).
_BOOKKEEPING_ANNOTATION_PREFIXES: Final = (
    "kubectl.kubernetes.io/last-applied-configuration",
    "karpenter.sh/provisioner-hash",
    "karpenter.sh/nodepool-hash",
    "karpenter.k8s.aws/nodetemplate-hash",
    "karpenter.k8s.aws/ec2nodeclass-hash",
    "compatibility.karpenter.sh/",
    "compatibility.karpenter.k8s.aws/",
)
_SERVER_METADATA: Final = (
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "managedFields",
    "selfLink",
    "finalizers",
    "ownerReferences",
    "namespace",
)


def clean_metadata(metadata: Any, notes: NoteSink, *, path: str = "metadata") -> dict[str, Any]:
    """A cluster-scoped Karpenter object's metadata for a manifest: ``name``, ``labels``,
    ``annotations`` (bookkeeping annotations removed, old opt-out annotations renamed) and
    ``generateName``; server-written fields are dropped silently, anything else is noted.

    Raises :class:`~.notes.ConversionError` when ``metadata.name`` is missing.
    """
    if not isinstance(metadata, Mapping):
        raise notes.error(path, "expected an object with a name")
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise notes.error(child_path(path, "name"), "is required")
    out: dict[str, Any] = {"name": name}
    labels = metadata.get("labels") or {}
    if labels:
        out["labels"] = dict(labels)
    annotations = {
        k: v
        for k, v in (metadata.get("annotations") or {}).items()
        if not any(k.startswith(p) for p in _BOOKKEEPING_ANNOTATION_PREFIXES)
    }
    annotations = rewrite_annotations(annotations, notes, child_path(path, "annotations"))
    if annotations:
        out["annotations"] = annotations
    for key in metadata:
        if key in ("name", "labels", "annotations") or key in _SERVER_METADATA:
            continue
        notes.dropped(child_path(path, key), "not a field this conversion knows")
    return out


def rewrite_annotations(annotations: Mapping[str, Any], notes: NoteSink, path: str) -> dict[str, Any]:
    """``annotations`` with ``do-not-evict`` / ``do-not-consolidate`` renamed to ``do-not-disrupt``.

    Only the value ``"true"`` is carried over (the only value v1alpha5 acted on); an existing
    ``do-not-disrupt`` wins. Each change is noted against ``path``.
    """
    out = dict(annotations)
    for old in OLD_OPT_OUT_ANNOTATIONS:
        if old not in out:
            continue
        value = out.pop(old)
        where = child_path(path, old)
        if str(value).lower() != "true":
            notes.dropped(where, f'value {value!r} had no effect (only "true" did); {DO_NOT_DISRUPT} not set')
        elif DO_NOT_DISRUPT in out:
            notes.changed(where, f"removed; {DO_NOT_DISRUPT} is already set (Karpenter v1 ignores {old})")
        else:
            out[DO_NOT_DISRUPT] = "true"
            notes.changed(where, f'renamed to {DO_NOT_DISRUPT}: "true" (Karpenter v1 ignores {old})')
    return out


def rewrite_object(doc: Mapping[str, Any], notes: NoteSink) -> dict[str, Any]:
    """A copy of a non-Karpenter object (Pod, Node, Deployment, StatefulSet, DaemonSet, Job, CronJob,
    ...) with the opt-out annotations renamed on the object and its pod template, and
    ``karpenter.sh/provisioner-name`` renamed in the pod template's node selector and node affinity.
    Everything else is unchanged."""
    out = copy.deepcopy(dict(doc))
    _rewrite_meta(out, "metadata", notes)
    for pod_path in _pod_template_paths(out):
        holder = _get(out, pod_path)
        if isinstance(holder, dict):
            _rewrite_meta(holder, "metadata", notes, prefix=".".join(pod_path))
            spec = holder.get("spec")
            if isinstance(spec, dict):
                _rename_owner_label(spec, notes, ".".join((*pod_path, "spec")))
    if out.get("kind") == "Pod" and isinstance(out.get("spec"), dict):
        _rename_owner_label(out["spec"], notes, "spec")
    return out


def _pod_template_paths(doc: Mapping[str, Any]) -> list[tuple[str, ...]]:
    paths: list[tuple[str, ...]] = [("spec", "template")]
    if doc.get("kind") == "CronJob":
        paths.append(("spec", "jobTemplate", "spec", "template"))
    return paths


def _get(doc: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = doc
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def _rewrite_meta(holder: dict[str, Any], key: str, notes: NoteSink, *, prefix: str = "") -> None:
    meta = holder.get(key)
    if not isinstance(meta, dict) or not isinstance(meta.get("annotations"), Mapping):
        return
    path = child_path(child_path(prefix, key) if prefix else key, "annotations")
    meta["annotations"] = rewrite_annotations(meta["annotations"], notes, path)


def _rename_owner_label(spec: dict[str, Any], notes: NoteSink, path: str) -> None:
    """Rename ``karpenter.sh/provisioner-name`` in ``nodeSelector`` and node affinity match expressions."""
    message = f"label key renamed to {NODEPOOL_LABEL} (the NodePool keeps the Provisioner's name)"
    selector = spec.get("nodeSelector")
    if isinstance(selector, dict) and PROVISIONER_NAME_LABEL in selector:
        if NODEPOOL_LABEL in selector:
            selector.pop(PROVISIONER_NAME_LABEL)
            notes.changed(child_path(child_path(path, "nodeSelector"), PROVISIONER_NAME_LABEL), "removed; already set")
        else:
            spec["nodeSelector"] = {
                (NODEPOOL_LABEL if k == PROVISIONER_NAME_LABEL else k): v for k, v in selector.items()
            }
            notes.changed(child_path(child_path(path, "nodeSelector"), PROVISIONER_NAME_LABEL), message)
    affinity = _get(spec, ("affinity", "nodeAffinity"))
    if not isinstance(affinity, dict):
        return
    base = f"{path}.affinity.nodeAffinity"
    required = _get(affinity, ("requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms"))
    for i, term in enumerate(required if isinstance(required, list) else []):
        where = f"{base}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]"
        _rename_in_term(term, notes, where, message)
    preferred = affinity.get("preferredDuringSchedulingIgnoredDuringExecution")
    for i, weighted in enumerate(preferred if isinstance(preferred, list) else []):
        if isinstance(weighted, dict):
            where = f"{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}].preference"
            _rename_in_term(weighted.get("preference"), notes, where, message)


def _rename_in_term(term: Any, notes: NoteSink, path: str, message: str) -> None:
    if not isinstance(term, dict):
        return
    expressions = term.get("matchExpressions")
    for j, expr in enumerate(expressions if isinstance(expressions, list) else []):
        if isinstance(expr, dict) and expr.get("key") == PROVISIONER_NAME_LABEL:
            expr["key"] = NODEPOOL_LABEL
            notes.changed(f"{path}.matchExpressions[{j}].key", message)
