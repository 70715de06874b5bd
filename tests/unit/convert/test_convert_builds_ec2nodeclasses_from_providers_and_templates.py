"""Converting to v1 (``nodesmith.core.convert``): inline providers, AWSNodeTemplates and v1beta1
EC2NodeClasses become v1 EC2NodeClasses (selector terms, AMIs, instance profile, launch fields).

Each test feeds parsed manifests as users wrote them and checks the v1 result and the notes, as the
Karpenter upgrade guides (v1beta1 and v1 migration) and conversion webhooks describe the mapping.
"""

from __future__ import annotations

from typing import Any

import pytest
from convert_factories import beta_class, class_of, notes_at, pool_of, provisioner, template

from nodesmith.core.convert import ConversionError, InputDocument, convert, convert_documents


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
