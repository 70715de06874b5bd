"""Converting to v1 (``nodesmith.core.convert``): Provisioner and v1beta1 NodePool fields land in the v1
NodePool (template, default requirements, nodeClassRef, minValues); unknown fields are noted.

Each test feeds parsed manifests as users wrote them and checks the v1 result and the notes, as the
Karpenter upgrade guides (v1beta1 and v1 migration) and conversion webhooks describe the mapping.
"""

from __future__ import annotations

from convert_factories import beta_class, beta_pool, notes_at, pool_of, provisioner, template

from nodesmith.core.convert import convert


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
