"""Manifests load into a bundle; workloads expand into the pods their controllers would create;
an invalid document rejects its file with an error naming file, document, object, field and reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nodesmith.adapters.manifests import load_manifest_text, load_manifests
from nodesmith.core.errors import ManifestError

MANIFESTS = Path(__file__).resolve().parents[1] / "manifests"

NODEPOOL_TYPO = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: ignored}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      requirments:
        - key: kubernetes.io/arch
          operator: In
          values: [amd64]
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_sample_nodepools_and_nodeclass_load_with_defaults() -> None:
    bundle = load_manifests([MANIFESTS / "default-nodepool.yaml"])

    default, burst = bundle.nodepools
    assert default.name == "default" and burst.name == "burst-arm"
    assert default.spec.disruption.consolidate_after == "1m"
    assert default.limits_core() == {"cpu": 1_000_000, "memory": 1000 * 2**30}
    assert [b.nodes for b in default.spec.disruption.budgets] == ["10%"]
    assert burst.expire_after_seconds() is None
    assert burst.termination_grace_period_seconds() == 5400
    assert burst.spec.weight == 10
    [nodeclass] = bundle.ec2nodeclasses
    assert nodeclass.ami_family == "AL2023"
    assert nodeclass.spec.subnet_selector_terms[0].tags == {"karpenter.sh/discovery": "nodesmith-demo"}
    assert bundle.pods == [] and bundle.ignored == []


def test_workloads_expand_into_pending_pods() -> None:
    bundle = load_manifests([MANIFESTS / "workloads.yaml"])
    by_owner: dict[str | None, list[str]] = {}
    for pod in bundle.pods:
        by_owner.setdefault(pod.owner_kind, []).append(pod.name)

    assert len(by_owner["ReplicaSet"]) == 5
    assert all(n.startswith("inflate-") and len(n.split("-")) == 3 for n in by_owner["ReplicaSet"])
    assert len(set(by_owner["ReplicaSet"])) == 5
    assert by_owner["StatefulSet"] == ["db-0", "db-1", "db-2"]
    assert len(by_owner["Job"]) == 2  # min(parallelism 4, completions 2)
    assert by_owner[None] == ["debug"]
    assert all(p.unschedulable and p.phase == "Pending" and p.node_name is None for p in bundle.pods)
    assert all(p.namespace == "shop" for p in bundle.pods)
    assert len({p.uid for p in bundle.pods}) == len(bundle.pods)


def test_expanded_pods_keep_template_details() -> None:
    bundle = load_manifests([MANIFESTS / "workloads.yaml"])
    pods = {p.name: p for p in bundle.pods}

    db1 = pods["db-1"]
    assert db1.pvc_names == ("data-db-1",)
    assert db1.labels["app"] == "db" and db1.labels["statefulset.kubernetes.io/pod-name"] == "db-1"
    assert db1.pod_anti_affinity[0].topology_key == "kubernetes.io/hostname"
    inflate = next(p for p in bundle.pods if p.owner_kind == "ReplicaSet")
    assert inflate.requests == {"cpu": 1000, "memory": 1536 * 2**20, "pods": 1}
    assert inflate.owner_name is not None
    assert inflate.labels["pod-template-hash"] == inflate.owner_name.rsplit("-", 1)[1]
    assert pods["debug"].requests == {"cpu": 100, "memory": 64 * 2**20, "pods": 1}  # requests from limits
    job = next(p for p in bundle.pods if p.owner_kind == "Job")
    assert job.node_selector == {"karpenter.sh/capacity-type": "spot"}


def test_other_kinds_are_grouped_or_ignored() -> None:
    bundle = load_manifests([MANIFESTS / "workloads.yaml"])

    [ds] = bundle.daemonsets
    assert (ds.namespace, ds.name, ds.pod.requests["cpu"]) == ("monitoring", "node-exporter", 50)
    [pdb] = bundle.pdbs
    assert pdb.max_unavailable == 1
    assert bundle.ignored_kinds == ["ConfigMap", "Namespace"]
    assert {(d.kind, d.name) for d in bundle.ignored} == {("ConfigMap", "settings"), ("Namespace", "shop")}


def test_expansion_is_deterministic() -> None:
    first = load_manifests([MANIFESTS / "workloads.yaml"])
    second = load_manifests([MANIFESTS / "workloads.yaml"])

    assert [(p.name, p.uid) for p in first.pods] == [(p.name, p.uid) for p in second.pods]


def test_directory_loads_every_yaml_file_in_order() -> None:
    bundle = load_manifests([MANIFESTS])

    assert [n.name for n in bundle.nodepools] == ["default", "burst-arm"]
    assert len(bundle.pods) == 11


def test_typo_rejects_file_with_full_context(tmp_path: Path) -> None:
    path = write(tmp_path, "pool.yaml", NODEPOOL_TYPO)

    with pytest.raises(ManifestError) as exc:
        load_manifests([path])

    message = str(exc.value)
    assert message.startswith(f"{path}: document 2 (NodePool default): spec.template.spec.requirments: ")
    assert "unknown field (not in the CRD schema); did you mean 'requirements'?" in message
    assert (exc.value.path, exc.value.document, exc.value.field) == (str(path), 2, "spec.template.spec.requirments")


def test_bad_operator_is_reported_with_its_index() -> None:
    text = NODEPOOL_TYPO.replace("requirments", "requirements").replace("operator: In", "operator: Within")

    with pytest.raises(ManifestError) as exc:
        load_manifest_text(text, source="pool.yaml")

    assert exc.value.field == "spec.template.spec.requirements[0].operator"
    assert "document 2 (NodePool default)" in str(exc.value)


def test_bad_quantity_in_a_deployment_names_the_template_field(tmp_path: Path) -> None:
    text = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  template:
    spec:
      containers:
        - name: web
          resources:
            requests: {cpu: "2 cores"}
"""
    with pytest.raises(ManifestError) as exc:
        load_manifests([write(tmp_path, "web.yaml", text)])

    assert exc.value.field == "spec.template.spec.containers[0].resources.requests.cpu"
    assert "document 1 (Deployment web)" in str(exc.value)
    assert "'2 cores' is not a valid quantity" in str(exc.value)


def test_bad_quantity_in_nodepool_limits() -> None:
    text = NODEPOOL_TYPO.replace("requirments", "requirements") + "  limits: {cpu: plenty}\n"

    with pytest.raises(ManifestError) as exc:
        load_manifest_text(text, source="pool.yaml")

    assert exc.value.field == "spec.limits.cpu"
    assert "not a Kubernetes quantity" in str(exc.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("apiVersion: v1\nmetadata: {name: x}\n", "x.yaml: document 1: kind: is required"),
        ("kind: Pod\nmetadata: {name: x}\n", "x.yaml: document 1 (Pod x): apiVersion: is required"),
    ],
)
def test_document_without_kind_or_api_version_is_an_error(text: str, message: str) -> None:
    with pytest.raises(ManifestError) as exc:
        load_manifest_text("---\n" + text, source="x.yaml")

    assert str(exc.value) == message


def test_one_bad_document_rejects_the_whole_file(tmp_path: Path) -> None:
    good = (MANIFESTS / "default-nodepool.yaml").read_text(encoding="utf-8")
    path = write(tmp_path, "mixed.yaml", good + "---\napiVersion: v1\nkind: Pod\nmetadata: {}\n")

    with pytest.raises(ManifestError) as exc:
        load_manifests([path])

    assert exc.value.document == 4 and exc.value.field == "metadata.name"


def test_invalid_yaml_and_non_object_documents(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match=r"bad\.yaml: document 2: invalid YAML \(line"):
        load_manifest_text("kind: A\napiVersion: v1\n---\nkey: [unclosed\n", source="bad.yaml")
    with pytest.raises(ManifestError, match="document 1: expected an object"):
        load_manifest_text("- a\n- b\n", source="list.yaml")
    with pytest.raises(ManifestError, match="cannot read"):
        load_manifests([tmp_path / "missing.yaml"])


def test_empty_documents_are_skipped_but_counted() -> None:
    text = "---\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c}]}\n"
    bundle = load_manifest_text(text)

    assert [p.name for p in bundle.pods] == ["p"]

    with pytest.raises(ManifestError, match=r"<string>: document 2 \(Pod\): metadata\.name: expected a string"):
        load_manifest_text(text.replace("name: p", "name: 7"))


def test_list_documents_are_unpacked() -> None:
    text = """\
apiVersion: v1
kind: List
items:
  - apiVersion: v1
    kind: Node
    metadata: {name: n1}
    status: {allocatable: {cpu: "2"}}
  - apiVersion: v1
    kind: Pod
    metadata: {name: bound}
    spec: {nodeName: n1, containers: [{name: c}]}
"""
    bundle = load_manifest_text(text)

    assert [n.name for n in bundle.nodes] == ["n1"]
    [pod] = bundle.pods
    assert pod.node_name == "n1" and not pod.unschedulable and pod.phase == "Running"


def test_job_suspended_or_without_completions() -> None:
    text = """\
apiVersion: batch/v1
kind: Job
metadata: {name: a}
spec:
  parallelism: 3
  template: {spec: {containers: [{name: c}]}}
---
apiVersion: batch/v1
kind: Job
metadata: {name: b}
spec:
  suspend: true
  template: {spec: {containers: [{name: c}]}}
"""
    bundle = load_manifest_text(text)

    assert sorted({p.owner_name for p in bundle.pods}) == ["a"] and len(bundle.pods) == 3


def test_negative_replicas_are_rejected() -> None:
    text = "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: r}\nspec:\n  replicas: -1\n  template: {spec: {}}\n"

    with pytest.raises(ManifestError) as exc:
        load_manifest_text(text)

    assert exc.value.field == "spec.replicas"


def test_duplicate_objects_across_files_are_rejected(tmp_path: Path) -> None:
    pool = (MANIFESTS / "default-nodepool.yaml").read_text(encoding="utf-8")
    a = write(tmp_path, "a.yaml", pool)
    b = write(tmp_path, "b.yaml", pool)

    with pytest.raises(ManifestError, match="duplicate NodePool default"):
        load_manifests([a, b])
