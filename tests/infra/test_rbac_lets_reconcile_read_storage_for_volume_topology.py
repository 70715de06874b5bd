"""The shipped ClusterRole lets the Lambdas read what volume topology needs (KubeCluster.volume_context
lists PersistentVolumeClaims, PersistentVolumes and StorageClasses), and nothing more on them."""

from __future__ import annotations

from pathlib import Path

import yaml

ROLE = Path(__file__).resolve().parents[2] / "infra" / "rbac" / "nodesmith-clusterrole.yaml"


def test_claims_volumes_and_classes_are_listable_but_not_writable() -> None:
    role = next(d for d in yaml.safe_load_all(ROLE.read_text()) if d["kind"] == "ClusterRole")
    grants = {
        (g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]
    }
    storage = {("", "persistentvolumeclaims"), ("", "persistentvolumes"), ("storage.k8s.io", "storageclasses")}
    for group, resource in storage:
        assert (group, resource, "list") in grants
    assert not {(g, r, v) for g, r, v in grants if (g, r) in storage and v != "list"}
