"""Consolidation simulates moves as provisioning would: a pod whose PersistentVolumeClaim pins it to
a zone is never moved out of it (volume topology), and replacements come from the NodePool's own
EC2NodeClass catalogue."""

from __future__ import annotations

from disruption_factories import NOW, by_name, catalogue, make_node, make_nodepool, make_pod

from nodesmith.core.disruption import DisruptionSnapshot, decide
from nodesmith.core.model import NodeSelectorRequirement

ZONE = "topology.kubernetes.io/zone"
ALL = [{"nodes": "100%"}]


def _anchor():  # type: ignore[no-untyped-def]
    """A roomy node in us-east-1a whose own pod may not move."""
    pinned = make_pod(
        "anchor-db", cpu="2", memory="4Gi", node="anchor", annotations={"karpenter.sh/do-not-disrupt": "true"}
    )
    return make_node("anchor", instance_type="m5.2xlarge", zone="us-east-1a", pods=(pinned,))


def test_a_pod_pinned_by_its_volume_is_not_moved_to_another_zone() -> None:
    pool = make_nodepool(budgets=ALL)
    n1 = make_node(
        "n1", instance_type="m5.xlarge", zone="us-east-1b", pods=(make_pod("db", cpu="1", memory="2Gi", node="n1"),)
    )
    free = decide(DisruptionSnapshot(nodes=[_anchor(), n1], nodepools=[pool], instance_types=catalogue()), now=NOW)
    assert free.command is not None and dict(free.command.placements) == {"default/db": "anchor"}

    pinned = decide(
        DisruptionSnapshot(
            nodes=[_anchor(), n1],
            nodepools=[pool],
            instance_types=catalogue(),
            volume_requirements={"default/db": (NodeSelectorRequirement(ZONE, "In", ("us-east-1b",)),)},
        ),
        now=NOW,
    )
    cmd = pinned.command  # not deleted onto the anchor: replaced by a cheaper node in the volume's zone
    assert cmd is not None and cmd.replacement is not None and cmd.nodes == ("n1",)
    assert cmd.replacement.zones == frozenset({"us-east-1b"})
    assert dict(cmd.placements) == {"default/db": "new:0"}


def test_replacements_come_from_the_nodepools_own_catalogue() -> None:
    pool = make_nodepool(budgets=ALL)
    node = make_node("n1", instance_type="m5.2xlarge", pods=(make_pod("web", cpu="1500m", memory="3Gi", node="n1"),))
    shared = decide(DisruptionSnapshot(nodes=[node], nodepools=[pool], instance_types=catalogue()), now=NOW)
    assert shared.command is not None and shared.command.replacement is not None
    assert shared.command.replacement.instance_types[0].name == "t3.medium"

    own = [by_name("m5.2xlarge"), by_name("c5.xlarge")]
    per_pool = decide(
        DisruptionSnapshot(
            nodes=[node], nodepools=[pool], instance_types=catalogue(), nodepool_instance_types={"default": own}
        ),
        now=NOW,
    )
    assert per_pool.command is not None and per_pool.command.replacement is not None
    assert [it.name for it in per_pool.command.replacement.instance_types] == ["c5.xlarge"]
