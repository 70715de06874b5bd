"""A launched NodeClaim is labelled as Karpenter's launch labels it: instance type, zone, capacity type and tenancy, and
for an instance in a capacity reservation the reserved offering's labels, ``-interruptible`` included."""

from __future__ import annotations

from nodesmith.core.ports import LaunchResult
from nodesmith.services.provisioning.nodeclaims import launched_labels

BASE = {"instance_id": "i-0123456789abcdef0", "instance_type": "m5.large", "zone": "us-east-1b", "image_id": "ami-1"}


def test_an_instance_in_an_interruptible_odcr_says_so() -> None:
    result = LaunchResult(
        **BASE, capacity_type="reserved", price=0.0, reservation_id="cr-0i", reservation_type="default",
        reservation_interruptible=True,
    )  # fmt: skip
    labels = launched_labels(result)
    assert labels["karpenter.sh/capacity-type"] == "reserved"
    assert labels["karpenter.k8s.aws/capacity-reservation-id"] == "cr-0i"
    assert labels["karpenter.k8s.aws/capacity-reservation-interruptible"] == "true"
    firm = launched_labels(LaunchResult(**BASE, capacity_type="reserved", price=0.0, reservation_id="cr-0a"))
    assert firm["karpenter.k8s.aws/capacity-reservation-interruptible"] == "false"
    assert firm["karpenter.k8s.aws/capacity-reservation-type"] == "default"


def test_an_instance_outside_any_reservation_has_no_reservation_labels() -> None:
    labels = launched_labels(LaunchResult(**BASE, capacity_type="spot", price=0.03))
    assert labels == {
        "node.kubernetes.io/instance-type": "m5.large",
        "topology.kubernetes.io/zone": "us-east-1b",
        "karpenter.sh/capacity-type": "spot",
        "karpenter.k8s.aws/instance-tenancy": "default",
    }
    dedicated = launched_labels(LaunchResult(**BASE, capacity_type="on-demand", price=0.1, tenancy="dedicated"))
    assert dedicated["karpenter.k8s.aws/instance-tenancy"] == "dedicated"
