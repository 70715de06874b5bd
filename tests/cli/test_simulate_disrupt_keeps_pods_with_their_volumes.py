"""``nodesmith simulate --disrupt`` reads the snapshot's storage objects: a node whose pod's claim is
bound to a volume in its zone is not consolidated onto a node in another zone."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from nodesmith.cli.disrupt import run_simulate_disrupt
from nodesmith.cli.simulate_catalogue import CatalogueSource

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    import pytest

    from nodesmith.core.model import InstanceType

SNAPSHOT = """\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: default}}
spec:
  template:
    spec:
      requirements:
        - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
        - {{key: kubernetes.io/arch, operator: In, values: [amd64]}}
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
  disruption:
    consolidateAfter: 30s
    budgets: [{{nodes: "100%"}}]
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {{name: default}}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{{alias: al2023@latest}}]
  subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: demo}}}}]
  securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: demo}}}}]
---
{nodes}
apiVersion: v1
kind: Pod
metadata:
  name: anchor-db
  namespace: default
  annotations: {{karpenter.sh/do-not-disrupt: "true"}}
spec:
  nodeName: anchor
  containers: [{{name: c, image: db, resources: {{requests: {{cpu: "1", memory: 1Gi}}}}}}]
status: {{phase: Running}}
---
apiVersion: v1
kind: Pod
metadata:
  name: db
  namespace: default
  ownerReferences: [{{apiVersion: apps/v1, kind: StatefulSet, name: db, uid: u, controller: true}}]
spec:
  nodeName: n1
  containers: [{{name: c, image: db, resources: {{requests: {{cpu: 500m, memory: 512Mi}}}}}}]
  volumes: [{{name: data, persistentVolumeClaim: {{claimName: data-db}}}}]
status: {{phase: Running}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: data-db, namespace: default}}
spec: {{storageClassName: gp3, volumeName: pv-db}}
---
apiVersion: v1
kind: PersistentVolume
metadata: {{name: pv-db}}
spec:
  capacity: {{storage: 10Gi}}
  nodeAffinity:
    required:
      nodeSelectorTerms:
        - matchExpressions: [{{key: topology.kubernetes.io/zone, operator: In, values: [{volume_zone}]}}]
"""
NODE = """\
apiVersion: v1
kind: Node
metadata:
  name: {name}
  creationTimestamp: "2026-01-01T00:00:00Z"
  labels: {{karpenter.sh/nodepool: default, node.kubernetes.io/instance-type: m5.xlarge,
           topology.kubernetes.io/zone: {zone}, karpenter.sh/capacity-type: on-demand,
           karpenter.sh/initialized: "true"}}
status:
  allocatable: {{cpu: "4", memory: 15Gi, pods: "58"}}
  capacity: {{cpu: "4", memory: 16Gi, pods: "58"}}
---
"""


def _decide(
    write: Callable[[str, str], Path], types: list[InstanceType], capsys: pytest.CaptureFixture[str], zone: str
) -> list[dict[str, object]]:
    nodes = NODE.format(name="anchor", zone="us-east-1a") + NODE.format(name="n1", zone="us-east-1b")
    path = write("cluster.yaml", SNAPSHOT.format(nodes=nodes, volume_zone=zone))
    code = run_simulate_disrupt(files=[path], now="2026-01-02T00:00:00Z", source=CatalogueSource(instance_types=types))
    assert code == 0
    return json.loads(capsys.readouterr().out)["decisions"]


def test_a_pod_with_a_zonal_volume_is_not_moved_to_another_zone(
    write: Callable[[str, str], Path], small_catalogue: list[InstanceType], capsys: pytest.CaptureFixture[str]
) -> None:
    # A volume in us-east-1a lets the pod move onto the anchor in us-east-1a: n1 is deleted.
    free = _decide(write, small_catalogue, capsys, "us-east-1a")
    assert [(d["nodes"], d["replacement"]) for d in free] == [(["n1"], None)]
    # Its volume in us-east-1b keeps it there: n1 is replaced by a cheaper node in us-east-1b instead.
    pinned = _decide(write, small_catalogue, capsys, "us-east-1b")
    assert [(d["nodes"], (d["replacement"] or {}).get("zone")) for d in pinned] == [(["n1"], "us-east-1b")]
