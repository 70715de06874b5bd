"""Drift: each reason Karpenter knows (NodePool hash, requirements, instance type gone, node class
hash, AMI, security groups, subnet), checked in Karpenter's order, and the drift command that
replaces one drifted node at a time within the ``Drifted`` budget."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from disruption_factories import (
    DAY,
    HOUR,
    NOW,
    catalogue,
    make_node,
    make_nodeclaim,
    make_nodeclass,
    make_nodepool,
    make_pod,
)

from nodesmith.core.disruption import (
    ClusterNode,
    DisruptionSnapshot,
    NodeClassResolution,
    ResolvedAMI,
    decide,
    drift_of,
    ec2nodeclass_hash,
    nodepool_hash,
    plan_disruptions,
)
from nodesmith.core.disruption.drift_basis import NODECLASS_HASH_VERSION, NODEPOOL_HASH_VERSION
from nodesmith.core.model import NodeSelectorRequirement

if TYPE_CHECKING:
    from nodesmith.core.api.ec2nodeclass import EC2NodeClass
    from nodesmith.core.api.nodepool import NodePool

TYPES = catalogue()
CATALOGUE = {it.name: it for it in TYPES}
OLD_AMI, NEW_AMI = "ami-0aaaaaaaaaaaaaaa1", "ami-0bbbbbbbbbbbbbbb2"


def stamped(pool: NodePool) -> dict[str, str]:
    return {
        "karpenter.sh/nodepool-hash": nodepool_hash(pool),
        "karpenter.sh/nodepool-hash-version": NODEPOOL_HASH_VERSION,
    }


def node_with_claim(
    name: str = "n1", *, annotations: dict[str, str] | None = None, image: str = OLD_AMI, **node_kwargs: Any
) -> ClusterNode:
    claim = make_nodeclaim(f"{name}-claim", node=name, annotations=annotations, image_id=image, created=NOW - 2 * DAY)
    return make_node(name, nodeclaim=claim, created=NOW - 2 * DAY, **node_kwargs)


def reason(
    node: ClusterNode,
    pool: NodePool,
    *,
    nodeclass: EC2NodeClass | None = None,
    resolution: NodeClassResolution | None = None,
) -> str | None:
    got = drift_of(
        node=node, nodepool=pool, nodeclass=nodeclass, resolution=resolution, instance_types=CATALOGUE, now=NOW
    )
    return got.reason if got is not None else None


# ------------------------------------------------------------------------------ static hashes


def test_nodepool_hash_ignores_requirements_defaults_order_and_behaviour_fields() -> None:
    base = make_nodepool(taints=[{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}])
    same = [
        make_nodepool(taints=[{"key": "b", "effect": "NoSchedule"}, {"key": "a", "effect": "NoSchedule"}]),
        make_nodepool(
            taints=[{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}],
            capacity_types=("spot", "on-demand"),
            budgets=[{"nodes": "1"}],
            consolidate_after="5m",
        ),
    ]
    assert all(nodepool_hash(p) == nodepool_hash(base) for p in same)
    different = [
        make_nodepool(taints=[{"key": "a", "effect": "NoSchedule"}]),
        make_nodepool(
            taints=[{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}], labels={"team": "x"}
        ),
        make_nodepool(
            taints=[{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}], expire_after="24h"
        ),
    ]
    assert all(nodepool_hash(p) != nodepool_hash(base) for p in different)


def test_nodepool_template_change_is_nodepool_drift_only_for_our_hash_version() -> None:
    before = make_nodepool(labels={"team": "a"})
    after = make_nodepool(labels={"team": "b"})
    node = node_with_claim(annotations=stamped(before))
    assert reason(node, before) is None
    assert reason(node, after) == "NodePoolDrifted"
    karpenter_stamped = node_with_claim(
        annotations={"karpenter.sh/nodepool-hash": "123", "karpenter.sh/nodepool-hash-version": "v3"}
    )
    assert reason(karpenter_stamped, after) is None, "hashes of another version are not comparable"


def test_ec2nodeclass_change_is_nodeclass_drift_but_selector_changes_are_not() -> None:
    before = make_nodeclass(user_data="#!/bin/bash\necho one")
    annotations = {
        "karpenter.k8s.aws/ec2nodeclass-hash": ec2nodeclass_hash(before),
        "karpenter.k8s.aws/ec2nodeclass-hash-version": NODECLASS_HASH_VERSION,
    }
    node = node_with_claim(annotations=annotations)
    pool = make_nodepool()
    assert reason(node, pool, nodeclass=before) is None
    assert reason(node, pool, nodeclass=make_nodeclass(user_data="#!/bin/bash\necho two")) == "NodeClassDrift"
    reselected = make_nodeclass(user_data="#!/bin/bash\necho one", ami=NEW_AMI)
    assert ec2nodeclass_hash(reselected) == ec2nodeclass_hash(before)


# ------------------------------------------------------------------------------ semantic drift


def test_requirements_no_longer_satisfied_is_requirements_drift_but_added_values_are_not() -> None:
    node = node_with_claim(capacity_type="spot")
    assert reason(node, make_nodepool(capacity_types=("spot", "on-demand"))) is None
    assert reason(node, make_nodepool(capacity_types=("spot", "on-demand", "reserved"))) is None
    assert reason(node, make_nodepool(capacity_types=("on-demand",))) == "RequirementsDrifted"


def test_a_label_missing_from_a_snapshot_node_is_not_evidence_of_drift() -> None:
    pool = make_nodepool(
        requirements=[
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "team", "operator": "In", "values": ["payments"]},
        ],
        labels={"team": "payments"},
    )
    snapshot_node = make_node("n1")  # no NodeClaim, no team label
    assert reason(snapshot_node, pool) is None
    with_claim = node_with_claim()
    assert reason(with_claim, pool) == "RequirementsDrifted", "a NodeClaim carries every label it was launched with"


def test_instance_type_gone_is_drift_only_after_an_hour() -> None:
    pool = make_nodepool()
    node = make_node("n1", instance_type="m5.xlarge", created=NOW - 2 * HOUR)
    without = {name: it for name, it in CATALOGUE.items() if name != "m5.xlarge"}
    got = drift_of(node=node, nodepool=pool, nodeclass=None, resolution=None, instance_types=without, now=NOW)
    assert got is not None and got.reason == "InstanceTypeNotFound"
    young = make_node("n2", instance_type="m5.xlarge", created=NOW - 10 * 60)
    assert drift_of(node=young, nodepool=pool, nodeclass=None, resolution=None, instance_types=without, now=NOW) is None
    elsewhere = make_node("n3", instance_type="m5.xlarge", zone="us-east-1f", created=NOW - 2 * HOUR)
    assert reason(elsewhere, make_nodepool()) == "InstanceTypeNotFound", "no offering in the node's zone"


def test_image_not_resolved_for_the_instance_type_is_ami_drift() -> None:
    pool = make_nodepool()
    node = node_with_claim(image=OLD_AMI)
    assert reason(node, pool, nodeclass=make_nodeclass(ami=OLD_AMI), resolution=None) is None
    nodeclass = make_nodeclass(ami=NEW_AMI)
    got = drift_of(node=node, nodepool=pool, nodeclass=nodeclass, resolution=None, instance_types=CATALOGUE, now=NOW)
    assert got is not None and got.reason == "AMIDrift" and NEW_AMI in got.message
    arm_first = NodeClassResolution(
        amis=(
            ResolvedAMI("ami-arm", (NodeSelectorRequirement("kubernetes.io/arch", "In", ("arm64",)),)),
            ResolvedAMI(OLD_AMI, (NodeSelectorRequirement("kubernetes.io/arch", "In", ("amd64",)),)),
        )
    )
    assert reason(node, pool, resolution=arm_first) is None, "an amd64 node is mapped to the amd64 AMI"


def test_security_groups_and_subnet_outside_the_resolved_sets_drift() -> None:
    pool = make_nodepool()
    resolved = NodeClassResolution(
        subnet_ids=frozenset({"subnet-a", "subnet-b"}), security_group_ids=frozenset({"sg-1", "sg-2"})
    )
    ok = make_node("ok", subnet_id="subnet-a", security_group_ids=frozenset({"sg-1", "sg-2"}))
    assert reason(ok, pool, resolution=resolved) is None
    missing_sg = make_node("sg", subnet_id="subnet-a", security_group_ids=frozenset({"sg-1"}))
    assert reason(missing_sg, pool, resolution=resolved) == "SecurityGroupDrift", "the set must be equal, not a subset"
    moved = make_node("subnet", subnet_id="subnet-z", security_group_ids=frozenset({"sg-1", "sg-2"}))
    assert reason(moved, pool, resolution=resolved) == "SubnetDrift"
    unknown = make_node("unknown")
    assert reason(unknown, pool, resolution=resolved) is None, "unknown instance facts are never drift"


def test_a_reservation_no_longer_selected_is_capacity_reservation_drift() -> None:
    pool = make_nodepool(capacity_types=("reserved", "on-demand"))
    labels = {"karpenter.sh/capacity-type": "reserved", "karpenter.k8s.aws/capacity-reservation-id": "cr-0old"}
    node = make_node("reserved", capacity_type="reserved", labels=labels)
    selected = NodeClassResolution(capacity_reservation_ids=frozenset({"cr-0new"}))
    got = drift_of(node=node, nodepool=pool, nodeclass=None, resolution=selected, instance_types=CATALOGUE, now=NOW)
    assert got is not None and got.reason == "CapacityReservationDrift" and "cr-0old" in got.message
    still = NodeClassResolution(capacity_reservation_ids=frozenset({"cr-0old", "cr-0new"}))
    assert reason(node, pool, resolution=still) is None
    assert reason(node, pool, resolution=NodeClassResolution()) is None, "reservations not known: no drift"
    assert reason(make_node("od"), pool, resolution=selected) is None, "a node outside reservations never drifts so"

    status = {"capacityReservations": [{"availabilityZone": "us-east-1a", "id": "cr-0new", "instanceType": "m5.xlarge",
                                        "ownerID": "123456789012"}]}  # fmt: skip
    assert reason(node, pool, nodeclass=make_nodeclass(**status)) == "CapacityReservationDrift"


def test_reasons_are_reported_in_karpenter_order() -> None:
    before = make_nodepool(labels={"team": "a"})
    node = node_with_claim(annotations=stamped(before), capacity_type="spot", image=OLD_AMI)
    after = make_nodepool(labels={"team": "b"}, capacity_types=("on-demand",))
    assert reason(node, after, nodeclass=make_nodeclass(ami=NEW_AMI)) == "NodePoolDrifted"
    assert reason(
        node, make_nodepool(labels={"team": "a"}, capacity_types=("on-demand",)), nodeclass=make_nodeclass(ami=NEW_AMI)
    ) == ("RequirementsDrifted")


# ------------------------------------------------------------------------------ the drift command


def test_drifted_node_is_replaced_by_a_nodeclaim_from_the_current_nodepool() -> None:
    pool = make_nodepool(budgets=[{"nodes": "100%"}])
    busy = make_pod("busy", cpu="3", memory="12Gi", node="n1")
    node = node_with_claim(pods=(busy,))
    plan = decide(
        DisruptionSnapshot(
            nodes=[node], nodepools=[pool], instance_types=TYPES, nodeclasses=[make_nodeclass(ami=NEW_AMI)]
        ),
        now=NOW,
    )
    cmd = plan.command
    assert cmd is not None and cmd.method == "drift" and cmd.cause == "AMIDrift"
    assert cmd.nodes == ("n1",) and cmd.replacement is not None
    assert cmd.pods == ("default/busy",) and dict(cmd.placements) == {"default/busy": "new:0"}


def test_drift_deletes_when_pods_fit_elsewhere_and_respects_the_drifted_budget() -> None:
    pool = make_nodepool(
        budgets=[
            {"nodes": "100%"},
            {"nodes": "1", "reasons": ["Drifted"]},
            {"nodes": "0", "reasons": ["Underutilized"]},
        ]
    )
    big = make_node("big", instance_type="m5.4xlarge", pod_specs=[("8", "8Gi")])  # not drifted, lots of room
    d1 = node_with_claim("d1", pods=(make_pod("a", node="d1", cpu="1"),))
    d2 = node_with_claim("d2", pods=(make_pod("b", node="d2", cpu="1"),))
    plan = plan_disruptions(
        DisruptionSnapshot(
            nodes=[big, d1, d2], nodepools=[pool], instance_types=TYPES, nodeclasses=[make_nodeclass(ami=NEW_AMI)]
        ),
        now=NOW,
    )
    drifts = [c for c in plan.commands if c.method == "drift"]
    assert len(drifts) == 1, "the Drifted budget allows one node at a time"
    assert drifts[0].replacements == () and drifts[0].placements[0][1] == "big"
    left = [r for r in plan.rejected if r.method == "drift"]
    assert len(left) == 1 and "Drifted budget exhausted" in left[0].reason


def test_drift_waits_for_do_not_disrupt_pods_unless_termination_grace_period_bounds_the_drain() -> None:
    pool = make_nodepool(budgets=[{"nodes": "100%"}])
    pinned = make_pod("batch", node="n1", annotations={"karpenter.sh/do-not-disrupt": "true"})
    node = node_with_claim(pods=(pinned,))
    nodeclass = make_nodeclass(ami=NEW_AMI)
    plan = decide(
        DisruptionSnapshot(nodes=[node], nodepools=[pool], instance_types=TYPES, nodeclasses=[nodeclass]), now=NOW
    )
    assert plan.command is None
    assert any(r.method == "drift" and "AMIDrift, but pod default/batch" in r.reason for r in plan.rejected)
    claim = make_nodeclaim(
        "n1-claim", node="n1", image_id=OLD_AMI, termination_grace_period="1h", created=NOW - 2 * DAY
    )
    bounded = make_node("n1", pods=(pinned,), nodeclaim=claim, created=NOW - 2 * DAY)
    plan = decide(
        DisruptionSnapshot(nodes=[bounded], nodepools=[pool], instance_types=TYPES, nodeclasses=[nodeclass]), now=NOW
    )
    assert plan.command is not None and plan.command.method == "drift"


def test_empty_drifted_nodes_go_first() -> None:
    pool = make_nodepool(
        budgets=[{"nodes": "100%"}, {"nodes": "1", "reasons": ["Drifted"]}, {"nodes": "0", "reasons": ["Empty"]}]
    )
    busy = node_with_claim("a-busy", pods=(make_pod("x", node="a-busy"),))
    empty = node_with_claim("z-empty")
    plan = decide(
        DisruptionSnapshot(
            nodes=[busy, empty], nodepools=[pool], instance_types=TYPES, nodeclasses=[make_nodeclass(ami=NEW_AMI)]
        ),
        now=NOW,
    )
    assert plan.command is not None and plan.command.nodes == ("z-empty",)
