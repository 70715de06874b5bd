"""``nodesmith explain`` with NodeOverlays: it names the overlays that priced the chosen type, those not applied,
and where the pod would have gone without them when they changed the decision."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from cli_support import DEFAULT_NODECLASS, explain_pod

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    import pytest

    from nodesmith.core.model import InstanceType

POOL = (
    """\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: kubernetes.io/arch, operator: In, values: [amd64]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
---
"""
    + DEFAULT_NODECLASS
    + """\
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop}
spec:
  containers: [{name: a, image: x, resources: {requests: {cpu: "3", memory: 1Gi}}}]
"""
)

C5_DEAL = """\
---
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {name: c5-deal}
spec:
  requirements: [{key: node.kubernetes.io/instance-type, operator: In, values: [c5.2xlarge]}]
  price: "0.05"
"""

M5_MARKUP = """\
---
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {name: m5-markup}
spec:
  requirements: [{key: karpenter.k8s.aws/instance-family, operator: In, values: [m5]}]
  priceAdjustment: "+10%"
"""


def explain(
    capsys: pytest.CaptureFixture[str], write: Callable[[str, str], Path], catalogue: list[InstanceType], text: str
) -> dict[str, object]:
    code, out, _ = explain_pod(capsys, write("all.yaml", text), catalogue, "shop/web", output="json")
    assert code == 0
    body: dict[str, object] = json.loads(out)
    return body


def test_an_overlay_that_changes_the_type_is_named_with_the_placement_without_it(
    capsys: pytest.CaptureFixture[str], write: Callable[[str, str], Path], small_catalogue: list[InstanceType]
) -> None:
    plain = explain(capsys, write, small_catalogue, POOL)
    assert "overlays" not in plain
    assert "c5.xlarge" in str(plain["placement"])

    body = explain(capsys, write, small_catalogue, POOL + C5_DEAL)
    assert "c5.2xlarge" in str(body["placement"]) and "0.0500 USD/hour" in str(body["placement"])
    notes = body["overlays"]
    assert isinstance(notes, list)
    assert "NodeOverlay c5-deal sets the price of c5.2xlarge in NodePool default" in notes
    changed = [n for n in notes if n.startswith("NodeOverlays changed this decision")]
    assert len(changed) == 1 and "c5.xlarge" in changed[0]


def test_an_overlay_that_leaves_the_decision_alone_is_not_said_to_change_it(
    capsys: pytest.CaptureFixture[str], write: Callable[[str, str], Path], small_catalogue: list[InstanceType]
) -> None:
    body = explain(capsys, write, small_catalogue, POOL + M5_MARKUP)
    assert "c5.xlarge" in str(body["placement"])
    assert body["overlays"] == []
