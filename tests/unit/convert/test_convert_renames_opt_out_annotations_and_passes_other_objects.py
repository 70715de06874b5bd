"""Converting to v1 (``nodesmith.core.convert``): opt-out annotations and provisioner-name selectors are
renamed, other objects pass through, server-written metadata and status are dropped.

Each test feeds parsed manifests as users wrote them and checks the v1 result and the notes, as the
Karpenter upgrade guides (v1beta1 and v1 migration) and conversion webhooks describe the mapping.
"""

from __future__ import annotations

import copy

from convert_factories import pool_of, provisioner, template

from nodesmith.core.convert import convert


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
