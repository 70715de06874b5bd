"""Reading an EC2NodeClass spec as Karpenter JSON: the spec of a model or manifest
(:func:`nodeclass_json`), case-tolerant field access (:func:`field_value`), the effective AMI family
(:func:`ami_family`), and the block device mappings with the ephemeral storage size they imply (Karpenter's defaults
per AMI family: AL2023 20 GiB gp3 on ``/dev/xvda``; Bottlerocket 4 GiB on ``/dev/xvda`` for the OS and 20 GiB on
``/dev/xvdb`` for the data volume).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodesmith.core.api.ec2nodeclass import AMI_FAMILIES, default_block_device_mappings
from nodesmith.core.resources import QuantityError, parse_quantity

__all__ = [
    "GIB",
    "ami_family",
    "block_device_mappings",
    "error_code",
    "field_value",
    "nodeclass_json",
    "root_volume_bytes",
    "tag_filters",
]

GIB = 2**30
_DEFAULT_EPHEMERAL_BYTES = 20 * GIB
"""Karpenter's ``DefaultEBS`` volume size, the ephemeral storage when nothing else says."""
_EPHEMERAL_DEVICE = {"AL2": "/dev/xvda", "AL2023": "/dev/xvda", "Bottlerocket": "/dev/xvdb"}
"""The device whose volume holds the kubelet's ephemeral storage, by AMI family (Karpenter
``EphemeralBlockDevice``; Windows and Custom have none)."""


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


def ami_family(spec: Mapping[str, Any]) -> str:
    """The EC2NodeClass's effective AMI family: ``amiFamily``, else the family its ``alias`` term names
    (``bottlerocket@latest`` -> ``Bottlerocket``), else ``"Custom"`` (Karpenter ``AMIFamily()``)."""
    if family := field_value(spec, "amiFamily"):
        return str(family)
    for term in field_value(spec, "amiSelectorTerms") or []:
        if alias := field_value(term, "alias"):
            return AMI_FAMILIES.get(str(alias).partition("@")[0].lower(), "Custom")
    return "Custom"


def root_volume_bytes(spec: Mapping[str, Any]) -> int:
    """The node's ephemeral storage in bytes, as Karpenter's ``ephemeralStorage`` reads the block device mappings.

    The ``rootVolume`` mapping's size; else, for a Custom AMI, the last mapping's; else the mapping of the family's
    ephemeral device (``/dev/xvda``, Bottlerocket ``/dev/xvdb``); else that device's size among the family's default
    mappings; else 20 GiB. Raises ``QuantityError`` naming ``blockDeviceMappings[i].ebs.volumeSize`` when the size
    read is invalid.
    """
    mappings = list(field_value(spec, "blockDeviceMappings") or [])
    family = ami_family(spec)
    device = _EPHEMERAL_DEVICE.get(family)
    chosen = next((m for m in mappings if field_value(m, "rootVolume") and _size(m) is not None), None)
    if chosen is None and mappings and family == "Custom":
        chosen = mappings[-1]
    if chosen is None and device is not None:
        chosen = next((m for m in mappings if field_value(m, "deviceName") == device and _size(m) is not None), None)
    if chosen is not None and (size := _size(chosen)) is not None:
        try:
            return parse_quantity(size, resource="ephemeral-storage")
        except QuantityError as exc:
            raise QuantityError(f"blockDeviceMappings[{mappings.index(chosen)}].ebs.volumeSize: {exc}") from exc
    for default in _family_defaults(family):
        if default.get("deviceName") == device and (size := _size(default)) is not None:
            return parse_quantity(size, resource="ephemeral-storage")
    return _DEFAULT_EPHEMERAL_BYTES


def _size(mapping: Mapping[str, Any]) -> Any:
    return field_value(field_value(mapping, "ebs") or {}, "volumeSize")


def _family_defaults(family: str) -> list[dict[str, Any]]:
    """Karpenter's default block device mappings of ``family`` as Karpenter JSON."""
    return [m.model_dump(by_alias=True, exclude_none=True, mode="json") for m in default_block_device_mappings(family)]


def block_device_mappings(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The node class's block device mappings (Karpenter JSON), or its AMI family's defaults (Karpenter
    ``DefaultBlockDeviceMappings``; none for a Custom AMI, which keeps the image's own)."""
    mappings: list[Mapping[str, Any]] = list(field_value(spec, "blockDeviceMappings") or [])
    return mappings or list(_family_defaults(ami_family(spec)))


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
