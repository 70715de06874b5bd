"""The NodeClaim and EC2NodeClass models apply Karpenter's v1 defaults and reject what Karpenter's CRDs reject.

Rules come from the generated CRDs in aws/karpenter-provider-aws v1.14.1 (``pkg/apis/crds/*.yaml``).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from api_docs import errors, nodeclass_doc, nodepool_doc
from pydantic import ValidationError

from nodesmith.core.api.ec2nodeclass import EC2NodeClass, default_block_device_mappings
from nodesmith.core.api.nodeclaim import NodeClaim
from nodesmith.core.api.nodepool import NodePool

# --- NodeClaim ------------------------------------------------------------------------------------


def nodeclaim_doc() -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "default-x7k2p", "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {
            "requirements": [
                {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"]},
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large", "c5.large"]},
            ],
            "resources": {"requests": {"cpu": "1500m", "memory": "2Gi", "pods": "3"}},
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        },
        "status": {
            "providerID": "aws:///us-east-1a/i-0abc",
            "imageID": "ami-123",
            "allocatable": {"cpu": "1930m", "memory": "7Gi"},
            "managedByController": "ignored",
        },
    }


def test_nodeclaim_accepts_nodepool_requirement_and_dumps_for_the_api() -> None:
    nc = NodeClaim.model_validate(nodeclaim_doc())

    assert nc.nodepool_name == "default"
    assert nc.status.provider_id == "aws:///us-east-1a/i-0abc"
    assert nc.requests_core() == {"cpu": 1500, "memory": 2 * 2**30, "pods": 3}
    assert nc.allocatable_core() == {"cpu": 1930, "memory": 7 * 2**30}
    dumped = nc.model_dump_k8s()
    assert dumped["status"] == {
        "providerID": "aws:///us-east-1a/i-0abc",
        "imageID": "ami-123",
        "allocatable": {"cpu": "1930m", "memory": "7Gi"},
    }
    assert dumped["spec"]["expireAfter"] == "720h"
    assert NodeClaim.model_validate(dumped) == nc


def test_nodeclaim_conditions_roll_up_into_ready() -> None:
    nc = NodeClaim.model_validate(nodeclaim_doc())
    t0, t1, t2 = "2024-01-01T00:00:00Z", "2024-01-01T00:01:00Z", "2024-01-01T00:02:00Z"

    assert nc.set_condition("Launched", "True", "Launched", "", t0)
    assert not nc.set_condition("Launched", "True", "Launched", "", t1)  # unchanged: keeps t0
    nc.set_condition("Registered", "True", "Registered", "", t1)
    ready = nc.condition("Ready")
    assert ready is not None and ready.status == "Unknown"

    nc.set_condition("Initialized", "True", "Initialized", "", t2)

    ready = nc.condition("Ready")
    launched = nc.condition("Launched")
    assert ready is not None and ready.status == "True" and ready.last_transition_time == t2
    assert launched is not None and launched.last_transition_time == t0
    assert nc.is_true("Ready")


def test_nodeclaim_spec_rejects_unknown_fields() -> None:
    doc = nodeclaim_doc()
    doc["spec"]["resource"] = doc["spec"].pop("resources")

    with pytest.raises(ValidationError) as exc:
        NodeClaim.model_validate(doc)

    assert "spec.resource" in [loc for loc, _ in errors(exc)]


# --- EC2NodeClass ---------------------------------------------------------------------------------


def test_capacity_reservation_terms_and_status_round_trip() -> None:
    terms = [
        {"id": "cr-0123abc"},
        {"tags": {"team": "ml", "any": "*"}, "ownerID": "123456789012"},
        {"instanceMatchCriteria": "open"},
    ]
    doc = nodeclass_doc(capacityReservationSelectorTerms=terms)
    doc["status"] = {
        "capacityReservations": [
            {"availabilityZone": "us-east-1a", "id": "cr-0123abc", "instanceType": "p5.48xlarge",
             "ownerID": "123456789012", "instanceMatchCriteria": "targeted", "reservationType": "capacity-block",
             "interruptible": False, "state": "expiring", "endTime": "2026-12-01T00:00:00Z"},
        ]
    }  # fmt: skip
    nc = EC2NodeClass.model_validate(doc)
    dumped = nc.model_dump(by_alias=True, exclude_none=True, mode="json")
    assert dumped["spec"]["capacityReservationSelectorTerms"] == terms
    assert dumped["status"]["capacityReservations"] == doc["status"]["capacityReservations"]


def test_nodeclass_defaults_and_inferred_family() -> None:
    nc = EC2NodeClass.model_validate(nodeclass_doc())

    assert nc.ami_family == "AL2023"
    assert nc.alias == ("al2023", "latest")
    opts = nc.model_dump(by_alias=True, exclude_none=True)["spec"]["metadataOptions"]
    assert opts == {
        "httpEndpoint": "enabled",
        "httpProtocolIPv6": "disabled",
        "httpPutResponseHopLimit": 1,
        "httpTokens": "required",
    }
    [root] = nc.effective_block_device_mappings()
    assert root.device_name == "/dev/xvda"
    assert root.ebs is not None and root.ebs.volume_size_bytes() == 20 * 2**30
    assert root.ebs.volume_type == "gp3" and root.ebs.encrypted is True


def test_default_block_devices_per_family() -> None:
    assert [m.device_name for m in default_block_device_mappings("Bottlerocket")] == ["/dev/xvda", "/dev/xvdb"]
    [windows_root] = default_block_device_mappings("Windows2022")
    assert windows_root.ebs is not None and windows_root.ebs.volume_size == "50Gi"
    assert default_block_device_mappings("Custom") == []


def test_nodeclass_round_trips_with_kubelet_and_block_devices() -> None:
    doc = nodeclass_doc(
        kubelet={
            "maxPods": 58,
            "systemReserved": {"cpu": "100m", "memory": "100Mi"},
            "evictionSoft": {"memory.available": "5%"},
            "evictionSoftGracePeriod": {"memory.available": "1m"},
            "clusterDNS": ["10.100.0.10"],
            "containerLogMaxSize": "50Mi",
        },
        blockDeviceMappings=[
            {"deviceName": "/dev/xvda", "rootVolume": True, "ebs": {"volumeSize": "100Gi", "volumeType": "gp3"}}
        ],
        associatePublicIPAddress=False,
        tags={"team": "platform"},
    )
    nc = EC2NodeClass.model_validate(copy.deepcopy(doc))
    dumped = nc.model_dump(by_alias=True, exclude_none=True)
    dumped["spec"].pop("metadataOptions")  # default added

    assert dumped == doc
    assert nc.spec.kubelet is not None and nc.spec.kubelet.max_pods == 58


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ({"instanceProfile": "x"}, "exactly one of ['role', 'instanceProfile']"),
        ({"amiSelectorTerms": [{"alias": "al2023@latest"}, {"id": "ami-1"}]}, "mutually exclusive"),
        ({"amiSelectorTerms": [{"alias": "ubuntu@latest"}]}, "not supported"),
        ({"amiSelectorTerms": [{"alias": "windows2022@v1"}]}, "only specify version 'latest'"),
        ({"amiSelectorTerms": [{"id": "ami-1", "name": "x"}]}, "mutually exclusive"),
        ({"amiSelectorTerms": [{"tags": {"a": "b"}}]}, "must specify amiFamily"),
        ({"amiFamily": "AL2"}, "amiFamily must be 'AL2023' or 'Custom'"),
        ({"subnetSelectorTerms": []}, "at least 1 item"),
        ({"subnetSelectorTerms": [{"id": "subnet-1", "tags": {"a": "b"}}]}, "mutually exclusive"),
        ({"securityGroupSelectorTerms": [{"tags": {"a": ""}}]}, "empty tag"),
        ({"tags": {"kubernetes.io/cluster/demo": "owned"}}, "restricted tag"),
        ({"tags": {"karpenter.sh/nodepool": "x"}}, "restricted tag"),
        ({"kubelet": {"evictionSoft": {"memory.available": "5%"}}}, "evictionSoftGracePeriod"),
        ({"kubelet": {"kubeReserved": {"gpu": "1"}}}, "reservable"),
        ({"kubelet": {"evictionHard": {"memory.free": "1Gi"}}}, "eviction signal"),
        ({"kubelet": {"maxPod": 10}}, "unknown field"),
        ({"kubelet": {"registerWithTaints": []}}, "Karpenter sets it"),
        ({"kubelet": {"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 60}}, "greater than"),
        ({"metadataOptions": {"httpPutResponseHopLimit": 65}}, "less than or equal"),
        ({"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeType": "gp3"}}]}, "volumeSize"),
        ({"userdata": "#!/bin/bash"}, "Extra inputs"),
        ({"capacityReservationSelectorTerms": [{"ownerID": "123456789012"}]}, "expected at least one"),
        ({"capacityReservationSelectorTerms": [{"id": "cr-0a", "ownerID": "123456789012"}]}, "mutually exclusive"),
        ({"capacityReservationSelectorTerms": [{"id": "odcr-1"}]}, "^cr-[0-9a-z]+$"),
        ({"capacityReservationSelectorTerms": [{"tags": {"a": "b"}, "ownerID": "1234"}]}, "^[0-9]{12}$"),
        ({"capacityReservationSelectorTerms": [{"tags": {"team": ""}}]}, "empty tag"),
        ({"capacityReservationSelectorTerms": [{"tags": {f"k{i}": "v" for i in range(21)}}]}, "at most 20"),
        ({"capacityReservationSelectorTerms": [{"instanceMatchCriteria": "any"}]}, "'open' or 'targeted'"),
        ({"capacityReservationSelectorTerms": [{"id": "cr-0a"}] * 31}, "at most 30"),
        ({"connectionTracking": {}}, "at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout"),
        ({"connectionTracking": {"udpTimeout": 90}}, "less than or equal to 60"),
        ({"connectionTracking": {"tcpEstablishedTimeout": 30}}, "greater than or equal to 60"),
        ({"connectionTracking": {"tcpTimeout": 60}}, "Extra inputs"),
        ({"cpuOptions": {"nestedVirtualization": "on"}}, "'enabled' or 'disabled'"),
    ],
)
def test_invalid_nodeclasses_are_rejected(spec: dict[str, Any], fragment: str) -> None:
    doc = nodeclass_doc(**spec)

    with pytest.raises(ValidationError) as exc:
        EC2NodeClass.model_validate(doc)

    assert any(fragment in msg for _, msg in errors(exc)), errors(exc)


def test_nodepool_and_nodeclass_need_a_name() -> None:
    pool = nodepool_doc()
    pool["metadata"] = {"labels": {"a": "b"}}
    nodeclass = nodeclass_doc()
    nodeclass["metadata"] = {"name": ""}

    for model, doc in ((NodePool, pool), (EC2NodeClass, nodeclass)):
        with pytest.raises(ValidationError, match="'name' is required"):
            model.model_validate(doc)
