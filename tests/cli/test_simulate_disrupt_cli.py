"""`nodesmith simulate --disrupt` through the command line: the empty node of a snapshot is removed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "disruption"))

from simulate_disrupt_support import ON_DEMAND_POOL, simulate_disrupt_cli

EMPTY_NODE = """\
apiVersion: v1
kind: Node
metadata:
  name: empty
  creationTimestamp: "2026-01-01T00:00:00Z"
  labels: {karpenter.sh/nodepool: default, node.kubernetes.io/instance-type: m5.xlarge,
           topology.kubernetes.io/zone: us-east-1a, karpenter.sh/capacity-type: on-demand}
"""

SNAPSHOT = ON_DEMAND_POOL + EMPTY_NODE
"""The NodePool ``default``, its EC2NodeClass and one empty on-demand m5.xlarge Node created 2026-01-01."""


def test_simulate_disrupt_prints_one_json_object_with_the_emptiness_decision(tmp_path: Path) -> None:
    # Given a snapshot with one empty node, judged long after consolidateAfter
    path = tmp_path / "cluster.yaml"
    path.write_text(SNAPSHOT)

    # When simulate --disrupt runs through the CLI
    result = simulate_disrupt_cli(path)

    # Then stdout is exactly one JSON object naming the empty node under the emptiness method
    assert result.exit_code == 0, result.output
    decisions = json.loads(result.stdout)["decisions"]
    assert [(d["method"], d["nodes"]) for d in decisions] == [("emptiness", ["empty"])]
    assert decisions[0]["replacement"] is None
    assert decisions[0]["savings_per_hour"] > 0
