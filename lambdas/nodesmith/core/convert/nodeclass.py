"""v1alpha1 ``AWSNodeTemplate`` (and a Provisioner's inline ``spec.provider``) and v1beta1
``EC2NodeClass`` -> ``karpenter.k8s.aws/v1`` ``EC2NodeClass`` spec.

Rules and where they come from:

* Field moves: v1beta1 migration guide, "AWSNodeTemplate -> EC2NodeClass" (``[aws]:website/content/en/
  v1.0/upgrading/v1beta1-migration.md``) and Karpenter's own v1alpha1 -> v1beta1 mapping
  (``[aws]:pkg/utils/nodeclass/nodeclass.go@v0.31.4``): selectors -> selector terms (see
  :mod:`.selectors`), ``instanceProfile`` kept, ``launchTemplate`` removed, ``virtualName`` of block
  devices gone, userData/tags/blockDeviceMappings/metadataOptions/detailedMonitoring/context kept.
* AMIs: v1 migration guide and the v1 conversion webhook (``[aws]:pkg/apis/v1/ec2nodeclass_conversion.go
  @v1.0.0`` ``ConvertFrom``): without AMI selector terms an AL2/AL2023/Bottlerocket/Windows family
  becomes the only term ``alias: <family>@latest`` (no ``amiFamily``); with terms, ``amiFamily`` is
  kept; ``Ubuntu`` becomes ``AL2`` with the user's terms and, when no block devices are given,
  Ubuntu's root volume ``/dev/sda1`` 20Gi gp3 encrypted. v0.31 defaulted a missing ``amiFamily`` to AL2.
* ``metadataOptions``: v0.31/v1beta1 defaulted ``httpPutResponseHopLimit`` to 2, v1 to 1 (v1
  migration guide "Defaults changed"); the old value is written out so pods that reach IMDS keep
  working, with a note.
* Tags Karpenter v1 refuses (``kubernetes.io/cluster/*``, ``eks:eks-cluster-name``,
  ``karpenter.sh/nodepool``, ``karpenter.sh/nodeclaim``, ``karpenter.k8s.aws/ec2nodeclass``) and the
  removed ``karpenter.sh/managed-by`` are dropped: Karpenter writes its own.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Final

from nodesmith.core.convert.fields import Fields, scalar_str
from nodesmith.core.convert.selectors import legacy_selector_terms

if TYPE_CHECKING:
    from nodesmith.core.convert.selectors import SelectorKind

__all__ = ["convert_legacy_template", "convert_v1beta1_nodeclass"]

_ALIAS_FAMILIES: Final = ("AL2", "AL2023", "Bottlerocket", "Windows2019", "Windows2022", "Windows2025")
_RESTRICTED_TAGS: Final = (
    "eks:eks-cluster-name",
    "karpenter.sh/nodepool",
    "karpenter.sh/nodeclaim",
    "karpenter.k8s.aws/ec2nodeclass",
    "karpenter.sh/managed-by",
)
_EBS_FIELDS: Final = (
    "deleteOnTermination",
    "encrypted",
    "iops",
    "kmsKeyID",
    "snapshotID",
    "throughput",
    "volumeSize",
    "volumeType",
)
_METADATA_DEFAULTS: Final = {
    "httpEndpoint": "enabled",
    "httpProtocolIPv6": "disabled",
    "httpPutResponseHopLimit": 2,
    "httpTokens": "required",
}
_UBUNTU_ROOT: Final = {
    "deviceName": "/dev/sda1",
    "rootVolume": True,
    "ebs": {"encrypted": True, "volumeType": "gp3", "volumeSize": "20Gi"},
}


def convert_legacy_template(spec: Fields, *, default_instance_profile: str | None) -> dict[str, Any]:
    """The v1 EC2NodeClass spec for a v1alpha1 AWSNodeTemplate spec or a v1alpha5 ``spec.provider``.

    ``default_instance_profile`` stands in for Karpenter v0.31's global ``aws.defaultInstanceProfile``
    when the template names none. Raises :class:`~.notes.ConversionError` when a required v1 field
    cannot be derived (no subnet/security group selector, no instance profile, Ubuntu or Custom
    without an AMI selector).
    """
    notes = spec.notes
    spec.ignore("apiVersion", "kind")  # TypeMeta of an inline provider (extensions.karpenter.sh/v1alpha1 AWS)
    out: dict[str, Any] = {}
    selectors: tuple[tuple[str, str, SelectorKind], ...] = (
        ("subnetSelector", "subnetSelectorTerms", "subnet"),
        ("securityGroupSelector", "securityGroupSelectorTerms", "securityGroup"),
    )
    for legacy, term_key, kind in selectors:
        selector = spec.take_map(legacy)
        if not selector:
            raise notes.error(spec.at(legacy), f"is required to build {term_key}")
        out[term_key] = legacy_selector_terms(selector, kind=kind, path=spec.at(legacy), notes=notes)

    ami_path = spec.at("amiSelector")
    ami_terms = legacy_selector_terms(spec.take_map("amiSelector"), kind="ami", path=ami_path, notes=notes)
    family = spec.take_str("amiFamily")
    if family is None:
        family = "AL2"
        notes.changed(spec.at("amiFamily"), "unset: Karpenter v0.31 defaulted it to AL2, now written out")
    out.update(_ami_fields(family, ami_terms, spec))

    profile = spec.take_str("instanceProfile")
    if profile is None:
        if default_instance_profile is None:
            raise notes.error(
                spec.at("instanceProfile"),
                "not set (Karpenter v0.31 used the global aws.defaultInstanceProfile setting); "
                "v1 needs instanceProfile or role on every EC2NodeClass: "
                "pass --default-instance-profile NAME or add it to the input",
            )
        profile = default_instance_profile
        notes.changed(spec.at("instanceProfile"), f"unset: used the default instance profile {profile!r} given")
    out["instanceProfile"] = profile

    launch_template = spec.take("launchTemplate")
    if launch_template is not None:
        notes.dropped(
            spec.at("launchTemplate"),
            f"custom launch template {launch_template!r}: unmanaged launch templates were removed in v1beta1; "
            "move its settings to this EC2NodeClass",
        )
    _common_fields(spec, out, legacy=True)
    if "associatePublicIpAddress" in spec:
        out["associatePublicIPAddress"] = spec.take("associatePublicIpAddress")
    _metadata_options(spec, out, legacy=True)
    _ubuntu_root(family, out, spec)
    spec.report_unused()
    return out


def convert_v1beta1_nodeclass(spec: Fields) -> dict[str, Any]:
    """The v1 EC2NodeClass spec for a v1beta1 EC2NodeClass spec.

    Raises :class:`~.notes.ConversionError` for Ubuntu/Custom without ``amiSelectorTerms`` or an
    unknown ``amiFamily``.
    """
    notes = spec.notes
    out: dict[str, Any] = {}
    for key in ("subnetSelectorTerms", "securityGroupSelectorTerms"):
        if key in spec:
            out[key] = spec.take_list(key)
    terms = spec.take_list("amiSelectorTerms")
    family = spec.take_str("amiFamily")
    if family is None:
        raise notes.error(spec.at("amiFamily"), "is required in v1beta1")
    out.update(_ami_fields(family, terms, spec))
    for key in ("role", "instanceProfile", "associatePublicIPAddress", "instanceStorePolicy"):
        if key in spec:
            out[key] = spec.take(key)
    _common_fields(spec, out, legacy=False)
    _metadata_options(spec, out, legacy=False)
    _ubuntu_root(family, out, spec)
    spec.report_unused()
    return out


def _ami_fields(family: str, terms: list[Any], spec: Fields) -> dict[str, Any]:
    notes = spec.notes
    at = spec.at("amiFamily")
    if family == "Ubuntu":
        if not terms:
            raise notes.error(
                at,
                "Ubuntu is no longer an AMI family in v1 and there is no AMI selector to keep: "
                "add amiSelector(Terms) selecting your Ubuntu AMIs and convert again",
            )
        notes.changed(
            at,
            "Ubuntu was dropped in v1: now AL2 (same UserData format) with your AMI selector terms; "
            "use Custom and your own UserData if the formats ever diverge",
        )
        return {"amiFamily": "AL2", "amiSelectorTerms": terms}
    if family == "Custom":
        if not terms:
            raise notes.error(at, "Custom needs AMI selector terms")
        notes.action(
            at,
            "Custom: your UserData must register the node with the karpenter.sh/unregistered:NoExecute taint "
            "(Karpenter v1 removes it once the node registers)",
        )
        return {"amiFamily": "Custom", "amiSelectorTerms": terms}
    if family not in _ALIAS_FAMILIES:
        raise notes.error(at, f"unknown AMI family {family!r}")
    if terms:
        return {"amiFamily": family, "amiSelectorTerms": terms}
    alias = f"{family.lower()}@latest"
    advice = (
        "Windows aliases only support @latest"
        if family.startswith("Windows")
        else f"pin a version (e.g. {family.lower()}@v20240807) so AMI releases do not roll your nodes"
    )
    notes.action(at, f"{family} without AMI selector: now amiSelectorTerms [{{alias: {alias}}}]; {advice}")
    return {"amiSelectorTerms": [{"alias": alias}]}


def _common_fields(spec: Fields, out: dict[str, Any], *, legacy: bool) -> None:
    for key in ("userData", "detailedMonitoring", "context"):
        if key in spec:
            out[key] = spec.take(key)
    tags = spec.take_map("tags")
    kept = {}
    for key, value in tags.items():
        if key in _RESTRICTED_TAGS or key.startswith("kubernetes.io/cluster"):
            spec.notes.dropped(f'{spec.at("tags")}["{key}"]', "Karpenter v1 sets this tag itself and refuses it here")
        else:
            kept[key] = "" if value is None else str(value)
    if kept:
        out["tags"] = kept
    mappings = spec.take_list("blockDeviceMappings")
    if mappings:
        out["blockDeviceMappings"] = [
            _block_device(Fields(m, spec.at("blockDeviceMappings") + f"[{i}]", spec.notes), legacy=legacy)
            for i, m in enumerate(mappings)
        ]


def _block_device(mapping: Fields, *, legacy: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "deviceName" in mapping:
        out["deviceName"] = mapping.take("deviceName")
    if not legacy and "rootVolume" in mapping:
        out["rootVolume"] = mapping.take("rootVolume")
    if "virtualName" in mapping:
        mapping.notes.dropped(mapping.at("virtualName"), "instance store devices are not mapped in v1beta1+")
        mapping.take("virtualName")
    if "ebs" in mapping:
        ebs = mapping.take_fields("ebs")
        out["ebs"] = {k: scalar_str(ebs.take(k)) if k == "volumeSize" else ebs.take(k) for k in _EBS_FIELDS if k in ebs}
        if not legacy and "volumeInitializationRate" in ebs:
            out["ebs"]["volumeInitializationRate"] = ebs.take("volumeInitializationRate")
        ebs.report_unused()
    mapping.report_unused()
    return out


def _metadata_options(spec: Fields, out: dict[str, Any], *, legacy: bool) -> None:
    """Keep the IMDS settings nodes had: v0.31 and v1beta1 used hop limit 2 when ``metadataOptions``
    was unset, v1 uses 1. v1beta1's CRD also defaulted each missing sub-field (hop limit 2), while
    v0.31 passed missing sub-fields to EC2 (hop limit 1, tokens optional)."""
    at = spec.at("metadataOptions")
    if "metadataOptions" not in spec:
        spec.take("metadataOptions")
        out["metadataOptions"] = dict(_METADATA_DEFAULTS)
        spec.notes.changed(
            at,
            "unset: wrote the old defaults (httpPutResponseHopLimit 2) because v1 defaults to 1, which stops "
            "pods without hostNetwork from reaching IMDS; set 1 if your pods do not need it",
        )
        return
    given = spec.take_fields("metadataOptions")
    options = {k: given.take(k) for k in _METADATA_DEFAULTS if k in given}
    given.report_unused()
    if not legacy and "httpPutResponseHopLimit" not in options:
        options["httpPutResponseHopLimit"] = 2
        spec.notes.changed(
            f"{at}.httpPutResponseHopLimit",
            "unset: wrote v1beta1's default 2 because v1 defaults to 1 (blocks IMDS for pods without hostNetwork)",
        )
    if legacy and "httpTokens" not in options:
        spec.notes.changed(
            f"{at}.httpTokens",
            "unset: EC2's default (usually optional) applied before; v1 defaults to required (IMDSv2 only)",
        )
    out["metadataOptions"] = options


def _ubuntu_root(family: str, out: dict[str, Any], spec: Fields) -> None:
    if family == "Ubuntu" and not out.get("blockDeviceMappings"):
        out["blockDeviceMappings"] = [copy.deepcopy(_UBUNTU_ROOT)]
        spec.notes.changed(
            spec.at("blockDeviceMappings"),
            "unset: wrote Ubuntu's root volume /dev/sda1 (20Gi gp3, encrypted), since AL2's default device differs",
        )
