"""``nodesmith explain POD -f ...``: one pod's reasoning, NodePool by NodePool, as a table or JSON."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from cli_support import DEFAULT_NODECLASS, explain_pod

from nodesmith.cli.explain import run_explain

if TYPE_CHECKING:
    from nodesmith.core.model import InstanceType

MANIFESTS = (
    """\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: gpu}
spec:
  weight: 10
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements: []
      taints: [{key: nvidia.com/gpu, value: "true", effect: NoSchedule}]
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c]}
---
"""
    + DEFAULT_NODECLASS
    + """\
apiVersion: v1
kind: Pod
metadata: {name: pinned, namespace: shop}
spec:
  nodeSelector: {topology.kubernetes.io/zone: us-east-1a}
  containers: [{name: a, image: x, resources: {requests: {cpu: "6", memory: 1Gi}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: small, namespace: shop}
spec:
  containers: [{name: a, image: x, resources: {requests: {cpu: "1", memory: 1Gi}}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: nginx, resources: {requests: {cpu: 500m, memory: 512Mi}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: small, namespace: other}
spec:
  containers: [{name: a, image: x, resources: {requests: {cpu: "1"}}}]
"""
)

Write = Callable[[str, str], Path]


@pytest.fixture
def catalogue(small_catalogue: list[InstanceType]) -> list[InstanceType]:
    """The small catalogue, with c5.2xlarge offered only in us-east-1b."""
    from dataclasses import replace

    return [
        replace(it, offerings=tuple(o for o in it.offerings if o.zone == "us-east-1b"))
        if it.name == "c5.2xlarge"
        else it
        for it in small_catalogue
    ]


def explain(
    capsys: pytest.CaptureFixture[str], write: Write, catalogue: list[InstanceType], pod: str, *extra: str
) -> tuple[int, str, str]:
    output = "json" if "json" in extra else "table"
    return explain_pod(capsys, write("all.yaml", MANIFESTS), catalogue, pod, output=output)


def test_an_unschedulable_pod_gets_one_row_per_nodepool_with_funnel_and_hint(
    capsys: pytest.CaptureFixture[str], write: Write, catalogue: list[InstanceType]
) -> None:
    code, out, _ = explain(capsys, write, catalogue, "shop/pinned")
    assert code == 0
    assert "Unschedulable" in out
    for text in ("NodePool", "verdict", "first blocking constraint", "details"):
        assert text in out
    flat = " ".join(out.split())
    assert "gpu │ rejected │ nvidia.com/gpu=true:NoSchedule" in flat
    assert "default │ rejected │ 6 cpu allocatable" in flat
    assert "hint: 1 type would fit in us-east-1b" in flat
    assert flat.endswith(
        'Event message: nodepool "gpu": pod does not tolerate taint nvidia.com/gpu=true:NoSchedule; nodepool '
        '"default": no instance type in zone us-east-1a has 6 cpu allocatable (largest allows 3.92); 1 type would '
        "fit in us-east-1b"
    )
    code, out, _ = explain(capsys, write, catalogue, "shop/pinned", "json")
    (_, default) = json.loads(out)["pools"]
    assert [(s["constraint"], s["remaining"]) for s in default["funnel"]] == [
        ("instance types the NodePool allows", 3),
        ("an available offering in zone us-east-1a", 2),
        ("6 cpu allocatable", 0),
    ]
    assert default["numbers"] == {"needs": "6 cpu", "largest free": "3.92"}


def test_a_scheduled_pod_says_where_it_goes_and_why_the_others_did_not_take_it(
    capsys: pytest.CaptureFixture[str], write: Write, catalogue: list[InstanceType]
) -> None:
    code, out, _ = explain(capsys, write, catalogue, "shop/small", "json")
    assert code == 0
    data = json.loads(out)
    assert data["scheduled"] is True
    assert data["placement"].startswith("new NodeClaim of nodepool default")
    assert [(p["nodepool"], p["verdict"], p["stage"]) for p in data["pools"]] == [
        ("gpu", "rejected", "taints"),
        ("default", "chosen", "fits"),
    ]
    assert data["requests"]["cpu"] == 1000


def test_a_workload_name_explains_its_first_replica(
    capsys: pytest.CaptureFixture[str], write: Write, catalogue: list[InstanceType]
) -> None:
    code, out, err = explain(capsys, write, catalogue, "web")
    assert code == 0
    assert "web is not a pod; explaining shop/web-" in err
    assert "Goes to" in out


def test_unknown_or_ambiguous_pods_are_bad_input(
    capsys: pytest.CaptureFixture[str], write: Write, catalogue: list[InstanceType]
) -> None:
    code, out, err = explain(capsys, write, catalogue, "nope")
    assert (code, out) == (2, "")
    assert "no pod 'nope' in the manifests" in err
    code, _, err = explain(capsys, write, catalogue, "small")
    assert code == 2 and "ambiguous (other/small, shop/small): give namespace/name" in err
    path = write("x.yaml", MANIFESTS)
    assert run_explain(pod="shop/small", files=[path], instance_types=catalogue, packing="cheapest") == 2
    assert "--packing must be one of nodesmith, karpenter" in capsys.readouterr().err
