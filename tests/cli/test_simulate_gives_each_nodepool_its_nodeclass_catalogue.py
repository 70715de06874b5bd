"""``nodesmith simulate`` computes instance types per EC2NodeClass (its kubelet maxPods here) and
schedules each NodePool from its own node class's, as Karpenter does; one catalogue per distinct
node class spec."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING

from nodesmith.cli import simulate

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    import pytest

    from nodesmith.core.api.ec2nodeclass import EC2NodeClass
    from nodesmith.core.model import InstanceType

NODECLASS = """\
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {{name: {name}}}
spec:
  role: KarpenterNodeRole-test
  amiSelectorTerms: [{{alias: al2023@latest}}]
  subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: test}}}}]
  securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: test}}}}]
  kubelet: {{maxPods: {max_pods}}}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {name}}}
spec:
  template:
    spec:
      requirements:
        - {{key: kubernetes.io/arch, operator: In, values: [amd64]}}
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: {nodeclass}}}
---
"""
PODS = """\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {pool}, namespace: default}}
spec:
  replicas: 6
  selector: {{matchLabels: {{app: {pool}}}}}
  template:
    metadata: {{labels: {{app: {pool}}}}}
    spec:
      nodeSelector: {{karpenter.sh/nodepool: {pool}}}
      containers: [{{name: c, image: busybox, resources: {{requests: {{cpu: 10m, memory: 16Mi}}}}}}]
---
"""


def test_nodepools_on_node_classes_with_different_max_pods_get_different_allocatable(
    write: Callable[[str, str], Path],
    small_catalogue: list[InstanceType],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    asked: list[str] = []

    def per_nodeclass(*, nodeclass: EC2NodeClass | None = None, **_: object) -> list[InstanceType]:
        assert nodeclass is not None and nodeclass.spec.kubelet is not None
        asked.append(nodeclass.name)
        pods = nodeclass.spec.kubelet.max_pods or 0
        return [replace(it, capacity={**it.capacity, "pods": pods}) for it in small_catalogue]

    monkeypatch.setattr(simulate, "load_catalogue", per_nodeclass)
    manifests = "".join(
        NODECLASS.format(name=name, nodeclass=name, max_pods=max_pods) + PODS.format(pool=name)
        for name, max_pods in (("dense", 110), ("sparse", 4), ("sparse-twin", 4))
    )
    path = write("pools.yaml", manifests)

    assert simulate.run_simulate(files=[path], output="json") == 0
    result = json.loads(capsys.readouterr().out)

    per_pool: dict[str, int] = {}
    for claim in result["nodeclaims"]:
        per_pool[claim["nodepool"]] = per_pool.get(claim["nodepool"], 0) + 1
    # maxPods 110 holds six pods on one node; maxPods 4 needs two nodes for six pods.
    assert per_pool == {"dense": 1, "sparse": 2, "sparse-twin": 2}
    # sparse-twin's spec equals sparse's: its catalogue is computed once.
    assert asked == ["dense", "sparse"]


def test_explain_loads_the_same_per_node_class_catalogues(
    write: Callable[[str, str], Path],
    small_catalogue: list[InstanceType],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from nodesmith.cli.explain import run_explain

    asked: list[str | None] = []

    def per_nodeclass(*, nodeclass: EC2NodeClass | None = None, **_: object) -> list[InstanceType]:
        asked.append(nodeclass.name if nodeclass is not None else None)
        return small_catalogue

    monkeypatch.setattr(simulate, "load_catalogue", per_nodeclass)
    manifests = "".join(
        NODECLASS.format(name=name, nodeclass=name, max_pods=max_pods) + PODS.format(pool=name)
        for name, max_pods in (("dense", 110), ("sparse", 4))
    )

    assert run_explain(pod="dense", files=[write("pools.yaml", manifests)], output="json") == 0
    assert asked == ["dense", "sparse"]
    assert json.loads(capsys.readouterr().out)["scheduled"] is True
