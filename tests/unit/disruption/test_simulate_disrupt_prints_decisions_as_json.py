"""``nodesmith simulate --disrupt`` (``run_simulate_disrupt``): a cluster snapshot in, exactly one
JSON object of decisions out; bad input exits 2."""

from __future__ import annotations

import json
import textwrap
from typing import TYPE_CHECKING

import pytest
from simulate_disrupt_support import ON_DEMAND_POOL, simulate_disrupt

if TYPE_CHECKING:
    from pathlib import Path

SNAPSHOT = (
    ON_DEMAND_POOL
    + """\
apiVersion: v1
kind: Node
metadata:
  name: empty
  labels: {karpenter.sh/nodepool: default, node.kubernetes.io/instance-type: m5.xlarge,
           topology.kubernetes.io/zone: us-east-1a, karpenter.sh/capacity-type: on-demand}
---
apiVersion: v1
kind: Node
metadata:
  name: idle
  labels: {karpenter.sh/nodepool: default, node.kubernetes.io/instance-type: m5.2xlarge,
           topology.kubernetes.io/zone: us-east-1a, karpenter.sh/capacity-type: on-demand}
---
apiVersion: v1
kind: Node
metadata:
  name: guarded
  labels: {karpenter.sh/nodepool: default, node.kubernetes.io/instance-type: m5.2xlarge,
           topology.kubernetes.io/zone: us-east-1b, karpenter.sh/capacity-type: on-demand}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop, labels: {app: web}}
spec:
  nodeName: idle
  containers: [{name: app, image: nginx, resources: {requests: {cpu: 500m, memory: 1Gi}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: db, namespace: shop, labels: {app: db}}
spec:
  nodeName: guarded
  containers: [{name: app, image: postgres, resources: {requests: {cpu: 500m, memory: 1Gi}}}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: db, namespace: shop}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: db}}
"""
)


@pytest.fixture
def snapshot(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(textwrap.dedent(SNAPSHOT))
    return path


def test_snapshot_yields_emptiness_then_consolidation_and_explains_the_guarded_node(
    snapshot: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = simulate_disrupt(capsys, snapshot)
    assert code == 0
    body = json.loads(out)  # exactly one JSON object on stdout
    assert out.count("\n") == 1
    decisions = body["decisions"]
    assert [(d["method"], d["nodes"]) for d in decisions] == [
        ("emptiness", ["empty"]),
        ("single-node-consolidation", ["idle"]),
    ]
    assert decisions[0]["replacement"] is None and decisions[0]["savings_per_hour"] == pytest.approx(0.192)
    assert decisions[1]["replacement"] is None, "web fits on the guarded node, which stays"
    assert decisions[1]["savings_per_hour"] == pytest.approx(0.384)
    assert decisions[1]["pods"] == ["shop/web"]
    guarded = [r for r in body["rejected"] if r["node"] == "guarded"]
    assert guarded and "PodDisruptionBudget shop/db allows 0 disruptions" in guarded[0]["reason"]


def test_table_output_names_methods_and_savings(snapshot: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = simulate_disrupt(capsys, snapshot, output="table")
    assert code == 0
    assert "1. emptiness: empty" in out and "2. single-node-consolidation: idle" in out
    assert "guarded: [all methods] PodDisruptionBudget shop/db allows 0 disruptions" in out


def test_invalid_manifest_exits_2_and_prints_nothing_on_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: x}\nspec: {template: {spec: {}}}\n")
    code, out, err = simulate_disrupt(capsys, bad)
    assert code == 2 and out == ""
    assert "bad.yaml" in err


def test_unknown_output_and_missing_file_exit_2(
    snapshot: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert simulate_disrupt(capsys, snapshot, output="yaml")[0] == 2
    assert simulate_disrupt(capsys, tmp_path / "nope.yaml")[0] == 2


def test_replacement_is_described_with_pool_types_capacity_type_zone_and_price(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = textwrap.dedent(SNAPSHOT).split("---\n")
    only_idle = tmp_path / "idle.yaml"
    only_idle.write_text("---\n".join(docs[i] for i in (0, 1, 3, 5)))  # pool, class, idle node, its pod
    code, out, _ = simulate_disrupt(capsys, only_idle)
    assert code == 0
    [decision] = json.loads(out)["decisions"]
    assert decision["method"] == "single-node-consolidation" and decision["nodes"] == ["idle"]
    replacement = decision["replacement"]
    assert set(replacement) == {"nodepool", "instance_types", "capacity_type", "zone", "price_per_hour"}
    assert replacement["nodepool"] == "default" and replacement["capacity_type"] == "on-demand"
    assert replacement["instance_types"][0] == "t3.medium" and "m5.2xlarge" not in replacement["instance_types"]
    assert replacement["price_per_hour"] == pytest.approx(0.0416)
    assert decision["savings_per_hour"] == pytest.approx(0.384 - 0.0416)


def test_now_may_be_given_as_rfc3339_to_replay_an_old_snapshot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = textwrap.dedent(SNAPSHOT).split("---\n")
    aged = docs[3].replace("  name: idle\n", "  name: idle\n  creationTimestamp: '2025-01-01T00:00:00Z'\n")
    path = tmp_path / "old.yaml"
    path.write_text("---\n".join([docs[0], docs[1], aged, docs[5]]))
    at_capture, out, _ = simulate_disrupt(capsys, path, now="2025-01-20T00:00:00Z")
    assert at_capture == 0 and all(d["method"] != "expiration" for d in json.loads(out)["decisions"])
    today, out, _ = simulate_disrupt(capsys, path, now="2025-03-01T00:00:00Z")
    assert today == 0 and json.loads(out)["decisions"][0]["method"] == "expiration", "720h after creation"
    assert simulate_disrupt(capsys, path, now="yesterday")[0] == 2
