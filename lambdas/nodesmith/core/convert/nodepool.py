"""v1alpha5 ``Provisioner`` and v1beta1 ``NodePool`` -> ``karpenter.sh/v1`` ``NodePool``.

Rules and where they come from:

* Provisioner -> NodePool layout (labels/annotations to ``spec.template.metadata``; requirements,
  taints, startupTaints to ``spec.template.spec``; ``limits.resources`` -> ``limits``; ``weight``
  kept; ``providerRef`` -> ``nodeClassRef``; inline ``provider`` -> its own EC2NodeClass):
  v1beta1 migration guide, "Provisioner -> NodePool" and "Provider".
* ``ttlSecondsAfterEmpty: n`` -> ``consolidationPolicy: WhenEmpty`` + ``consolidateAfter: ns``;
  ``consolidation.enabled: true`` -> ``WhenUnderutilized``, renamed ``WhenEmptyOrUnderutilized`` in v1
  with ``consolidateAfter: 0s`` (v1beta1 guide "TTLSecondsAfterEmpty", "Consolidation"; v1 webhook
  ``[core]:pkg/apis/v1/nodepool_conversion.go@v1.0.0 Disruption.convertFrom``). With neither, v1alpha5
  removed no node for emptiness or low use: written as ``WhenEmpty`` + ``consolidateAfter: Never``.
* ``ttlSecondsUntilExpired`` -> ``expireAfter``, on ``spec.template.spec`` since v1 (v1beta1 kept it
  in ``spec.disruption``; v1 guide "API Moves"). Unset meant "never expire" in v1alpha5 but v1
  defaults to 720h, so ``Never`` is written.
* v1alpha5 requirement defaults (``[aws]:pkg/apis/v1alpha5/provisioner.go@v0.31.4 SetDefaults``:
  os linux, arch amd64, capacity-type on-demand, instance-category c/m/r + generation > 2 when no
  instance type constraint) are gone in v1beta1 ("spec.template.spec.requirements Defaults
  Dropped"), so they are written out.
* ``karpenter.sh/provisioner-name`` became ``karpenter.sh/nodepool``, which Karpenter sets itself and
  refuses in a NodePool's requirements and labels: such entries are dropped with a note. Other keys
  v1 refuses (``karpenter.k8s.aws/instance-pods`` ...) are dropped too.
* v1beta1 ``nodeClassRef {apiVersion, kind, name}`` -> ``{group, kind, name}``; budgets kept;
  ``spec.template.spec.resources`` has no v1 field.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from nodesmith.core.api.common import NORMALIZED_LABELS, is_restricted_label
from nodesmith.core.convert.annotations import (
    NODEPOOL_LABEL,
    PROVISIONER_NAME_LABEL,
    clean_metadata,
    rewrite_annotations,
)
from nodesmith.core.convert.fields import Fields, compact_duration, quantity_map, scalar_str, seconds_field
from nodesmith.core.convert.kubelet import PoolSlot, convert_kubelet

if TYPE_CHECKING:
    from nodesmith.core.convert.notes import NoteSink

__all__ = ["EC2NODECLASS_GROUP", "EC2NODECLASS_KIND", "convert_provisioner", "convert_v1beta1_nodepool"]

EC2NODECLASS_GROUP: Final = "karpenter.k8s.aws"
EC2NODECLASS_KIND: Final = "EC2NodeClass"

_OS, _ARCH, _CAPACITY = "kubernetes.io/os", "kubernetes.io/arch", "karpenter.sh/capacity-type"
_CATEGORY, _GENERATION = "karpenter.k8s.aws/instance-category", "karpenter.k8s.aws/instance-generation"
_INSTANCE_KEYS: Final = (
    "node.kubernetes.io/instance-type",
    "karpenter.k8s.aws/instance-family",
    _CATEGORY,
    _GENERATION,
)


def convert_provisioner(doc: Fields) -> tuple[PoolSlot, Fields | None]:
    """A v1alpha5 Provisioner as a v1 NodePool slot, plus its inline ``spec.provider`` (None with
    ``providerRef``) for the caller to turn into an EC2NodeClass named in ``nodeClassRef``.

    Raises :class:`~.notes.ConversionError` for a Provisioner with both or neither of
    ``provider``/``providerRef``, with both ``ttlSecondsAfterEmpty`` and ``consolidation.enabled``,
    or with malformed fields.
    """
    notes = doc.notes
    doc.ignore("apiVersion", "kind", "status")
    metadata = clean_metadata(doc.take("metadata"), notes)
    name = metadata["name"]
    spec = doc.take_fields("spec")
    labels = _labels(spec.take_map("labels"), spec.at("labels"), notes)
    annotations = rewrite_annotations(spec.take_map("annotations"), notes, spec.at("annotations"))
    requirements = _requirements(spec, own_name=name, min_values=False)
    requirements += _legacy_default_requirements(requirements, labels, spec)

    provider = spec.take_fields("provider") if "provider" in spec else None
    spec.ignore("provider")
    ref = spec.take_fields("providerRef") if "providerRef" in spec else None
    if (provider is None) == (ref is None):
        raise notes.error("spec", "needs exactly one of providerRef and provider")
    class_name = name if ref is None else _provider_ref_name(ref)

    template_spec: dict[str, Any] = {
        "nodeClassRef": {"group": EC2NODECLASS_GROUP, "kind": EC2NODECLASS_KIND, "name": class_name},
        "requirements": requirements,
    }
    _taints(spec, template_spec)
    template_spec["expireAfter"] = _legacy_expiry(spec)
    kubelet_path = spec.at("kubeletConfiguration")
    kubelet = convert_kubelet(spec.take_fields("kubeletConfiguration"))
    body = _nodepool(metadata, labels, annotations, template_spec, _legacy_disruption(spec))
    limits = spec.take_fields("limits")
    if "resources" in limits:
        body["spec"]["limits"] = quantity_map(limits.take_map("resources"))
    limits.report_unused()
    if "weight" in spec:
        body["spec"]["weight"] = spec.take_int("weight")
    spec.report_unused()
    doc.report_unused()
    slot = PoolSlot(
        name=name, body=body, class_name=class_name, kubelet=kubelet, kubelet_path=kubelet_path, notes=notes
    )
    return slot, provider


def convert_v1beta1_nodepool(doc: Fields) -> PoolSlot:
    """A v1beta1 NodePool as a v1 NodePool slot (kubelet block kept aside for the EC2NodeClass).

    Raises :class:`~.notes.ConversionError` for an unknown consolidation policy or malformed fields.
    """
    notes = doc.notes
    doc.ignore("apiVersion", "kind", "status")
    metadata = clean_metadata(doc.take("metadata"), notes)
    name = metadata["name"]
    spec = doc.take_fields("spec")
    template = spec.take_fields("template")
    tmeta = template.take_fields("metadata")
    labels = _labels(tmeta.take_map("labels"), tmeta.at("labels"), notes)
    annotations = rewrite_annotations(tmeta.take_map("annotations"), notes, tmeta.at("annotations"))
    tmeta.report_unused()
    tspec = template.take_fields("spec")
    ref = tspec.take_fields("nodeClassRef")
    ref_name = ref.take_str("name")
    if not ref_name:
        raise notes.error(ref.at("name"), "is required")
    api_version = ref.take_str("apiVersion")
    group = api_version.split("/", 1)[0] if api_version else EC2NODECLASS_GROUP
    kind = ref.take_str("kind") or EC2NODECLASS_KIND
    ref.report_unused()
    template_spec: dict[str, Any] = {
        "nodeClassRef": {"group": group, "kind": kind, "name": ref_name},
        "requirements": _requirements(tspec, own_name=name, min_values=True),
    }
    _taints(tspec, template_spec)
    if "resources" in tspec:
        tspec.take("resources")
        notes.dropped(tspec.at("resources"), "NodePool templates have no resource requests in v1")
    kubelet_path = tspec.at("kubelet")
    kubelet = convert_kubelet(tspec.take_fields("kubelet"))
    tspec.report_unused()
    template.report_unused()

    disruption, expire_after = _v1beta1_disruption(spec.take_fields("disruption"))
    if expire_after is not None:
        template_spec["expireAfter"] = expire_after
    body = _nodepool(metadata, labels, annotations, template_spec, disruption)
    if "limits" in spec:
        body["spec"]["limits"] = quantity_map(spec.take_map("limits"))
    if "weight" in spec:
        body["spec"]["weight"] = spec.take_int("weight")
    spec.report_unused()
    doc.report_unused()
    is_ec2 = group == EC2NODECLASS_GROUP and kind == EC2NODECLASS_KIND
    return PoolSlot(
        name=name,
        body=body,
        class_name=ref_name if is_ec2 else None,
        kubelet=kubelet,
        kubelet_path=kubelet_path,
        notes=notes,
    )


def _nodepool(
    metadata: dict[str, Any],
    labels: dict[str, str],
    annotations: dict[str, Any],
    template_spec: dict[str, Any],
    disruption: dict[str, Any],
) -> dict[str, Any]:
    template: dict[str, Any] = {}
    template_meta = {k: v for k, v in (("labels", labels), ("annotations", annotations)) if v}
    if template_meta:
        template["metadata"] = template_meta
    template["spec"] = template_spec
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": metadata,
        "spec": {"template": template, "disruption": disruption},
    }


def _provider_ref_name(ref: Fields) -> str:
    name = ref.take_str("name")
    if not name:
        raise ref.notes.error(ref.at("name"), "is required")
    kind = ref.take_str("kind")
    if kind not in (None, "AWSNodeTemplate"):
        raise ref.notes.error(ref.at("kind"), f"{kind!r}: only AWSNodeTemplate references can be converted")
    ref.ignore("apiVersion")
    ref.report_unused()
    return name


def _restricted_reason(key: str, own_name: str | None = None) -> str | None:
    if key == PROVISIONER_NAME_LABEL:
        return (
            f"{PROVISIONER_NAME_LABEL} became {NODEPOOL_LABEL}, which Karpenter sets on every node "
            f"of the pool and refuses in NodePool requirements and labels"
        )
    if key == NODEPOOL_LABEL:
        return f"Karpenter sets {NODEPOOL_LABEL} itself and refuses it in NodePool requirements and labels"
    reason = is_restricted_label(NORMALIZED_LABELS.get(key, key))
    return f"Karpenter v1 refuses it: {reason}" if reason else None


def _labels(labels: dict[str, Any], path: str, notes: NoteSink) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in labels.items():
        reason = _restricted_reason(key)
        if reason:
            notes.dropped(f'{path}["{key}"]', reason)
        else:
            out[key] = "" if value is None else str(scalar_str(value))
    return out


def _requirements(spec: Fields, *, own_name: str, min_values: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, raw in enumerate(spec.take_list("requirements")):
        req = Fields(raw, spec.at("requirements") + f"[{i}]", spec.notes)
        key = req.take_str("key") or ""
        operator = req.take_str("operator") or ""
        values = [str(scalar_str(v)) for v in req.take_list("values")]
        reason = _restricted_reason(key)
        if reason:
            if key == PROVISIONER_NAME_LABEL and operator == "In" and values == [own_name]:
                reason = f"redundant: every node of NodePool {own_name} carries {NODEPOOL_LABEL}={own_name}"
            spec.notes.dropped(req.path, f"{key} {operator} {values}: {reason}")
            req.ignore("minValues")
            req.report_unused()
            continue
        item: dict[str, Any] = {"key": key, "operator": operator}
        if values:
            item["values"] = values
        if min_values and "minValues" in req:
            item["minValues"] = req.take_int("minValues")
        req.report_unused()
        out.append(item)
    return out


def _legacy_default_requirements(
    requirements: list[dict[str, Any]], labels: dict[str, str], spec: Fields
) -> list[dict[str, Any]]:
    """Requirements v1alpha5 added to a Provisioner that did not constrain these keys.

    Labels count as constraints here too, so a pool labelled ``karpenter.sh/capacity-type: spot`` is
    not given a contradicting on-demand requirement.
    """
    keys = {NORMALIZED_LABELS.get(r["key"], r["key"]) for r in requirements} | set(labels)
    added: list[dict[str, Any]] = []
    for key, value in ((_OS, "linux"), (_ARCH, "amd64"), (_CAPACITY, "on-demand")):
        if key not in keys:
            added.append({"key": key, "operator": "In", "values": [value]})
    if not keys & set(_INSTANCE_KEYS):
        added.append({"key": _CATEGORY, "operator": "In", "values": ["c", "m", "r"]})
        added.append({"key": _GENERATION, "operator": "Gt", "values": ["2"]})
    if added:
        shown = "; ".join(f"{r['key']} {r['operator']} {r['values']}" for r in added)
        spec.notes.changed(
            spec.at("requirements"),
            f"added {shown}: Karpenter v1alpha5 applied these defaults to Provisioners, v1 does not",
        )
    return added


def _taints(spec: Fields, template_spec: dict[str, Any]) -> None:
    for key in ("taints", "startupTaints"):
        taints = []
        for i, raw in enumerate(spec.take_list(key)):
            taint = Fields(raw, spec.at(key) + f"[{i}]", spec.notes)
            item = {"key": taint.take("key")}
            if "value" in taint:
                item["value"] = str(scalar_str(taint.take("value")))
            item["effect"] = taint.take("effect")
            taint.ignore("timeAdded")
            taint.report_unused()
            taints.append(item)
        if taints:
            template_spec[key] = taints


def _legacy_disruption(spec: Fields) -> dict[str, Any]:
    empty_after = seconds_field(spec, "ttlSecondsAfterEmpty")
    consolidation = spec.take_fields("consolidation")
    enabled = consolidation.take("enabled")
    consolidation.report_unused()
    if enabled is True and empty_after is not None:
        raise spec.notes.error(spec.at("ttlSecondsAfterEmpty"), "cannot be set with consolidation.enabled: true")
    spec.notes.changed(
        "",
        "v1 limits voluntary disruption to 10% of a pool's nodes at a time by default (disruption budgets); "
        "v1alpha5 had no such limit",
    )
    if enabled is True:
        spec.notes.changed(
            consolidation.at("enabled"),
            "became consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 0s",
        )
        return {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"}
    if empty_after is not None:
        spec.notes.changed(
            spec.at("ttlSecondsAfterEmpty"),
            f"{empty_after} became consolidationPolicy: WhenEmpty, consolidateAfter: {empty_after}s",
        )
        return {"consolidationPolicy": "WhenEmpty", "consolidateAfter": f"{empty_after}s"}
    spec.notes.changed(
        spec.at("ttlSecondsAfterEmpty"),
        "unset (and consolidation off): no node was removed for being empty or underused; written as "
        "consolidationPolicy: WhenEmpty, consolidateAfter: Never because v1 consolidates by default",
    )
    return {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"}


def _legacy_expiry(spec: Fields) -> str:
    ttl = seconds_field(spec, "ttlSecondsUntilExpired")
    at = spec.at("ttlSecondsUntilExpired")
    if ttl is None:
        spec.notes.changed(at, "unset: nodes never expired; written expireAfter: Never because v1 defaults to 720h")
        return "Never"
    duration = compact_duration(ttl)
    spec.notes.changed(
        at,
        f"{ttl} became spec.template.spec.expireAfter: {duration}; v1 expiry is forceful (drains without waiting "
        "for replacement capacity, not limited by disruption budgets) and changing it drifts nodes",
    )
    return duration


def _v1beta1_disruption(disruption: Fields) -> tuple[dict[str, Any], str | None]:
    notes = disruption.notes
    policy = disruption.take_str("consolidationPolicy") or "WhenUnderutilized"
    after = disruption.take("consolidateAfter")
    expire_after = disruption.take("expireAfter")
    out: dict[str, Any] = {}
    if policy == "WhenUnderutilized":
        out["consolidationPolicy"] = "WhenEmptyOrUnderutilized"
        if after is None:
            out["consolidateAfter"] = "0s"
        else:
            out["consolidateAfter"] = str(after)
            notes.changed(disruption.at("consolidateAfter"), "v1beta1 refused it with WhenUnderutilized; v1 honours it")
        if "consolidationPolicy" in disruption:
            notes.changed(
                disruption.at("consolidationPolicy"),
                "WhenUnderutilized was renamed WhenEmptyOrUnderutilized; consolidateAfter: 0s keeps v1beta1's timing",
            )
    elif policy == "WhenEmpty":
        out["consolidationPolicy"] = "WhenEmpty"
        out["consolidateAfter"] = "0s" if after is None else str(after)
        if after is None:
            notes.changed(disruption.at("consolidateAfter"), "unset with WhenEmpty: written as v1's default 0s")
    else:
        raise notes.error(disruption.at("consolidationPolicy"), f"unknown policy {policy!r}")
    budgets = []
    for i, raw in enumerate(disruption.take_list("budgets")):
        budget = Fields(raw, disruption.at("budgets") + f"[{i}]", notes)
        item: dict[str, Any] = {
            k: str(scalar_str(budget.take(k))) for k in ("nodes", "schedule", "duration") if k in budget
        }
        if "reasons" in budget:
            item["reasons"] = budget.take_list("reasons")
        budget.report_unused()
        budgets.append(item)
    if budgets:
        out["budgets"] = budgets
    disruption.report_unused()
    if expire_after is None:
        return out, None
    notes.changed(
        disruption.at("expireAfter"),
        f"moved to spec.template.spec.expireAfter: {expire_after}; v1 expiry is forceful (drains without waiting "
        "for replacement capacity, not limited by disruption budgets) and changing it drifts nodes",
    )
    return out, str(expire_after)
