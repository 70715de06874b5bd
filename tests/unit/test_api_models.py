"""The NodePool model applies Karpenter's v1 defaults and rejects what Karpenter's CRD and webhooks reject, and the
API helpers (durations, restricted labels) read what Karpenter reads.

Rules come from the generated CRDs in aws/karpenter-provider-aws v1.14.1
(``pkg/apis/crds/*.yaml``) and ``[core]:pkg/apis/v1/*_validation.go``.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from api_docs import errors, nodepool_doc
from pydantic import ValidationError

from nodesmith.core.api.common import is_restricted_label, parse_duration
from nodesmith.core.api.nodepool import NodePool, check_nodepool_update
from nodesmith.core.model import NodeSelectorRequirement, Taint


def with_requirement(req: dict[str, Any]) -> dict[str, Any]:
    doc = nodepool_doc()
    doc["spec"]["template"]["spec"]["requirements"] = [req]
    return doc


# --- NodePool defaults ----------------------------------------------------------------------------


def test_nodepool_gets_karpenter_defaults() -> None:
    np = NodePool.model_validate(nodepool_doc())

    assert np.spec.template.spec.expire_after == "720h"
    assert np.expire_after_seconds() == 720 * 3600
    assert np.spec.disruption.consolidation_policy == "WhenEmptyOrUnderutilized"
    assert np.spec.disruption.consolidate_after == "0s"
    assert [b.nodes for b in np.spec.disruption.budgets] == ["10%"]
    assert np.spec.weight is None and np.weight_or_zero == 0
    assert np.termination_grace_period_seconds() is None


def test_nodepool_round_trips_through_dump() -> None:
    doc = nodepool_doc(
        limits={"cpu": "1000", "memory": "1000Gi"},
        weight=50,
        disruption={
            "consolidationPolicy": "WhenEmpty",
            "consolidateAfter": "1m",
            "budgets": [{"nodes": "0", "schedule": "@daily", "duration": "10m", "reasons": ["Drifted"]}],
        },
    )
    doc["spec"]["template"]["metadata"] = {"labels": {"team": "a"}, "annotations": {"x": "y"}}
    doc["spec"]["template"]["spec"]["taints"] = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
    doc["spec"]["template"]["spec"]["expireAfter"] = "Never"
    doc["spec"]["template"]["spec"]["terminationGracePeriod"] = "1h30m"

    dumped = NodePool.model_validate(copy.deepcopy(doc)).model_dump(by_alias=True, exclude_none=True)

    assert dumped == doc
    assert NodePool.model_validate(dumped) == NodePool.model_validate(doc)


def test_nodepool_helpers_convert_to_core_types() -> None:
    doc = nodepool_doc(limits={"cpu": 100, "memory": "64Gi", "nodes": "10"})
    reqs = doc["spec"]["template"]["spec"]["requirements"]
    reqs.append({"key": "beta.kubernetes.io/arch", "operator": "In", "values": ["arm64"], "minValues": 1})
    startup = [{"key": "node.cilium.io/agent-not-ready", "effect": "NoExecute"}]
    doc["spec"]["template"]["spec"]["startupTaints"] = startup
    np = NodePool.model_validate(doc)

    assert np.requirements_core()[-1] == NodeSelectorRequirement(
        key="kubernetes.io/arch", operator="In", values=("arm64",), min_values=1
    )
    assert np.startup_taints_core() == (Taint(key="node.cilium.io/agent-not-ready", effect="NoExecute"),)
    assert np.taints_core() == ()
    assert np.limits_core() == {"cpu": 100_000, "memory": 64 * 2**30, "nodes": 10}
    assert np.spec.limits == {"cpu": "100", "memory": "64Gi", "nodes": "10"}


# --- NodePool validation --------------------------------------------------------------------------


def test_typo_in_template_spec_is_rejected_with_its_path() -> None:
    doc = nodepool_doc()
    tspec = doc["spec"]["template"]["spec"]
    tspec["requirments"] = tspec.pop("requirements")

    with pytest.raises(ValidationError) as exc:
        NodePool.model_validate(doc)

    assert ("spec.template.spec.requirments", "Extra inputs are not permitted") in errors(exc)


@pytest.mark.parametrize(
    ("requirement", "path", "fragment"),
    [
        ({"key": "a.io/b", "operator": "Inn", "values": ["x"]}, "requirements[0].operator", "Input should be"),
        ({"key": "a.io/b", "operator": "In", "values": []}, "requirements[0]", "must have a value defined"),
        ({"key": "a.io/b", "operator": "Gt", "values": ["1", "2"]}, "requirements[0]", "single non-negative integer"),
        ({"key": "a.io/b", "operator": "Lt", "values": ["1.5"]}, "requirements[0]", "single non-negative integer"),
        ({"key": "a.io/b", "operator": "Gte", "values": ["x"]}, "requirements[0]", "single non-negative integer"),
        ({"key": "a.io/b", "operator": "In", "values": ["x"], "minValues": 2}, "requirements[0]", "at least that many"),
        ({"key": "a.io/b", "operator": "Exists", "minValues": 51}, "requirements[0].minValues", "less than or equal"),
        ({"key": "kubernetes.io/hostname", "operator": "In", "values": ["n"]}, "requirements[0].key", "restricted"),
        ({"key": "karpenter.sh/nodepool", "operator": "In", "values": ["x"]}, "requirements", "restricted"),
        ({"key": "karpenter.sh/custom", "operator": "Exists"}, "requirements[0].key", "karpenter.sh"),
        ({"key": "karpenter.k8s.aws/instance-pods", "operator": "Exists"}, "requirements[0].key", "karpenter.k8s.aws"),
        ({"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["cheap"]}, "requirements[0]", "spot"),
        ({"key": "bad key!", "operator": "Exists"}, "requirements[0].key", "pattern"),
    ],
)
def test_invalid_requirements_are_rejected(requirement: dict[str, Any], path: str, fragment: str) -> None:
    with pytest.raises(ValidationError) as exc:
        NodePool.model_validate(with_requirement(requirement))

    found = errors(exc)
    assert any(loc == f"spec.template.spec.{path}" and fragment in msg for loc, msg in found), found


@pytest.mark.parametrize(
    "requirement",
    [
        {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["2"]},
        {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Lte", "values": ["64"]},
        {"key": "karpenter.k8s.aws/instance-family", "operator": "Exists", "minValues": 5},
        {"key": "topology.kubernetes.io/zone", "operator": "NotIn", "values": ["us-east-1e"]},
        {"key": "node.kubernetes.io/instance-type", "operator": "DoesNotExist"},
        {"key": "example.com/team", "operator": "In", "values": ["a", "b"]},
    ],
)
def test_valid_requirements_are_accepted(requirement: dict[str, Any]) -> None:
    NodePool.model_validate(with_requirement(requirement))


@pytest.mark.parametrize(
    ("labels", "fragment"),
    [
        ({"karpenter.sh/nodepool": "x"}, "karpenter.sh/nodepool"),
        ({"kubernetes.io/hostname": "x"}, "kubernetes.io/hostname"),
        ({"karpenter.sh/anything": "x"}, "karpenter.sh"),
        ({"team": "not a label value"}, "not a valid label value"),
    ],
)
def test_restricted_template_labels_are_rejected(labels: dict[str, str], fragment: str) -> None:
    doc = nodepool_doc()
    doc["spec"]["template"]["metadata"] = {"labels": labels}

    with pytest.raises(ValidationError) as exc:
        NodePool.model_validate(doc)

    assert any(loc == "spec.template.metadata.labels" and fragment in msg for loc, msg in errors(exc))


@pytest.mark.parametrize(
    ("budget", "fragment"),
    [
        ({"nodes": "101%"}, "pattern"),
        ({"nodes": "ten"}, "pattern"),
        ({"nodes": "10%", "schedule": "@daily"}, "'schedule' must be set with 'duration'"),
        ({"nodes": "10%", "duration": "1h"}, "'schedule' must be set with 'duration'"),
        ({"nodes": "10%", "schedule": "@daily", "duration": "30s"}, "pattern"),
        ({"nodes": "10%", "reasons": ["Expired"]}, "Input should be"),
    ],
)
def test_invalid_budgets_are_rejected(budget: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValidationError) as exc:
        NodePool.model_validate(nodepool_doc(disruption={"budgets": [budget]}))

    assert any(loc.startswith("spec.disruption.budgets[0]") and fragment in msg for loc, msg in errors(exc))


def test_budget_nodes_may_be_a_count_or_percent() -> None:
    np = NodePool.model_validate(nodepool_doc(disruption={"budgets": [{"nodes": 5}, {"nodes": "100%"}]}))

    assert [b.nodes for b in np.spec.disruption.budgets] == ["5", "100%"]


@pytest.mark.parametrize(
    ("overrides", "path"),
    [
        ({"weight": 0}, "spec.weight"),
        ({"weight": 101}, "spec.weight"),
        ({"limits": {"cpu": "lots"}}, "spec.limits.cpu"),
        ({"replicas": 3, "limits": {"cpu": "10"}}, "spec"),
        ({"disruption": {"consolidateAfter": "5 minutes"}}, "spec.disruption.consolidateAfter"),
        ({"disruption": {"consolidationPolicy": "WhenUnderutilized"}}, "spec.disruption.consolidationPolicy"),
    ],
)
def test_invalid_spec_fields_are_rejected(overrides: dict[str, Any], path: str) -> None:
    with pytest.raises(ValidationError) as exc:
        NodePool.model_validate(nodepool_doc(**overrides))

    assert path in [loc for loc, _ in errors(exc)]


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ({"replicas": 2, "weight": 10}, "'weight' is not supported on static NodePools"),
        (
            {"replicas": 2, "limits": {"nodes": "4", "cpu": "10"}},
            "only 'limits.nodes' is supported on static NodePools",
        ),
        ({"replicas": -1}, "greater than or equal to 0"),
    ],
)
def test_static_nodepool_fields_are_checked_like_karpenters_cel_rules(overrides: dict[str, Any], says: str) -> None:
    with pytest.raises(ValidationError) as exc:
        NodePool.model_validate(nodepool_doc(**overrides))

    assert any(loc.startswith("spec") and says in msg for loc, msg in errors(exc)), errors(exc)


@pytest.mark.parametrize("limits", [None, {}, {"nodes": "5"}])
def test_a_static_nodepool_accepts_zero_replicas_and_only_a_node_limit(limits: dict[str, str] | None) -> None:
    doc = nodepool_doc(replicas=0, disruption={"consolidationPolicy": "WhenEmpty", "consolidateAfter": "1m"})
    if limits is not None:
        doc["spec"]["limits"] = limits
    np = NodePool.model_validate(doc)

    assert np.spec.replicas == 0
    assert np.limits_core() == ({"nodes": 5} if limits else {})


def test_replicas_can_change_but_never_be_added_or_removed_by_an_update() -> None:
    dynamic = NodePool.model_validate(nodepool_doc())
    static = NodePool.model_validate(nodepool_doc(replicas=3))
    check_nodepool_update(static, NodePool.model_validate(nodepool_doc(replicas=0)))
    check_nodepool_update(dynamic, NodePool.model_validate(nodepool_doc(weight=5)))

    with pytest.raises(ValueError, match=r"spec\.replicas cannot be added to"):
        check_nodepool_update(dynamic, static)
    with pytest.raises(ValueError, match=r"spec\.replicas cannot be removed from"):
        check_nodepool_update(static, dynamic)


def test_duplicate_taint_key_effect_across_taints_and_startup_taints_is_rejected() -> None:
    doc = nodepool_doc()
    doc["spec"]["template"]["spec"]["taints"] = [{"key": "a", "effect": "NoSchedule"}]
    doc["spec"]["template"]["spec"]["startupTaints"] = [{"key": "a", "value": "x", "effect": "NoSchedule"}]

    with pytest.raises(ValidationError, match="duplicate taint"):
        NodePool.model_validate(doc)


def test_expire_after_accepts_never_and_rejects_days() -> None:
    doc = nodepool_doc()
    doc["spec"]["template"]["spec"]["expireAfter"] = "Never"
    assert NodePool.model_validate(doc).expire_after_seconds() is None

    doc["spec"]["template"]["spec"]["expireAfter"] = "30d"
    with pytest.raises(ValidationError):
        NodePool.model_validate(doc)


# --- helpers --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("720h", 2_592_000.0), ("1h30m", 5400.0), ("30s", 30.0), ("0s", 0.0), ("0", 0.0), ("1.5s", 1.5), ("500ms", 0.5)],
)
def test_parse_duration_reads_go_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


def test_parse_duration_never_and_garbage() -> None:
    assert parse_duration("Never") is None
    for bad in ("", "5", "1d", "h", "1h 30m"):
        with pytest.raises(ValueError, match="not a duration"):
            parse_duration(bad)


def test_restricted_labels_follow_karpenter() -> None:
    assert is_restricted_label("kubernetes.io/hostname")
    assert is_restricted_label("sub.karpenter.sh/x")
    assert is_restricted_label("karpenter.k8s.aws/whatever")
    assert is_restricted_label("karpenter.sh/capacity-type") is None
    assert is_restricted_label("karpenter.k8s.aws/instance-family") is None
    assert is_restricted_label("node.kubernetes.io/instance-type") is None
    assert is_restricted_label("example.com/team") is None
