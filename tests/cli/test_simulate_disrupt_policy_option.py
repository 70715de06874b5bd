"""`nodesmith simulate --disrupt --policy`: Karpenter's consolidation by default, the nodesmith policy on
request, anything else refused as bad input (exit 2)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "disruption"))

from simulate_disrupt_support import ON_DEMAND_POOL, simulate_disrupt_cli

BIG_NODE = """\
apiVersion: v1
kind: Node
metadata:
  name: big
  creationTimestamp: "2026-01-01T00:00:00Z"
  labels: {karpenter.sh/nodepool: default, node.kubernetes.io/instance-type: m5.8xlarge,
           topology.kubernetes.io/zone: us-east-1a, karpenter.sh/capacity-type: on-demand}
"""
POD = """\
---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
  ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: rs, uid: u1}}]
spec:
  nodeName: big
  containers: [{{name: c, image: nginx, resources: {{requests: {{cpu: "1", memory: 2Gi}}}}}}]
status: {{phase: Running}}
"""


def _run(tmp_path: Path, *extra: str) -> tuple[int, str]:
    path = tmp_path / "cluster.yaml"
    path.write_text(ON_DEMAND_POOL + BIG_NODE + POD.format(name="a") + POD.format(name="b"))
    result = simulate_disrupt_cli(path, *extra)
    return result.exit_code, result.stdout if result.exit_code == 0 else result.output


def test_policy_option_picks_the_consolidation_policy(tmp_path: Path) -> None:
    code, out = _run(tmp_path)
    assert code == 0, out
    karpenter = json.loads(out)["decisions"]
    assert karpenter and karpenter[0]["nodes"] == ["big"]
    assert not karpenter[0]["reason"].startswith("nodesmith policy")

    code, out = _run(tmp_path, "--policy", "nodesmith")
    assert code == 0, out
    ours = json.loads(out)["decisions"]
    assert ours and ours[0]["nodes"] == ["big"] and ours[0]["reason"].startswith("nodesmith policy")


def test_an_unknown_policy_is_bad_input(tmp_path: Path) -> None:
    code, out = _run(tmp_path, "--policy", "greedy")
    assert code == 2
    assert "--policy" in out
