"""User data by AMI family: Bottlerocket's settings TOML as Karpenter's ``Bottlerocket.Script`` writes it, a Custom
AMI's ``userData`` passed as given, AL2023's nodeadm with RAID0 local storage, and the families without a
bootstrap refused."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest
import yaml

from nodesmith.adapters.aws.bootstrap import (
    NodeUserData,
    UnsupportedAmiFamilyError,
    node_user_data,
    render_bottlerocket_user_data,
)
from nodesmith.adapters.aws.launch_template import JoinCluster
from nodesmith.core.model import Taint

CLUSTER = JoinCluster(name="prod", endpoint="https://ABC.gr7.us-east-1.eks.amazonaws.com", ca="Y2EtYnVuZGxl", cidr="")


def bottlerocket(**fields: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"cluster": CLUSTER, **fields}
    return tomllib.loads(render_bottlerocket_user_data(NodeUserData(**args)))


def test_the_settings_join_the_cluster_with_the_nodeclaims_labels_and_taints() -> None:
    settings = bottlerocket(
        labels={"karpenter.sh/nodepool": "default", "team": "search", "kubernetes.io/arch": "amd64"},
        taints=(Taint(key="dedicated", value="search", effect="NoSchedule"), Taint(key="gpu", effect="NoExecute")),
    )["settings"]["kubernetes"]

    assert settings["cluster-name"] == "prod"
    assert settings["api-server"] == CLUSTER.endpoint
    assert settings["cluster-certificate"] == "Y2EtYnVuZGxl"
    # NodeRestriction refuses a kubelet that registers kubernetes.io labels; the kubelet sets arch itself
    assert settings["node-labels"] == {"karpenter.sh/nodepool": "default", "team": "search"}
    assert settings["node-taints"] == {"dedicated": ["search:NoSchedule"], "gpu": [":NoExecute"]}


def test_user_settings_are_kept_but_the_cluster_labels_and_taints_are_the_nodeclaims() -> None:
    custom = """
[settings.host-containers.admin]
enabled = true

[settings.kubernetes]
cluster-name = "someone-elses"
max-pods = 50
not-a-bottlerocket-setting = "dropped"

[settings.kubernetes.node-labels]
team = "from-user-data"
owner = "platform"

[settings.kubernetes.node-taints]
from-user-data = ["x:NoSchedule"]
"""
    settings = bottlerocket(custom_user_data=custom, labels={"team": "search"})["settings"]

    assert settings["host-containers"] == {"admin": {"enabled": True}}
    kubernetes = settings["kubernetes"]
    assert kubernetes["cluster-name"] == "prod"
    assert kubernetes["max-pods"] == 50
    assert "not-a-bottlerocket-setting" not in kubernetes
    assert kubernetes["node-labels"] == {"team": "search", "owner": "platform"}
    assert "node-taints" not in kubernetes  # Karpenter writes the NodeClaim's taints only


def test_the_kubelet_fields_bottlerocket_takes_are_written_in_its_names() -> None:
    kubelet = {
        "maxPods": 110,
        "podsPerCore": 4,
        "clusterDNS": ["10.100.0.10", "10.100.0.11"],
        "systemReserved": {"cpu": "100m", "memory": "100Mi"},
        "kubeReserved": {"cpu": "200m"},
        "evictionHard": {"memory.available": "5%"},
        "evictionSoft": {"memory.available": "10%"},
        "evictionSoftGracePeriod": {"memory.available": "1m"},
        "evictionMaxPodGracePeriod": 60,
        "imageGCHighThresholdPercent": 85,
        "imageGCLowThresholdPercent": 80,
        "cpuCFSQuota": False,
    }
    settings = bottlerocket(kubelet=kubelet)["settings"]["kubernetes"]

    assert {k: v for k, v in settings.items() if k not in ("cluster-name", "api-server", "cluster-certificate")} == {
        "max-pods": 110,
        "cluster-dns-ip": "10.100.0.10",
        "system-reserved": {"cpu": "100m", "memory": "100Mi"},
        "kube-reserved": {"cpu": "200m"},
        "eviction-hard": {"memory.available": "5%"},
        "eviction-soft": {"memory.available": "10%"},
        "eviction-soft-grace-period": {"memory.available": "1m"},
        "eviction-max-pod-grace-period": 60,
        "image-gc-high-threshold-percent": "85",
        "image-gc-low-threshold-percent": "80",
        "cpu-cfs-quota-enforced": False,
    }


def test_raid0_assembles_the_instance_store_before_the_kubelet_starts() -> None:
    settings = bottlerocket(instance_store_policy="RAID0")["settings"]
    command = settings["bootstrap-commands"]["000-mount-instance-storage"]
    assert command["commands"][0] == ["apiclient", "ephemeral-storage", "init"]
    assert command["commands"][1][:3] == ["apiclient", "ephemeral-storage", "bind"]
    assert (command["mode"], command["essential"]) == ("always", True)
    assert "bootstrap-commands" not in bottlerocket()["settings"]


def test_user_data_that_is_not_toml_is_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match="not Bottlerocket TOML"):
        render_bottlerocket_user_data(NodeUserData(cluster=CLUSTER, custom_user_data="#!/bin/bash\necho hi"))
    with pytest.raises(ValueError, match="TOML tables"):
        render_bottlerocket_user_data(NodeUserData(cluster=CLUSTER, custom_user_data='settings = "flat"'))
    with pytest.raises(ValueError, match="node-labels must be a TOML table"):
        render_bottlerocket_user_data(
            NodeUserData(cluster=CLUSTER, custom_user_data="[settings.kubernetes]\nnode-labels = 5\n")
        )


def test_each_family_gets_its_own_bootstrap_and_the_others_are_refused() -> None:
    inputs = NodeUserData(
        cluster=CLUSTER, labels={"team": "search"}, custom_user_data="#!/bin/bash\n/etc/eks/bootstrap.sh prod\n"
    )
    assert node_user_data("Custom", inputs) == inputs.custom_user_data
    assert "application/node.eks.aws" in node_user_data("AL2023", inputs)
    with pytest.raises(ValueError, match="not Bottlerocket TOML"):
        node_user_data("Bottlerocket", inputs)
    for family in ("AL2", "Windows2022"):
        with pytest.raises(UnsupportedAmiFamilyError, match=family):
            node_user_data(family, inputs)


def test_al2023_raid0_asks_nodeadm_for_the_local_storage_strategy() -> None:
    mime = node_user_data("AL2023", NodeUserData(cluster=CLUSTER, instance_store_policy="RAID0"))
    document = mime.split("# Nodesmith generated NodeConfig\n", 1)[1].split("\n--//", 1)[0]
    assert yaml.safe_load(document)["spec"]["instance"] == {"localStorage": {"strategy": "RAID0"}}
    plain = node_user_data("AL2023", NodeUserData(cluster=CLUSTER))
    assert "localStorage" not in plain
