"""Reading an EC2NodeClass spec as Karpenter JSON: the spec of a model or manifest
(:func:`nodeclass_json`), case-tolerant field access (:func:`field_value`), and the block device
mappings with the root volume size they imply (AL2023 default: 20 GiB gp3 on ``/dev/xvda``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodesmith.core.resources import QuantityError, parse_quantity

__all__ = [
    "GIB",
    "block_device_mappings",
    "error_code",
    "field_value",
    "nodeclass_json",
    "root_volume_bytes",
    "tag_filters",
]

GIB = 2**30
_DEFAULT_ROOT_VOLUME = {
    "deviceName": "/dev/xvda",
    "rootVolume": True,
    "ebs": {"volumeSize": "20Gi", "volumeType": "gp3", "encrypted": True},
}


def nodeclass_json(nodeclass: Any) -> tuple[str, dict[str, Any]]:
    """``(name, spec as Karpenter JSON)`` of an EC2NodeClass model, or of a manifest dict.

    Accepts the pydantic ``nodesmith.core.api.ec2nodeclass.EC2NodeClass`` (dumped by alias) or a
    ``{"metadata": {"name"}, "spec": {...}}`` dict.
    """
    if isinstance(nodeclass, Mapping):
        return str((nodeclass.get("metadata") or {}).get("name", "")), dict(nodeclass.get("spec") or {})
    name = str(getattr(getattr(nodeclass, "metadata", None), "name", "") or "")
    spec: Any = getattr(nodeclass, "spec", None)
    if hasattr(spec, "model_dump"):
        return name, dict(spec.model_dump(by_alias=True, exclude_none=True, mode="json"))
    return name, dict(spec or {})


def field_value(obj: Mapping[str, Any], key: str, default: Any = None) -> Any:
    """``obj[key]`` with a case-insensitive fallback (``httpProtocolIPv6`` vs ``httpProtocolIpv6``)."""
    if key in obj:
        return obj[key]
    lowered = key.lower()
    for k, v in obj.items():
        if k.lower() == lowered:
            return v
    return default


def root_volume_bytes(spec: Mapping[str, Any]) -> int:
    """Root EBS volume size in bytes: the ``rootVolume`` mapping, else ``/dev/xvda``, else 20 GiB (AL2023).

    Raises ``QuantityError`` naming ``blockDeviceMappings[i].ebs.volumeSize`` when it is invalid.
    """
    mappings = list(field_value(spec, "blockDeviceMappings") or [])
    chosen = next((m for m in mappings if field_value(m, "rootVolume")), None)
    if chosen is None:
        chosen = next((m for m in mappings if field_value(m, "deviceName") == "/dev/xvda"), None)
    size = field_value(field_value(chosen, "ebs") or {}, "volumeSize") if chosen else None
    if size is None:
        return 20 * GIB
    try:
        return parse_quantity(size, resource="ephemeral-storage")
    except QuantityError as exc:
        index = mappings.index(chosen)
        raise QuantityError(f"blockDeviceMappings[{index}].ebs.volumeSize: {exc}") from exc


def block_device_mappings(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The node class's block device mappings (Karpenter JSON), or the AL2023 default root volume."""
    mappings = list(field_value(spec, "blockDeviceMappings") or [])
    return mappings or [_DEFAULT_ROOT_VOLUME]


def tag_filters(tags: Mapping[str, str]) -> list[dict[str, Any]]:
    """EC2 Describe* filters for a selector term's ``tags``: ``tag:<key>`` = value, or ``tag-key`` for ``"*"``
    (any value), sorted by key."""
    return [
        {"Name": "tag-key", "Values": [k]} if v == "*" else {"Name": f"tag:{k}", "Values": [v]}
        for k, v in sorted(tags.items())
    ]


def error_code(exc: Exception) -> str:
    """The AWS error code of a botocore ``ClientError`` (``InvalidAMIID.NotFound``), ``""`` for other errors."""
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
