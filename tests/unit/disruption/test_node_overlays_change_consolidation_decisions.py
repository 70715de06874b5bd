"""``nodesmith simulate --disrupt`` prices nodes and replacements through the NodeOverlays of the snapshot, as
Karpenter's consolidation reads ``GetInstanceTypes(nodePool)`` with overlays applied."""

from __future__ import annotations

import json
import textwrap
from typing import TYPE_CHECKING

from simulate_disrupt_support import ON_DEMAND_POOL, simulate_disrupt

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

SNAPSHOT = (
    ON_DEMAND_POOL
    + """\
apiVersion: v1
kind: Node
metadata:
  name: big
  labels: {karpenter.sh/nodepool: default, node.kubernetes.io/instance-type: m5.2xlarge,
           topology.kubernetes.io/zone: us-east-1a, karpenter.sh/capacity-type: on-demand}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop, labels: {app: web}}
spec:
  nodeName: big
  containers: [{name: app, image: nginx, resources: {requests: {cpu: 500m, memory: 1Gi}}}]
"""
)

RESERVED_PRICE = """\
---
# The m5.2xlarge nodes are already paid for: nothing launched instead can be cheaper.
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {name: prepaid-m5}
spec:
  requirements: [{key: node.kubernetes.io/instance-type, operator: In, values: [m5.2xlarge]}]
  price: "0.001"
"""

OTHER_POOL = RESERVED_PRICE.replace(
    "[m5.2xlarge]}]", "[m5.2xlarge]}, {key: karpenter.sh/nodepool, operator: In, values: [other]}]"
)


def decide(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> dict[str, object]:
    path = tmp_path / "cluster.yaml"
    path.write_text(textwrap.dedent(text))
    code, out, _ = simulate_disrupt(capsys, path)
    assert code == 0
    body: dict[str, object] = json.loads(out)
    return body


def test_without_an_overlay_the_big_node_is_replaced_by_a_cheaper_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = decide(tmp_path, capsys, SNAPSHOT)
    decisions = body["decisions"]
    assert isinstance(decisions, list)
    assert [(d["method"], d["nodes"]) for d in decisions] == [("single-node-consolidation", ["big"])]
    assert decisions[0]["replacement"] is not None
    assert decisions[0]["replacement"]["instance_types"][0] != "m5.2xlarge"


def test_an_overlay_pricing_the_node_below_any_replacement_keeps_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = decide(tmp_path, capsys, SNAPSHOT + RESERVED_PRICE)
    assert body["decisions"] == []
    rejected = body["rejected"]
    assert isinstance(rejected, list) and any(r["node"] == "big" for r in rejected)


def test_an_overlay_for_another_nodepool_changes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = decide(tmp_path, capsys, SNAPSHOT + OTHER_POOL)
    decisions = body["decisions"]
    assert isinstance(decisions, list)
    assert [(d["method"], d["nodes"]) for d in decisions] == [("single-node-consolidation", ["big"])]
