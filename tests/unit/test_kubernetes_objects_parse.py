"""Kubernetes JSON objects become the core's Pod, Node, DaemonSet and PodDisruptionBudget.

Field names follow ``k8s.io/api/core/v1``, ``apps/v1`` and ``policy/v1``; daemon pod tolerations
follow the DaemonSet controller (``pkg/controller/daemon/util/daemonset_util.go``).
"""

from __future__ import annotations

from typing import Any

import pytest

from nodesmith.core.model import (
    LabelSelector,
    LabelSelectorRequirement,
    NodeSelectorRequirement,
    Taint,
    Toleration,
)
from nodesmith.core.objects import (
    ObjectParseError,
    daemonset_from_dict,
    node_from_dict,
    parse_timestamp,
    pdb_from_dict,
    pod_from_dict,
)


def pod_doc(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "web-1", "namespace": "shop", "uid": "u-1"},
        "spec": {"containers": [{"name": "app", "image": "x"}], **spec},
    }


def test_scheduling_constraints_are_parsed() -> None:
    selector = {"matchLabels": {"app": "web"}}
    pod = pod_from_dict(
        pod_doc(
            nodeSelector={"kubernetes.io/arch": "arm64"},
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}
                                ]
                            }
                        ]
                    },
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 20,
                            "preference": {
                                "matchExpressions": [
                                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}
                                ]
                            },
                        }
                    ],
                },
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {"topologyKey": "kubernetes.io/hostname", "labelSelector": selector}
                    ],
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 5,
                            "podAffinityTerm": {
                                "topologyKey": "topology.kubernetes.io/zone",
                                "labelSelector": selector,
                            },
                        }
                    ],
                },
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "topologyKey": "topology.kubernetes.io/zone",
                            "labelSelector": {"matchLabels": {"app": "db"}},
                            "namespaces": ["data"],
                        }
                    ]
                },
            },
            tolerations=[
                {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
                {"operator": "Exists"},
            ],
            topologySpreadConstraints=[
                {
                    "maxSkew": 1,
                    "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": selector,
                    "minDomains": 3,
                }
            ],
        )
    )

    assert pod.node_selector == {"kubernetes.io/arch": "arm64"}
    assert pod.required_node_affinity[0].match_expressions == (
        NodeSelectorRequirement(key="topology.kubernetes.io/zone", operator="In", values=("a",)),
    )
    assert pod.preferred_node_affinity[0].weight == 20
    assert pod.pod_anti_affinity[0].topology_key == "kubernetes.io/hostname"
    assert pod.pod_anti_affinity[0].label_selector == LabelSelector(match_labels=(("app", "web"),))
    assert pod.preferred_pod_anti_affinity[0].weight == 5
    assert pod.pod_affinity[0].namespaces == ("data",)
    assert pod.tolerations == (
        Toleration(key="dedicated", operator="Equal", value="gpu", effect="NoSchedule"),
        Toleration(key=None, operator="Exists"),
    )
    spread = pod.topology_spread[0]
    assert (spread.max_skew, spread.when_unsatisfiable, spread.min_domains) == (1, "DoNotSchedule", 3)
    assert spread.node_affinity_policy == "Honor" and spread.node_taints_policy == "Ignore"


def test_status_owner_and_lifecycle_fields() -> None:
    doc = pod_doc(priority=1000, priorityClassName="high", terminationGracePeriodSeconds=5)
    doc["metadata"].update(
        creationTimestamp="2024-05-01T12:00:00Z",
        deletionTimestamp="2024-05-01T12:00:30+00:00",
        ownerReferences=[
            {"apiVersion": "v1", "kind": "Other", "name": "x", "uid": "1"},
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc", "uid": "2", "controller": True},
        ],
    )
    doc["status"] = {
        "phase": "Pending",
        "nominatedNodeName": "n1",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
    }

    pod = pod_from_dict(doc)

    assert (pod.owner_kind, pod.owner_name) == ("ReplicaSet", "web-abc")
    assert pod.unschedulable and pod.nominated_node_name == "n1"
    assert pod.creation_timestamp == 1714564800.0
    assert pod.deletion_timestamp == 1714564830.0
    assert (pod.priority, pod.priority_class_name, pod.termination_grace_period_seconds) == (1000, "high", 5)


def test_scheduled_false_for_another_reason_is_not_unschedulable() -> None:
    doc = pod_doc()
    doc["status"] = {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}

    assert not pod_from_dict(doc).unschedulable


def test_mirror_pods_host_ports_and_claims() -> None:
    doc = pod_doc(
        containers=[{"name": "a", "ports": [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 81}]}],
        initContainers=[{"name": "s", "restartPolicy": "Always", "ports": [{"hostPort": 53, "protocol": "UDP"}]}],
        volumes=[
            {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-1"}},
            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
            {"name": "cfg", "configMap": {"name": "c"}},
        ],
    )
    doc["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "abc"}

    pod = pod_from_dict(doc)

    assert pod.is_mirror
    assert pod.host_ports == ((8080, "TCP", ""), (53, "UDP", ""))
    assert pod.pvc_names == ("data-web-1", "web-1-scratch")


def test_defaults_for_a_minimal_pod() -> None:
    pod = pod_from_dict({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]}})

    assert (pod.namespace, pod.phase, pod.termination_grace_period_seconds) == ("default", "Pending", 30)
    assert pod.node_name is None and pod.owner_kind is None and not pod.unschedulable


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"tolerations": [{"key": "a", "operator": "Matches"}]}, "spec.tolerations[0].operator"),
        (
            {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "Maybe"}]},
            "spec.topologySpreadConstraints[0].whenUnsatisfiable",
        ),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "Near"}]}]
                        }
                    }
                }
            },
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator",
        ),
        ({"nodeSelector": ["a"]}, "spec.nodeSelector"),
        ({"priority": "high"}, "spec.priority"),
    ],
)
def test_malformed_fields_are_reported_by_path(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(ObjectParseError) as exc:
        pod_from_dict(pod_doc(**spec))

    assert exc.value.field == field
    assert isinstance(exc.value, ValueError)


def test_missing_name_and_bad_timestamp_are_errors() -> None:
    with pytest.raises(ObjectParseError, match=r"metadata\.name"):
        pod_from_dict({"metadata": {}, "spec": {}})
    with pytest.raises(ObjectParseError, match="RFC 3339"):
        parse_timestamp("yesterday", field="metadata.creationTimestamp")


def test_node_from_dict() -> None:
    node = node_from_dict(
        {
            "metadata": {"name": "ip-10-0-0-1", "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {
                "providerID": "aws:///us-east-1a/i-0abc",
                "unschedulable": True,
                "taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}],
            },
            "status": {
                "allocatable": {"cpu": "1930m", "memory": "7Gi", "pods": "29"},
                "capacity": {"cpu": "2", "memory": "8Gi", "pods": "29"},
                "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
            },
        }
    )

    assert node.instance_id == "i-0abc"
    assert node.ready and node.unschedulable
    assert node.taints == (Taint(key="karpenter.sh/disrupted", effect="NoSchedule"),)
    assert node.allocatable == {"cpu": 1930, "memory": 7 * 2**30, "pods": 29}


def test_daemonset_template_pod_gets_daemon_tolerations() -> None:
    ds = daemonset_from_dict(
        {
            "metadata": {"name": "cni", "namespace": "kube-system"},
            "spec": {
                "template": {
                    "metadata": {"labels": {"app": "cni"}},
                    "spec": {
                        "hostNetwork": True,
                        "containers": [{"name": "c", "resources": {"requests": {"cpu": "25m", "memory": "50Mi"}}}],
                    },
                }
            },
        }
    )

    assert ds.pod.is_daemonset and ds.pod.labels == {"app": "cni"}
    assert ds.pod.requests == {"cpu": 25, "memory": 50 * 2**20, "pods": 1}
    tolerated = {t.key for t in ds.pod.tolerations}
    assert {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unschedulable",
        "node.kubernetes.io/network-unavailable",
    } <= tolerated


def test_daemonset_errors_point_into_the_template() -> None:
    doc = {
        "metadata": {"name": "x"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1 core"}}}]}}},
    }

    with pytest.raises(ObjectParseError) as exc:
        daemonset_from_dict(doc)

    assert exc.value.field == "spec.template.spec.containers[0].resources.requests.cpu"


def test_pdb_from_dict() -> None:
    pdb = pdb_from_dict(
        {
            "metadata": {"name": "db", "namespace": "shop"},
            "spec": {
                "minAvailable": "50%",
                "selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["db"]}]},
            },
            "status": {"disruptionsAllowed": 1},
        }
    )

    assert pdb.min_available == "50%" and pdb.max_unavailable is None and pdb.disruptions_allowed == 1
    assert pdb.selector.match_expressions == (LabelSelectorRequirement(key="app", operator="In", values=("db",)),)
    assert pdb.selector.matches({"app": "db"}) and not pdb.selector.matches({"app": "web"})


def test_pdb_without_selector_matches_nothing() -> None:
    pdb = pdb_from_dict({"metadata": {"name": "x"}, "spec": {"maxUnavailable": 1}})

    assert not pdb.selector.matches({"app": "db"})
    assert not pdb.selector.matches({})


def test_pdb_rejects_both_min_and_max() -> None:
    with pytest.raises(ObjectParseError, match="mutually exclusive"):
        pdb_from_dict({"metadata": {"name": "x"}, "spec": {"minAvailable": 1, "maxUnavailable": 1}})
