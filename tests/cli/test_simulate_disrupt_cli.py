"""`nodesmith simulate --disrupt` through the command line: the empty node of a snapshot is removed."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from typer.testing import CliRunner

from nodesmith.cli.main import app

if TYPE_CHECKING:
    from pathlib import Path

SNAPSHOT = """\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  disruption:
    consolidateAfter: 30s
    budgets: [{nodes: "100%"}]
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
---
apiVersion: v1
kind: Node
metadata:
  name: empty
  creationTimestamp: "2026-01-01T00:00:00Z"
  labels: {karpenter.sh/nodepool: default, node.kubernetes.io/instance-type: m5.xlarge,
           topology.kubernetes.io/zone: us-east-1a, karpenter.sh/capacity-type: on-demand}
"""


def test_simulate_disrupt_prints_one_json_object_with_the_emptiness_decision(tmp_path: Path) -> None:
    # Given a snapshot with one empty node, judged long after consolidateAfter
    path = tmp_path / "cluster.yaml"
    path.write_text(SNAPSHOT)

    # When simulate --disrupt runs through the CLI
    result = CliRunner().invoke(
        app, ["simulate", "--disrupt", "-f", str(path), "-o", "json", "--now", "2026-01-02T00:00:00Z"]
    )

    # Then stdout is exactly one JSON object naming the empty node under the emptiness method
    assert result.exit_code == 0, result.output
    decisions = json.loads(result.stdout)["decisions"]
    assert [(d["method"], d["nodes"]) for d in decisions] == [("emptiness", ["empty"])]
    assert decisions[0]["replacement"] is None
    assert decisions[0]["savings_per_hour"] > 0
