"""Converting Karpenter v1alpha5/v1beta1 manifests to v1 (``nodesmith.core.convert``).

Each test feeds parsed manifests as users wrote them and checks the v1 result and the notes, as the
Karpenter upgrade guides (v1beta1 and v1 migration) and conversion webhooks describe the mapping.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from nodesmith.core.api import EC2NodeClass, NodePool
from nodesmith.core.convert import ConversionError, InputDocument, Note, convert, convert_documents

LEGACY = Path(__file__).resolve().parents[1] / "manifests" / "legacy"


def provisioner(name: str = "default", **spec: Any) -> dict[str, Any]:
    spec.setdefault("providerRef", {"name": "default"})
    return {"apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": name}, "spec": spec}


def template(name: str = "default", **spec: Any) -> dict[str, Any]:
    spec.setdefault("subnetSelector", {"karpenter.sh/discovery": "prod"})
    spec.setdefault("securityGroupSelector", {"karpenter.sh/discovery": "prod"})
    spec.setdefault("instanceProfile", "KarpenterNodeInstanceProfile-prod")
    return {
        "apiVersion": "karpenter.k8s.aws/v1alpha1",
        "kind": "AWSNodeTemplate",
        "metadata": {"name": name},
        "spec": spec,
    }


def beta_pool(name: str = "default", *, disruption: dict[str, Any] | None = None, **tspec: Any) -> dict[str, Any]:
    tspec.setdefault(
        "nodeClassRef", {"apiVersion": "karpenter.k8s.aws/v1beta1", "kind": "EC2NodeClass", "name": "default"}
    )
    tspec.setdefault("requirements", [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}])
    spec: dict[str, Any] = {"template": {"spec": tspec}}
    if disruption is not None:
        spec["disruption"] = disruption
    return {"apiVersion": "karpenter.sh/v1beta1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}


def beta_class(name: str = "default", **spec: Any) -> dict[str, Any]:
    spec.setdefault("amiFamily", "AL2023")
    spec.setdefault("role", "KarpenterNodeRole-prod")
    spec.setdefault("subnetSelectorTerms", [{"tags": {"karpenter.sh/discovery": "prod"}}])
    spec.setdefault("securityGroupSelectorTerms", [{"tags": {"karpenter.sh/discovery": "prod"}}])
    return {"apiVersion": "karpenter.k8s.aws/v1beta1", "kind": "EC2NodeClass", "metadata": {"name": name}, "spec": spec}


def by_name(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    matches = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind}/{name}: {len(matches)} documents"
    return matches[0]


def pool_of(docs: list[dict[str, Any]], name: str = "default") -> dict[str, Any]:
    return by_name(docs, "NodePool", name)


def class_of(docs: list[dict[str, Any]], name: str = "default") -> dict[str, Any]:
    return by_name(docs, "EC2NodeClass", name)


def notes_at(notes: list[Note], path: str) -> list[Note]:
    return [n for n in notes if n.path == path]


# --- disruption ---------------------------------------------------------------------------------


def test_ttl_seconds_after_empty_becomes_when_empty_with_the_same_seconds() -> None:
    docs, notes = convert([provisioner(ttlSecondsAfterEmpty=30), template()])

    assert pool_of(docs)["spec"]["disruption"] == {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s"}
    [note] = notes_at(notes, "spec.ttlSecondsAfterEmpty")
    assert note.kind == "changed"
    assert "WhenEmpty" in note.message


def test_consolidation_enabled_becomes_when_empty_or_underutilized() -> None:
    docs, _ = convert([provisioner(consolidation={"enabled": True}), template()])

    assert pool_of(docs)["spec"]["disruption"] == {
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "consolidateAfter": "0s",
    }


@pytest.mark.parametrize("consolidation", [None, {"enabled": False}])
def test_provisioner_without_empty_ttl_or_consolidation_never_consolidates(consolidation: Any) -> None:
    spec = {} if consolidation is None else {"consolidation": consolidation}
    docs, _ = convert([provisioner(**spec), template()])

    assert pool_of(docs)["spec"]["disruption"] == {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"}


def test_empty_ttl_with_consolidation_is_refused_like_v1alpha5() -> None:
    with pytest.raises(ConversionError, match=r"Provisioner/default: spec.ttlSecondsAfterEmpty"):
        convert([provisioner(ttlSecondsAfterEmpty=30, consolidation={"enabled": True}), template()])


@pytest.mark.parametrize(("seconds", "expected"), [(2592000, "720h"), (5400, "90m"), (90, "90s"), (None, "Never")])
def test_ttl_seconds_until_expired_becomes_template_expire_after(seconds: int | None, expected: str) -> None:
    spec = {} if seconds is None else {"ttlSecondsUntilExpired": seconds}
    docs, notes = convert([provisioner(**spec), template()])

    assert pool_of(docs)["spec"]["template"]["spec"]["expireAfter"] == expected
    assert [n.kind for n in notes_at(notes, "spec.ttlSecondsUntilExpired")] == ["changed"]


def test_negative_ttl_is_bad_input() -> None:
    with pytest.raises(ConversionError, match="non-negative"):
        convert([provisioner(ttlSecondsAfterEmpty=-1), template()])


def test_v1beta1_when_underutilized_is_renamed_and_expire_after_moves_to_the_template() -> None:
    budgets = [{"nodes": "20%"}, {"nodes": 0, "schedule": "0 9 * * mon-fri", "duration": "8h"}]
    pool = beta_pool(disruption={"consolidationPolicy": "WhenUnderutilized", "expireAfter": "336h", "budgets": budgets})
    docs, notes = convert([pool, beta_class()])

    spec = pool_of(docs)["spec"]
    assert spec["disruption"] == {
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "consolidateAfter": "0s",
        "budgets": [{"nodes": "20%"}, {"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"}],
    }
    assert spec["template"]["spec"]["expireAfter"] == "336h"
    assert notes_at(notes, "spec.disruption.expireAfter")[0].kind == "changed"
    assert notes_at(notes, "spec.disruption.consolidationPolicy")[0].kind == "changed"


def test_v1beta1_when_empty_keeps_consolidate_after() -> None:
    docs, _ = convert(
        [beta_pool(disruption={"consolidationPolicy": "WhenEmpty", "consolidateAfter": "5m"}), beta_class()]
    )

    assert pool_of(docs)["spec"]["disruption"] == {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "5m"}


# --- NodePool fields ----------------------------------------------------------------------------


def test_provisioner_fields_move_into_the_nodepool_template() -> None:
    taint = {"key": "example.com/batch", "value": "true", "effect": "NoSchedule"}
    startup = {"key": "node.cilium.io/agent-not-ready", "value": "true", "effect": "NoExecute"}
    requirements = [
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]},
        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
        {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": [4]},
    ]
    docs, _ = convert(
        [
            provisioner(
                labels={"team": "data"},
                annotations={"example.com/owner": "data"},
                taints=[taint],
                startupTaints=[startup],
                requirements=requirements,
                limits={"resources": {"cpu": 1000, "memory": "1000Gi"}},
                weight=10,
                providerRef={"name": "data"},
            ),
            template("data"),
        ]
    )

    spec = pool_of(docs)["spec"]
    assert spec["template"]["metadata"] == {"labels": {"team": "data"}, "annotations": {"example.com/owner": "data"}}
    tspec = spec["template"]["spec"]
    assert tspec["nodeClassRef"] == {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "data"}
    assert tspec["taints"] == [taint]
    assert tspec["startupTaints"] == [startup]
    assert tspec["requirements"][:3] == requirements[:3]
    assert tspec["requirements"][3] == {
        "key": "karpenter.k8s.aws/instance-generation",
        "operator": "Gt",
        "values": ["4"],
    }
    assert spec["limits"] == {"cpu": "1000", "memory": "1000Gi"}
    assert spec["weight"] == 10


def test_v1alpha5_default_requirements_are_written_out() -> None:
    docs, notes = convert([provisioner(), template()])

    requirements = pool_of(docs)["spec"]["template"]["spec"]["requirements"]
    assert requirements == [
        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
        {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
        {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["2"]},
    ]
    assert "v1alpha5 applied these defaults" in notes_at(notes, "spec.requirements")[0].message


def test_v1alpha5_defaults_skip_constrained_keys_including_deprecated_names_and_labels() -> None:
    requirements = [
        {"key": "beta.kubernetes.io/arch", "operator": "In", "values": ["arm64"]},
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m6g.large"]},
    ]
    docs, _ = convert(
        [provisioner(requirements=requirements, labels={"karpenter.sh/capacity-type": "spot"}), template()]
    )

    keys = [r["key"] for r in pool_of(docs)["spec"]["template"]["spec"]["requirements"]]
    assert keys == ["beta.kubernetes.io/arch", "node.kubernetes.io/instance-type", "kubernetes.io/os"]


def test_provisioner_name_requirement_and_label_are_dropped_because_v1_refuses_the_nodepool_key() -> None:
    requirements = [
        {"key": "karpenter.sh/provisioner-name", "operator": "In", "values": ["batch"]},
        {"key": "karpenter.k8s.aws/instance-pods", "operator": "Gt", "values": ["20"]},
    ]
    docs, notes = convert(
        [provisioner("batch", requirements=requirements, labels={"karpenter.sh/provisioner-name": "batch"}), template()]
    )

    keys = {r["key"] for r in pool_of(docs, "batch")["spec"]["template"]["spec"]["requirements"]}
    assert not keys & {"karpenter.sh/provisioner-name", "karpenter.sh/nodepool", "karpenter.k8s.aws/instance-pods"}
    assert "metadata" not in pool_of(docs, "batch")["spec"]["template"]
    assert "redundant" in notes_at(notes, "spec.requirements[0]")[0].message
    assert notes_at(notes, "spec.requirements[1]")[0].kind == "dropped"
    assert notes_at(notes, 'spec.labels["karpenter.sh/provisioner-name"]')[0].kind == "dropped"


def test_v1beta1_node_class_ref_api_version_becomes_group_and_min_values_are_kept() -> None:
    requirement = {
        "key": "karpenter.k8s.aws/instance-family",
        "operator": "In",
        "values": ["m5", "m6i"],
        "minValues": 2,
    }
    docs, _ = convert([beta_pool(requirements=[requirement]), beta_class()])

    tspec = pool_of(docs)["spec"]["template"]["spec"]
    assert tspec["nodeClassRef"] == {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
    assert tspec["requirements"] == [requirement]


def test_unknown_fields_are_noted_as_not_carried_over() -> None:
    pool = beta_pool(resources={"requests": {"cpu": "1"}})
    pool["spec"]["template"]["spec"]["kubelet"] = {"maxPods": 20, "fancyFlag": True}
    pool["spec"]["mystery"] = 1
    _, notes = convert([pool, beta_class()])

    dropped = {n.path for n in notes if n.kind == "dropped"}
    assert {"spec.template.spec.resources", "spec.template.spec.kubelet.fancyFlag", "spec.mystery"} <= dropped
    assert all(n.render().count("not carried over: ") == 1 for n in notes if n.kind == "dropped")


# --- kubelet ------------------------------------------------------------------------------------


def test_provisioner_kubelet_moves_to_its_class() -> None:
    kubelet = {"maxPods": 110, "systemReserved": {"cpu": "100m", "memory": 100}, "containerRuntime": "containerd"}
    docs, notes = convert([provisioner(kubeletConfiguration=kubelet), template()])

    assert class_of(docs)["spec"]["kubelet"] == {"maxPods": 110, "systemReserved": {"cpu": "100m", "memory": "100"}}
    assert "kubelet" not in pool_of(docs)["spec"]["template"]["spec"]
    assert notes_at(notes, "spec.kubeletConfiguration.containerRuntime")[0].kind == "dropped"


def test_pools_with_equal_kubelets_share_the_class_without_copies() -> None:
    kubelet = {"maxPods": 58}
    docs, _ = convert(
        [provisioner("a", kubeletConfiguration=kubelet), provisioner("b", kubeletConfiguration=kubelet), template()]
    )

    assert [d["metadata"]["name"] for d in docs if d["kind"] == "EC2NodeClass"] == ["default"]
    assert class_of(docs)["spec"]["kubelet"] == kubelet


def test_pools_with_different_kubelets_get_per_pool_class_copies() -> None:
    docs, notes = convert(
        [
            beta_pool("general", kubelet={"maxPods": 110}),
            beta_pool("gpu", kubelet={"maxPods": 32}),
            beta_pool("plain"),
            beta_class(),
        ]
    )

    assert class_of(docs)["spec"]["kubelet"] == {"maxPods": 110}
    assert class_of(docs, "default-gpu")["spec"]["kubelet"] == {"maxPods": 32}
    assert "kubelet" not in class_of(docs, "default-plain")["spec"]
    refs = {
        p: pool_of(docs, p)["spec"]["template"]["spec"]["nodeClassRef"]["name"] for p in ("general", "gpu", "plain")
    }
    assert refs == {"general": "default", "gpu": "default-gpu", "plain": "default-plain"}
    copy_spec = {k: v for k, v in class_of(docs, "default-gpu")["spec"].items() if k != "kubelet"}
    assert copy_spec == {k: v for k, v in class_of(docs)["spec"].items() if k != "kubelet"}
    assert any(n.kind == "action" and n.obj == "EC2NodeClass/default" for n in notes)


def test_kubelet_for_a_class_outside_the_input_is_left_as_an_action() -> None:
    docs, notes = convert([provisioner(kubeletConfiguration={"maxPods": 20})])

    assert [d["kind"] for d in docs] == ["NodePool"]
    [note] = notes_at(notes, "spec.kubeletConfiguration")
    assert note.kind == "action"
    assert '{"maxPods": 20}' in note.message


def test_v1_class_keeps_its_kubelet_and_a_differing_pool_gets_a_copy() -> None:
    v1_class = convert([beta_class()])[0][0]
    v1_class["spec"]["kubelet"] = {"maxPods": 110}
    v1_class["metadata"].update(uid="1234", resourceVersion="7", labels={"team": "platform"})
    v1_class["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    docs, _ = convert([beta_pool(kubelet={"maxPods": 32}), v1_class])

    assert class_of(docs)["spec"]["kubelet"] == {"maxPods": 110}
    copied = class_of(docs, "default-default")
    assert copied["spec"]["kubelet"] == {"maxPods": 32}
    assert copied["metadata"] == {"name": "default-default", "labels": {"team": "platform"}}
    assert "status" not in copied


# --- EC2NodeClass -------------------------------------------------------------------------------


def test_inline_provider_becomes_an_ec2nodeclass_named_after_the_pool() -> None:
    provider = {
        "apiVersion": "extensions.karpenter.sh/v1alpha1",
        "kind": "AWS",
        "instanceProfile": "KarpenterNodeInstanceProfile-prod",
        "subnetSelector": {"karpenter.sh/discovery": "prod"},
        "securityGroupSelector": {"karpenter.sh/discovery": "prod"},
        "launchTemplate": "my-lt",
    }
    legacy = provisioner("legacy", provider=provider, kubeletConfiguration={"maxPods": 20})
    del legacy["spec"]["providerRef"]
    docs, notes = convert([legacy])

    assert [d["kind"] for d in docs] == ["EC2NodeClass", "NodePool"]
    assert pool_of(docs, "legacy")["spec"]["template"]["spec"]["nodeClassRef"]["name"] == "legacy"
    assert class_of(docs, "legacy")["spec"]["kubelet"] == {"maxPods": 20}
    assert notes_at(notes, "spec.provider.launchTemplate")[0].kind == "dropped"


def test_inline_provider_class_name_avoids_an_existing_class() -> None:
    legacy = provisioner(provider=template()["spec"])
    del legacy["spec"]["providerRef"]
    docs, _ = convert([legacy, template()])

    assert pool_of(docs)["spec"]["template"]["spec"]["nodeClassRef"]["name"] == "default-provider"
    assert {d["metadata"]["name"] for d in docs if d["kind"] == "EC2NodeClass"} == {"default", "default-provider"}


def test_provisioner_needs_exactly_one_of_provider_and_provider_ref() -> None:
    legacy = provisioner()
    del legacy["spec"]["providerRef"]
    with pytest.raises(ConversionError, match="exactly one of providerRef and provider"):
        convert([legacy])


@pytest.mark.parametrize(
    ("selector", "terms"),
    [
        ({"karpenter.sh/discovery": "prod"}, [{"tags": {"karpenter.sh/discovery": "prod"}}]),
        ({"aws::ids": "subnet-0aa, subnet-0bb"}, [{"id": "subnet-0aa"}, {"id": "subnet-0bb"}]),
        ({"aws-ids": "subnet-0aa"}, [{"id": "subnet-0aa"}]),
        ({"Name": "a,b", "env": "*"}, [{"tags": {"Name": "a", "env": "*"}}, {"tags": {"Name": "b", "env": "*"}}]),
    ],
)
def test_subnet_selector_map_becomes_selector_terms(selector: dict[str, str], terms: list[dict[str, Any]]) -> None:
    docs, _ = convert([template(subnetSelector=selector)])

    assert class_of(docs)["spec"]["subnetSelectorTerms"] == terms


def test_tags_next_to_ids_are_dropped_with_a_note() -> None:
    docs, notes = convert([template(securityGroupSelector={"aws::ids": "sg-0aa", "team": "x"})])

    assert class_of(docs)["spec"]["securityGroupSelectorTerms"] == [{"id": "sg-0aa"}]
    assert notes_at(notes, "spec.securityGroupSelector.team")[0].kind == "dropped"


def test_ami_selector_names_and_owners_become_one_term_per_pair() -> None:
    selector = {"aws::name": "eks-a,eks-b", "aws::owners": "amazon,123456789012"}
    docs, _ = convert([template(amiFamily="AL2", amiSelector=selector)])

    spec = class_of(docs)["spec"]
    assert spec["amiFamily"] == "AL2"
    assert spec["amiSelectorTerms"] == [
        {"name": "eks-a", "owner": "amazon"},
        {"name": "eks-b", "owner": "amazon"},
        {"name": "eks-a", "owner": "123456789012"},
        {"name": "eks-b", "owner": "123456789012"},
    ]


def test_ami_selector_ids_and_tags() -> None:
    by_id, _ = convert([template(amiFamily="Custom", amiSelector={"aws::ids": "ami-0aa,ami-0bb"})])
    by_tag, _ = convert([template(amiFamily="Bottlerocket", amiSelector={"team": "platform"})])

    assert class_of(by_id)["spec"]["amiSelectorTerms"] == [{"id": "ami-0aa"}, {"id": "ami-0bb"}]
    assert class_of(by_tag)["spec"]["amiSelectorTerms"] == [{"tags": {"team": "platform"}}]


def test_ami_owner_alone_cannot_be_expressed() -> None:
    with pytest.raises(ConversionError, match=r"aws::owners.*cannot express"):
        convert([template(amiSelector={"aws::owners": "amazon"})])


@pytest.mark.parametrize(
    ("family", "alias", "advice"),
    [("AL2023", "al2023@latest", "pin a version"), ("Windows2022", "windows2022@latest", "only support @latest")],
)
def test_family_without_ami_selector_becomes_an_alias(family: str, alias: str, advice: str) -> None:
    docs, notes = convert([template(amiFamily=family)])

    spec = class_of(docs)["spec"]
    assert spec["amiSelectorTerms"] == [{"alias": alias}]
    assert "amiFamily" not in spec
    [note] = notes_at(notes, "spec.amiFamily")
    assert note.kind == "action"
    assert advice in note.message


def test_unset_v1alpha1_family_is_al2_as_karpenter_v0_31_defaulted() -> None:
    docs, notes = convert([template()])

    assert class_of(docs)["spec"]["amiSelectorTerms"] == [{"alias": "al2@latest"}]
    assert any("defaulted it to AL2" in n.message for n in notes_at(notes, "spec.amiFamily"))


def test_ubuntu_becomes_al2_with_its_terms_and_root_volume() -> None:
    docs, _ = convert([beta_class(amiFamily="Ubuntu", amiSelectorTerms=[{"id": "ami-0ubuntu"}])])

    spec = class_of(docs)["spec"]
    assert (spec["amiFamily"], spec["amiSelectorTerms"]) == ("AL2", [{"id": "ami-0ubuntu"}])
    assert spec["blockDeviceMappings"][0]["deviceName"] == "/dev/sda1"


@pytest.mark.parametrize("family", ["Ubuntu", "Custom"])
def test_family_that_needs_ami_terms_without_them_is_bad_input(family: str) -> None:
    with pytest.raises(ConversionError, match=r"EC2NodeClass/default: spec.amiFamily"):
        convert([beta_class(amiFamily=family)])


def test_instance_profile_is_kept_and_a_missing_one_needs_the_default() -> None:
    kept, _ = convert([template()])
    assert class_of(kept)["spec"]["instanceProfile"] == "KarpenterNodeInstanceProfile-prod"

    bare = template()
    del bare["spec"]["instanceProfile"]
    with pytest.raises(ConversionError, match="default-instance-profile"):
        convert([bare])
    result = convert_documents([InputDocument(body=bare)], default_instance_profile="NodeProfile")
    assert result.documents[0].body["spec"]["instanceProfile"] == "NodeProfile"


def test_v1beta1_role_is_kept() -> None:
    docs, _ = convert([beta_class()])

    assert class_of(docs)["spec"]["role"] == "KarpenterNodeRole-prod"
    assert "instanceProfile" not in class_of(docs)["spec"]


def test_launch_fields_are_carried_over() -> None:
    bdm = {
        "deviceName": "/dev/xvda",
        "virtualName": "ephemeral0",
        "ebs": {"volumeSize": "100Gi", "volumeType": "gp3", "encrypted": True, "iops": 3000},
    }
    docs, notes = convert(
        [
            template(
                userData="#!/bin/bash\necho hi\n",
                tags={"team": "platform", "kubernetes.io/cluster/prod": "owned", "karpenter.sh/managed-by": "prod"},
                blockDeviceMappings=[bdm],
                detailedMonitoring=True,
                associatePublicIpAddress=False,
                context="c-123",
            )
        ]
    )

    spec = class_of(docs)["spec"]
    assert spec["userData"] == "#!/bin/bash\necho hi\n"
    assert spec["tags"] == {"team": "platform"}
    assert spec["blockDeviceMappings"] == [{"deviceName": "/dev/xvda", "ebs": bdm["ebs"]}]
    assert (spec["detailedMonitoring"], spec["associatePublicIPAddress"], spec["context"]) == (True, False, "c-123")
    dropped = {n.path for n in notes if n.kind == "dropped"}
    assert 'spec.tags["kubernetes.io/cluster/prod"]' in dropped
    assert "spec.blockDeviceMappings[0].virtualName" in dropped


def test_metadata_options_keep_the_old_hop_limit() -> None:
    unset, _ = convert([template()])
    beta_partial, _ = convert([beta_class(metadataOptions={"httpTokens": "optional"})])
    legacy_partial, _ = convert([template(metadataOptions={"httpTokens": "required"})])

    assert class_of(unset)["spec"]["metadataOptions"]["httpPutResponseHopLimit"] == 2
    assert class_of(beta_partial)["spec"]["metadataOptions"] == {"httpTokens": "optional", "httpPutResponseHopLimit": 2}
    # v0.31 passed a partial block to EC2, whose hop limit default (1) is also v1's.
    assert class_of(legacy_partial)["spec"]["metadataOptions"] == {"httpTokens": "required"}


# --- annotations and other objects --------------------------------------------------------------


def test_opt_out_annotations_become_do_not_disrupt_on_pods_workloads_and_nodes() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "annotations": {"karpenter.sh/do-not-evict": "true"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"template": {"metadata": {"annotations": {"karpenter.sh/do-not-evict": "true"}}, "spec": {}}},
    }
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n", "annotations": {"karpenter.sh/do-not-consolidate": "true"}},
    }
    originals = copy.deepcopy([pod, deployment, node])
    docs, notes = convert([pod, deployment, node])

    assert docs[0]["metadata"]["annotations"] == {"karpenter.sh/do-not-disrupt": "true"}
    assert docs[1]["spec"]["template"]["metadata"]["annotations"] == {"karpenter.sh/do-not-disrupt": "true"}
    assert docs[2]["metadata"]["annotations"] == {"karpenter.sh/do-not-disrupt": "true"}
    assert [pod, deployment, node] == originals, "inputs must not be mutated"
    assert [n.kind for n in notes] == ["changed", "changed", "changed"]


def test_opt_out_annotation_that_was_not_true_is_dropped_and_an_existing_one_wins() -> None:
    annotations = {"karpenter.sh/do-not-evict": "false", "karpenter.sh/do-not-consolidate": "true"}
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "annotations": annotations}}
    kept = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "annotations": {"karpenter.sh/do-not-evict": "true", "karpenter.sh/do-not-disrupt": "5m"},
        },
    }
    docs, notes = convert([node, kept])

    assert docs[0]["metadata"]["annotations"] == {"karpenter.sh/do-not-disrupt": "true"}
    assert docs[1]["metadata"]["annotations"] == {"karpenter.sh/do-not-disrupt": "5m"}
    assert notes[0].kind == "dropped"


def test_provisioner_name_selectors_on_pods_are_renamed() -> None:
    affinity = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 1,
                    "preference": {
                        "matchExpressions": [
                            {"key": "karpenter.sh/provisioner-name", "operator": "In", "values": ["batch"]}
                        ]
                    },
                }
            ]
        }
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"nodeSelector": {"karpenter.sh/provisioner-name": "batch"}, "affinity": affinity},
    }
    docs, _ = convert([pod])

    spec = docs[0]["spec"]
    assert spec["nodeSelector"] == {"karpenter.sh/nodepool": "batch"}
    expr = spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["preference"]
    assert expr["matchExpressions"][0]["key"] == "karpenter.sh/nodepool"


def test_other_objects_pass_through_unchanged() -> None:
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c"},
        "data": {"karpenter.sh/do-not-evict": "true"},
    }
    docs, notes = convert([config_map])

    assert docs == [config_map]
    assert notes == []


def test_provisioner_node_annotations_are_renamed_in_the_template() -> None:
    docs, _ = convert([provisioner(annotations={"karpenter.sh/do-not-consolidate": "true"}), template()])

    assert pool_of(docs)["spec"]["template"]["metadata"]["annotations"] == {"karpenter.sh/do-not-disrupt": "true"}


def test_server_written_metadata_and_status_are_not_carried() -> None:
    pool = provisioner()
    pool["metadata"].update(
        uid="1234",
        resourceVersion="99",
        generation=3,
        annotations={"kubectl.kubernetes.io/last-applied-configuration": "{}", "karpenter.sh/provisioner-hash": "1"},
    )
    pool["status"] = {"resources": {"cpu": "4"}}
    docs, notes = convert([pool, template()])

    assert pool_of(docs)["metadata"] == {"name": "default"}
    assert not [n for n in notes if n.path.startswith(("metadata", "status"))]


# --- whole-input behaviour ----------------------------------------------------------------------


def test_machines_are_dropped_and_unknown_karpenter_kinds_refused() -> None:
    machine = {"apiVersion": "karpenter.sh/v1alpha5", "kind": "Machine", "metadata": {"name": "m"}}
    docs, notes = convert([machine])
    assert docs == []
    assert notes[0].kind == "dropped"

    with pytest.raises(ConversionError, match=r"unsupported Karpenter object karpenter\.sh/v1alpha4 Provisioner"):
        convert([{"apiVersion": "karpenter.sh/v1alpha4", "kind": "Provisioner", "metadata": {"name": "x"}}])


def test_lists_are_unpacked() -> None:
    docs, _ = convert([{"apiVersion": "v1", "kind": "List", "items": [provisioner(), template()]}])

    assert sorted(d["kind"] for d in docs) == ["EC2NodeClass", "NodePool"]


def test_duplicate_pool_names_are_refused() -> None:
    with pytest.raises(ConversionError, match="another Provisioner/NodePool"):
        convert([provisioner(), beta_pool(), template()])


def test_result_that_would_not_validate_names_the_object_and_field() -> None:
    bad = provisioner(taints=[{"key": "a", "effect": "Sometimes"}])
    with pytest.raises(ConversionError) as info:
        convert([bad, template()])

    message = str(info.value)
    assert "Provisioner/default" in message
    assert "spec.template.spec.taints[0].effect" in message
    assert "not valid v1" in message


def test_note_renders_with_source_object_label_and_path() -> None:
    note = Note("dropped", "Provisioner/legacy", "spec.provider.launchTemplate", "removed", "f.yaml#3")

    assert note.render() == "f.yaml#3 Provisioner/legacy: not carried over: spec.provider.launchTemplate: removed"


@pytest.mark.parametrize(
    "names", [["v1alpha5-provisioners.yaml", "v1alpha5-workloads.yaml"], ["v1beta1-nodepools.yaml"]]
)
def test_legacy_fixtures_convert_to_objects_the_v1_models_accept(names: list[str]) -> None:
    inputs = [
        InputDocument(body=doc, source=name, document=i + 1)
        for name in names
        for i, doc in enumerate(yaml.safe_load_all((LEGACY / name).read_text()))
        if doc
    ]
    result = convert_documents(inputs)

    karpenter = [d.body for d in result.documents if d.body["kind"] in ("NodePool", "EC2NodeClass")]
    assert karpenter
    for body in karpenter:
        model = NodePool if body["kind"] == "NodePool" else EC2NodeClass
        model.model_validate(body)
        assert body["apiVersion"] in ("karpenter.sh/v1", "karpenter.k8s.aws/v1")
    pool_refs = {d["spec"]["template"]["spec"]["nodeClassRef"]["name"] for d in karpenter if d["kind"] == "NodePool"}
    assert pool_refs <= {d["metadata"]["name"] for d in karpenter if d["kind"] == "EC2NodeClass"}
    assert all(n.source for n in result.notes)


_JUNK = st.sampled_from([None, 1, -3, True, "", "x", "1,2", [], {}, [1], {"a": 1}, ["a", None], {"": ""}])
_FIXTURE_GROUPS = [
    [d for d in yaml.safe_load_all((LEGACY / name).read_text()) if d]
    for name in ("v1alpha5-provisioners.yaml", "v1alpha5-workloads.yaml", "v1beta1-nodepools.yaml")
]


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    children: list[tuple[Any, ...]] = []
    if isinstance(node, dict):
        children = [p for k, v in node.items() for p in _paths(v, (*prefix, k))]
    elif isinstance(node, list):
        children = [p for i, v in enumerate(node) for p in _paths(v, (*prefix, i))]
    return [prefix, *children]


@settings(max_examples=200, deadline=None)
@given(group=st.sampled_from(_FIXTURE_GROUPS), data=st.data())
def test_malformed_documents_raise_only_conversion_errors(group: list[dict[str, Any]], data: st.DataObject) -> None:
    docs = copy.deepcopy(group)
    for _ in range(data.draw(st.integers(1, 3))):
        doc = data.draw(st.sampled_from(docs))
        path = data.draw(st.sampled_from([p for p in _paths(doc) if p]))
        parent: Any = doc
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = copy.deepcopy(data.draw(_JUNK))
    try:
        convert(docs)
    except ConversionError as exc:
        assert str(exc)
