"""What ``kubectl`` reads from the API emulator, over HTTP: Tables, OpenAPI v3, eviction discovery, CRD validation.

The requests are the ones ``kubectl -v=8`` shows (Accept headers, paths, query parameters); the
real ``kubectl`` driving the playground is in ``tests/cli/test_playground_with_kubectl.py``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any

import pytest

from nodesmith.sim.kube.tables import human_duration, jsonpath, wants_table

if TYPE_CHECKING:
    from nodesmith.sim.kube import KubeEmulator

TABLE = (
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
)


def call(
    kube: KubeEmulator, method: str, path: str, body: Any = None, *, accept: str = "application/json", ctype: str = ""
) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Accept": accept, "Content-Type": ctype or "application/json"}
    request = urllib.request.Request(kube.endpoint + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def nodeclaim(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "labels": {
                "node.kubernetes.io/instance-type": "m5.large",
                "karpenter.sh/capacity-type": "spot",
                "topology.kubernetes.io/zone": "us-east-1a",
                "karpenter.sh/nodepool": "default",
            },
        },
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
        },
    }


def test_kubectl_get_receives_nodeclaims_as_a_table_with_karpenters_printer_columns(kube: KubeEmulator) -> None:
    kube.store.create("nodeclaims.karpenter.sh", nodeclaim("default-abcde"))
    kube.store.mutate(
        "nodeclaims.karpenter.sh",
        "default-abcde",
        lambda o: o.update(
            status={
                "nodeName": "ip-10-0-1-5.ec2.internal",
                "providerID": "aws:///us-east-1a/i-0123",
                "conditions": [
                    {"type": "Drifted", "status": "False"},
                    {"type": "Ready", "status": "True"},
                ],
            }
        ),
    )

    code, doc = call(kube, "GET", "/apis/karpenter.sh/v1/nodeclaims?limit=500", accept=TABLE)

    assert code == 200
    assert doc["kind"] == "Table"
    names = [c["name"] for c in doc["columnDefinitions"]]
    assert names == [
        "Name",
        "Type",
        "Capacity",
        "Zone",
        "Node",
        "Ready",
        "Age",
        "ImageID",
        "ID",
        "NodePool",
        "NodeClass",
        "Drifted",
    ]
    assert [c["priority"] for c in doc["columnDefinitions"]][-5:] == [1] * 5
    (row,) = doc["rows"]
    cells = dict(zip(names, row["cells"], strict=True))
    assert cells["Type"] == "m5.large"
    assert cells["Capacity"] == "spot"
    assert cells["Node"] == "ip-10-0-1-5.ec2.internal"
    assert cells["Ready"] == "True"
    assert cells["Drifted"] == "False"
    assert cells["ID"] == "aws:///us-east-1a/i-0123"
    assert cells["ImageID"] is None
    assert row["object"]["kind"] == "PartialObjectMetadata"
    assert row["object"]["metadata"]["name"] == "default-abcde"


def test_a_plain_json_get_is_still_the_list(kube: KubeEmulator) -> None:
    kube.store.create("nodeclaims.karpenter.sh", nodeclaim("one"))
    _, doc = call(kube, "GET", "/apis/karpenter.sh/v1/nodeclaims")
    assert doc["kind"] == "NodeClaimList"
    assert [i["metadata"]["name"] for i in doc["items"]] == ["one"]


def test_pods_and_nodes_print_as_the_api_servers_printers_do(kube: KubeEmulator) -> None:
    kube.store.create(
        "nodes",
        {
            "metadata": {"name": "n1"},
            "spec": {"unschedulable": True},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"kubeletVersion": "v1.32.1"}},
        },
    )
    kube.store.create(
        "pods",
        {
            "metadata": {"name": "p"},
            "spec": {"nodeName": "n1", "containers": [{"name": "a"}, {"name": "b"}]},
            "status": {"phase": "Running", "containerStatuses": [{"ready": True, "restartCount": 2}, {"ready": False}]},
        },
        namespace="default",
    )

    _, nodes = call(kube, "GET", "/api/v1/nodes/n1", accept=TABLE)
    _, pods = call(kube, "GET", "/api/v1/namespaces/default/pods", accept=TABLE)

    node_cells = dict(zip([c["name"] for c in nodes["columnDefinitions"]], nodes["rows"][0]["cells"], strict=True))
    assert node_cells["Status"] == "Ready,SchedulingDisabled"
    assert node_cells["Version"] == "v1.32.1"
    pod_cells = dict(zip([c["name"] for c in pods["columnDefinitions"]], pods["rows"][0]["cells"], strict=True))
    assert (pod_cells["Ready"], pod_cells["Status"], pod_cells["Restarts"], pod_cells["Node"]) == (
        "1/2",
        "Running",
        2,
        "n1",
    )


def test_a_watch_asked_for_tables_streams_one_row_tables(kube: KubeEmulator) -> None:
    kube.store.create("nodeclaims.karpenter.sh", nodeclaim("watched"))
    request = urllib.request.Request(
        kube.endpoint + "/apis/karpenter.sh/v1/nodeclaims?watch=true&resourceVersion=0&timeoutSeconds=1",
        headers={"Accept": TABLE},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        events = [json.loads(line) for line in response.read().splitlines() if line.strip()]

    assert [e["type"] for e in events] == ["ADDED"]
    table = events[0]["object"]
    assert table["kind"] == "Table"
    assert table["rows"][0]["cells"][0] == "watched"
    assert table["columnDefinitions"][1]["name"] == "Type"


def test_openapi_v3_lets_kubectl_leave_validation_to_the_server(kube: KubeEmulator) -> None:
    code, index = call(kube, "GET", "/openapi/v3")
    assert code == 200
    assert "apis/karpenter.sh/v1" in index["paths"]
    assert "api/v1" in index["paths"]

    code, doc = call(kube, "GET", index["paths"]["apis/karpenter.sh/v1"]["serverRelativeURL"])

    assert code == 200
    patch = doc["paths"]["/apis/karpenter.sh/v1/nodepools/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": "karpenter.sh", "version": "v1", "kind": "NodePool"}
    assert {"name": "fieldValidation", "in": "query"}.items() <= patch["parameters"][0].items()
    # no strategic merge patch offered: kubectl builds a JSON merge patch for a CRD
    assert "application/strategic-merge-patch+json" not in patch["requestBody"]["content"]
    schema = doc["components"]["schemas"]["sh.karpenter.v1.NodePool"]
    assert schema["x-kubernetes-group-version-kind"] == [{"group": "karpenter.sh", "version": "v1", "kind": "NodePool"}]
    spec_ref = schema["properties"]["spec"]["$ref"]
    assert spec_ref.removeprefix("#/components/schemas/") in doc["components"]["schemas"]
    assert call(kube, "GET", "/openapi/v3/apis/nosuch.io/v1")[0] == 404


def test_discovery_names_the_eviction_group_kubectl_drain_needs(kube: KubeEmulator) -> None:
    _, doc = call(kube, "GET", "/api/v1")
    eviction = next(r for r in doc["resources"] if r["name"] == "pods/eviction")
    assert (eviction["group"], eviction["version"], eviction["kind"]) == ("policy", "v1", "Eviction")
    _, karpenter = call(kube, "GET", "/apis/karpenter.k8s.aws/v1")
    (nodeclass,) = [r for r in karpenter["resources"] if r["name"] == "ec2nodeclasses"]
    assert nodeclass["shortNames"] == ["ec2nc", "ec2ncs"]
    assert nodeclass["categories"] == ["karpenter"]
    # kubectl get all expands the "all" category
    _, apps = call(kube, "GET", "/apis/apps/v1")
    in_all = {r["name"] for r in apps["resources"] if "all" in r.get("categories", [])}
    assert {"deployments", "replicasets", "daemonsets", "statefulsets"} <= in_all


def test_a_malformed_nodepool_is_rejected_whole_naming_the_field(kube: KubeEmulator) -> None:
    bad = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "typo"},
        "spec": {
            "template": {
                "spec": {
                    "requirments": [],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                }
            }
        },
    }
    code, status = call(kube, "POST", "/apis/karpenter.sh/v1/nodepools?fieldValidation=Strict", bad)

    assert code == 422
    assert status["reason"] == "Invalid"
    assert "spec.template.spec.requirments" in status["message"]
    # kubectl prints the causes, not the message
    assert "spec.template.spec.requirments" in [c["field"] for c in status["details"]["causes"]]
    assert kube.store.find("nodepools.karpenter.sh", "typo") is None


def test_a_merge_patch_that_breaks_a_nodepool_is_refused_and_leaves_it_as_it_was(kube: KubeEmulator) -> None:
    good = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "template": {
                "spec": {
                    "requirements": [],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                }
            }
        },
    }
    assert call(kube, "POST", "/apis/karpenter.sh/v1/nodepools", good)[0] == 201

    code, status = call(
        kube,
        "PATCH",
        "/apis/karpenter.sh/v1/nodepools/default",
        {"spec": {"disruption": {"consolidationPolicy": "Sometimes"}}},
        ctype="application/merge-patch+json",
    )

    assert code == 422
    assert "spec.disruption.consolidationPolicy" in status["message"]
    stored = kube.store.get("nodepools.karpenter.sh", "default")
    assert (stored["spec"].get("disruption") or {}).get("consolidationPolicy") != "Sometimes"


def test_table_helpers_follow_kubectls_rules() -> None:
    assert wants_table(TABLE)
    assert not wants_table("application/json")
    assert [human_duration(s) for s in (-5, 0, 119, 125, 3600, 9 * 3600, 3 * 86400 + 3600)] == [
        "<invalid>",
        "0s",
        "119s",
        "2m5s",
        "60m",
        "9h",
        "3d1h",
    ]
    conditions = {"status": {"conditions": [{"type": "A", "status": "x"}, {"type": "Ready", "status": "True"}]}}
    assert jsonpath(conditions, '.status.conditions[?(@.type=="Ready")].status') == ["True"]
    assert jsonpath({"metadata": {"labels": {"a.b/c": "v"}}}, r".metadata.labels.a\.b/c") == ["v"]
    with pytest.raises(ValueError, match="unsupported jsonPath"):
        jsonpath({}, ".a[0]")


APPLY = "application/apply-patch+yaml"


def test_server_side_apply_creates_then_prunes_what_the_manager_stopped_sending(kube: KubeEmulator) -> None:
    path = "/api/v1/namespaces/default/configmaps/settings?fieldManager=kubectl&fieldValidation=Strict&force=false"
    first = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings", "labels": {"team": "a"}},
        "data": {"a": "1", "b": "2"},
    }
    code, created = call(kube, "PATCH", path, first, ctype=APPLY)
    assert code == 201
    assert created["data"] == {"a": "1", "b": "2"}
    # another writer's field is not the applier's to remove
    kube.store.mutate("configmaps", "settings", lambda o: o["data"].update(c="3"), namespace="default")

    code, applied = call(kube, "PATCH", path, {**first, "data": {"a": "10"}}, ctype=APPLY)

    assert code == 200
    assert applied["data"] == {"a": "10", "c": "3"}
    assert applied["metadata"]["labels"] == {"team": "a"}
    (entry,) = applied["metadata"]["managedFields"]
    assert (entry["manager"], entry["operation"]) == ("kubectl", "Apply")
    assert entry["fieldsV1"]["f:data"] == {"f:a": {}}


def test_server_side_apply_needs_a_field_manager_and_a_valid_karpenter_object(kube: KubeEmulator) -> None:
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {}}
    code, _ = call(kube, "PATCH", "/api/v1/namespaces/default/configmaps/x", config, ctype=APPLY)
    assert code == 422

    pool = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "p"},
        "spec": {"template": {"spec": {"requirements": [], "nodeClassRef": {"name": "x"}}}},
    }
    code, status = call(kube, "PATCH", "/apis/karpenter.sh/v1/nodepools/p?fieldManager=kubectl", pool, ctype=APPLY)
    assert code == 422
    assert "spec.template.spec.nodeClassRef" in status["message"]
    assert kube.store.find("nodepools.karpenter.sh", "p") is None


def _static_nodepool(name: str, replicas: int, **spec: Any) -> dict[str, Any]:
    ref = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
    template = {"spec": {"requirements": [], "nodeClassRef": ref}}
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "template": template, **spec},
    }


def test_nodepools_serve_the_scale_subresource_as_karpenters_crd_declares_it(kube: KubeEmulator) -> None:
    _, doc = call(kube, "GET", "/apis/karpenter.sh/v1")
    scale = next(r for r in doc["resources"] if r["name"] == "nodepools/scale")
    assert (scale["group"], scale["version"], scale["kind"]) == ("autoscaling", "v1", "Scale")
    assert sorted(scale["verbs"]) == ["get", "patch", "update"]
    kube.store.create("nodepools.karpenter.sh", _static_nodepool("static", 2))
    kube.store.mutate("nodepools.karpenter.sh", "static", lambda o: o.update(status={"nodes": 1}))
    path = "/apis/karpenter.sh/v1/nodepools/static/scale"

    code, got = call(kube, "GET", path)
    assert code == 200
    assert (got["kind"], got["spec"], got["status"]) == ("Scale", {"replicas": 2}, {"replicas": 1})

    stale = {**got, "metadata": {**got["metadata"], "resourceVersion": "1"}, "spec": {"replicas": 4}}
    assert call(kube, "PUT", path, stale)[0] == 409
    code, put = call(kube, "PUT", path, {**got, "spec": {"replicas": 4}})
    assert (code, put["spec"]) == (200, {"replicas": 4})
    assert kube.store.get("nodepools.karpenter.sh", "static")["spec"]["replicas"] == 4
    code, status = call(kube, "PATCH", path, {"spec": {"replicas": -1}}, ctype="application/merge-patch+json")
    assert code == 422
    assert "spec.replicas" in status["message"]


def test_scaling_a_static_nodepool_that_sets_a_weight_is_refused_whole(kube: KubeEmulator) -> None:
    pool = _static_nodepool("weighted", 1)
    kube.store.create("nodepools.karpenter.sh", pool)  # in-process writes are not validated, as a controller's
    kube.store.mutate("nodepools.karpenter.sh", "weighted", lambda o: o["spec"].update(weight=10))

    code, status = call(
        kube, "PATCH", "/apis/karpenter.sh/v1/nodepools/weighted/scale", {"spec": {"replicas": 3}},
        ctype="application/merge-patch+json",
    )  # fmt: skip

    assert code == 422
    assert "'weight' is not supported on static NodePools" in status["message"]
    assert kube.store.get("nodepools.karpenter.sh", "weighted")["spec"]["replicas"] == 1
