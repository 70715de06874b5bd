"""``nodesmith simulate`` reads PersistentVolumeClaims, PersistentVolumes and StorageClasses from the
manifests and pins each pod's NodeClaim to the zone its storage lives in."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from cli_support import DEFAULT_NODECLASS

from nodesmith.cli.simulate import run_simulate
from nodesmith.cli.simulate_catalogue import CatalogueSource

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    import pytest

    from nodesmith.core.model import InstanceType

MANIFESTS = (
    """\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements: []
---
"""
    + DEFAULT_NODECLASS
    + """\
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: gp3-b}
provisioner: ebs.csi.aws.com
volumeBindingMode: WaitForFirstConsumer
allowedTopologies:
  - matchLabelExpressions: [{key: topology.kubernetes.io/zone, values: [us-east-1b]}]
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: pv-data}
spec:
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteOnce]
  csi: {driver: ebs.csi.aws.com, volumeHandle: vol-0123}
  nodeAffinity:
    required:
      nodeSelectorTerms:
        - matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [us-east-1a]}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: db}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: gp3-b
  volumeName: pv-data
  resources: {requests: {storage: 10Gi}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: scratch, namespace: db}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: gp3-b
  resources: {requests: {storage: 10Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: bound, namespace: db}
spec:
  containers: [{name: a, image: x, resources: {requests: {cpu: "1"}}}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
---
apiVersion: v1
kind: Pod
metadata: {name: unbound, namespace: db}
spec:
  containers: [{name: a, image: x, resources: {requests: {cpu: "1"}}}]
  volumes: [{name: scratch, persistentVolumeClaim: {claimName: scratch}}]
---
apiVersion: v1
kind: Pod
metadata: {name: orphan, namespace: db}
spec:
  containers: [{name: a, image: x, resources: {requests: {cpu: "1"}}}]
  volumes: [{name: gone, persistentVolumeClaim: {claimName: gone}}]
"""
)


def test_each_pod_goes_to_the_zone_of_its_volume_or_storage_class(
    write: Callable[[str, str], Path],
    small_catalogue: list[InstanceType],
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = write("all.yaml", MANIFESTS)
    assert run_simulate(files=[path], output="json", source=CatalogueSource(instance_types=small_catalogue)) == 0
    out = json.loads(capsys.readouterr().out)
    zone_of = {pod: nc["zone"] for nc in out["nodeclaims"] for pod in nc["pods"]}
    assert zone_of["db/bound"] == "us-east-1a"  # the bound volume's node affinity wins over its class
    assert zone_of["db/unbound"] == "us-east-1b"  # the StorageClass's allowed topology
    assert "db/orphan" in zone_of  # claim not in the manifests: scheduled without topology, with a warning
    assert "pod db/orphan: PersistentVolumeClaim db/gone not found" in caplog.text
