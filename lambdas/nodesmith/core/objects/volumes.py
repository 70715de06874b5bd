"""Parsers for the storage objects behind volume topology: PersistentVolumeClaim, PersistentVolume, StorageClass.

They return the dataclasses of :mod:`nodesmith.core.scheduling.volumes`; errors are
:class:`~nodesmith.core.objects.common.ObjectParseError` with the path of the offending field.
Only what volume topology needs is read (``volumetopology.go``): a claim's ``storageClassName``,
``volumeName``, controlling Pod owner, ``deletionTimestamp`` and ``Lost`` phase; a volume's
``nodeAffinity.required`` terms, ``deletionTimestamp`` and whether it is ``local``/``hostPath``; a
class's ``allowedTopologies`` and ``volumeBindingMode``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodesmith.core.objects.common import _item_map, _list, _map, _str, _str_tuple
from nodesmith.core.objects.pods import _controller_owner, _node_selector_term
from nodesmith.core.scheduling.volumes import PersistentVolume, StorageClass, VolumeClaim

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["persistent_volume_from_dict", "storage_class_from_dict", "volume_claim_from_dict"]


def volume_claim_from_dict(obj: Mapping[str, Any]) -> VolumeClaim:
    """A PersistentVolumeClaim (namespace defaults to ``default``); ``owner_pod`` is the name of its
    controlling Pod owner (generic ephemeral volumes), "" when another kind or nothing controls it."""
    meta = _map(obj, "metadata", "")
    spec = _map(obj, "spec", "")
    owner_kind, owner_name = _controller_owner(meta)
    return VolumeClaim(
        namespace=_str(meta, "namespace", "metadata") or "default",
        name=_str(meta, "name", "metadata"),
        storage_class=_str(spec, "storageClassName", "spec"),
        volume_name=_str(spec, "volumeName", "spec"),
        owner_pod=(owner_name or "") if owner_kind == "Pod" else "",
        deleting=meta.get("deletionTimestamp") is not None,
        lost=_str(_map(obj, "status", ""), "phase", "status") == "Lost",
    )


def persistent_volume_from_dict(obj: Mapping[str, Any]) -> PersistentVolume:
    """A PersistentVolume with its ``spec.nodeAffinity.required.nodeSelectorTerms``."""
    meta = _map(obj, "metadata", "")
    spec = _map(obj, "spec", "")
    required = _map(_map(spec, "nodeAffinity", "spec"), "required", "spec.nodeAffinity")
    path = "spec.nodeAffinity.required.nodeSelectorTerms"
    terms = tuple(
        _node_selector_term(raw, f"{path}[{i}]")
        for i, raw in enumerate(_list(required, "nodeSelectorTerms", "spec.nodeAffinity.required"))
    )
    return PersistentVolume(
        name=_str(meta, "name", "metadata"),
        node_affinity=terms,
        local=spec.get("local") is not None or spec.get("hostPath") is not None,
        deleting=meta.get("deletionTimestamp") is not None,
    )


def storage_class_from_dict(obj: Mapping[str, Any]) -> StorageClass:
    """A StorageClass (``allowedTopologies`` at the top level, as the API has it)."""
    meta = _map(obj, "metadata", "")
    terms = []
    for i, raw in enumerate(_list(obj, "allowedTopologies", "")):
        tpath = f"allowedTopologies[{i}]"
        term = _item_map(raw, tpath)
        exprs = []
        for j, expr_raw in enumerate(_list(term, "matchLabelExpressions", tpath)):
            epath = f"{tpath}.matchLabelExpressions[{j}]"
            expr = _item_map(expr_raw, epath)
            exprs.append((_str(expr, "key", epath), _str_tuple(expr, "values", epath)))
        terms.append(tuple(exprs))
    return StorageClass(
        name=_str(meta, "name", "metadata"),
        allowed_topologies=tuple(terms),
        binding_mode=_str(obj, "volumeBindingMode", "", "Immediate"),
    )
