"""Expanding workloads into the pods their controllers would create (Deployment -> ReplicaSet ->
pods, ReplicaSet, StatefulSet with per-pod claims, Job), with deterministic names and uids, and the
status a pod written without one gets (pending and unschedulable unless bound to a node)."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from nodesmith.adapters.manifests.bundle import _DocumentError
from nodesmith.core.objects import ObjectParseError, pod_from_dict

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nodesmith.adapters.manifests.bundle import ManifestBundle
    from nodesmith.core.model import Pod

_UID_NAMESPACE = uuid.UUID("6f1d7a52-3c1e-5b7a-9d0e-6e6f6465736d")  # fixed: "nodesmith" manifests
_SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # Kubernetes rand.SafeEncodeString alphabet


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
