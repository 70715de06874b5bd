"""One handler per kind Nodesmith reads: Karpenter CRDs become pydantic models (with their
defaults), Pods, Nodes, DaemonSets and PodDisruptionBudgets become core dataclasses, and workloads
are expanded into pods (:mod:`.workloads`). :data:`_HANDLERS` maps ``kind`` to its handler."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from nodesmith.adapters.manifests.bundle import _DocumentError
from nodesmith.adapters.manifests.workloads import (
    _UID_NAMESPACE,
    _deployment,
    _job,
    _replicaset,
    _statefulset,
    _status,
)
from nodesmith.core.api.ec2nodeclass import EC2NodeClass
from nodesmith.core.api.nodeclaim import NodeClaim
from nodesmith.core.api.nodeoverlay import NodeOverlay
from nodesmith.core.api.nodepool import NodePool
from nodesmith.core.objects import daemonset_from_dict, node_from_dict, pdb_from_dict, pod_from_dict
from nodesmith.core.objects.volumes import (
    persistent_volume_from_dict,
    storage_class_from_dict,
    volume_claim_from_dict,
)

if TYPE_CHECKING:
    from pydantic import BaseModel

    from nodesmith.adapters.manifests.bundle import ManifestBundle


def _model(cls: type[BaseModel], doc: Mapping[str, Any]) -> Any:
    return cls.model_validate(dict(doc))


def _nodepool(bundle: ManifestBundle, doc: Mapping[str, Any]) -> None:
    bundle.nodepools.append(_model(NodePool, doc))


def _ec2nodeclass(bundle: ManifestBundle, doc: Mapping[str, Any]) -> None:
    bundle.ec2nodeclasses.append(_model(EC2NodeClass, doc))


def _nodeclaim(bundle: ManifestBundle, doc: Mapping[str, Any]) -> None:
    bundle.nodeclaims.append(_model(NodeClaim, doc))


def _nodeoverlay(bundle: ManifestBundle, doc: Mapping[str, Any]) -> None:
    overlay: NodeOverlay = _model(NodeOverlay, doc)
    errors = overlay.runtime_errors()
    if errors:  # a manifest Karpenter would mark RuntimeValidation=False is refused whole here
        raise _DocumentError(*errors[0])
    bundle.nodeoverlays.append(overlay)


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


def _volume_claim(bundle: ManifestBundle, doc: Mapping[str, Any]) -> None:
    bundle.volume_claims.append(volume_claim_from_dict(doc))


def _persistent_volume(bundle: ManifestBundle, doc: Mapping[str, Any]) -> None:
    bundle.persistent_volumes.append(persistent_volume_from_dict(doc))


def _storage_class(bundle: ManifestBundle, doc: Mapping[str, Any]) -> None:
    bundle.storage_classes.append(storage_class_from_dict(doc))


_HANDLERS = {
    "NodePool": _nodepool,
    "EC2NodeClass": _ec2nodeclass,
    "NodeClaim": _nodeclaim,
    "NodeOverlay": _nodeoverlay,
    "Pod": _pod,
    "Node": _node,
    "DaemonSet": _daemonset,
    "PodDisruptionBudget": _pdb,
    "PersistentVolumeClaim": _volume_claim,
    "PersistentVolume": _persistent_volume,
    "StorageClass": _storage_class,
    "Deployment": _deployment,
    "ReplicaSet": _replicaset,
    "StatefulSet": _statefulset,
    "Job": _job,
}
