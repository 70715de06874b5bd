"""Volume topology: a bound volume's node affinity or an unbound claim's StorageClass topology
pins the pod (like Karpenter's volumetopology.go); missing objects are reported, not guessed."""

from __future__ import annotations

from dataclasses import replace

from scheduling_support import make_input, make_nodepool, make_pod

from nodesmith.core.model import NodeSelectorRequirement, NodeSelectorTerm
from nodesmith.core.scheduling import solve
from nodesmith.core.scheduling.volumes import PersistentVolume, StorageClass, VolumeClaim, volume_requirements

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"

CLAIMS = {
    ("default", "bound"): VolumeClaim("default", "bound", "gp3", "pv-a"),
    ("default", "local"): VolumeClaim("default", "local", "", "pv-local"),
    ("default", "pending"): VolumeClaim("default", "pending", "zonal"),
    ("default", "no-class"): VolumeClaim("default", "no-class"),
    ("default", "immediate"): VolumeClaim("default", "immediate", "fast"),
}
VOLUMES = {
    "pv-a": PersistentVolume(
        "pv-a",
        node_affinity=(
            NodeSelectorTerm((NodeSelectorRequirement(ZONE, "In", ("us-west-2a",)),)),
            NodeSelectorTerm((NodeSelectorRequirement(ZONE, "In", ("us-west-2b",)),)),
        ),
    ),
    "pv-local": PersistentVolume(
        "pv-local",
        node_affinity=(
            NodeSelectorTerm(
                (
                    NodeSelectorRequirement(HOST, "In", ("old-node",)),
                    NodeSelectorRequirement(ZONE, "In", ("us-west-2c",)),
                )
            ),
        ),
        local=True,
    ),
}
CLASSES = {
    "zonal": StorageClass(
        "zonal",
        allowed_topologies=(((ZONE, ("us-west-2b",)),), ((ZONE, ("us-west-2c",)),)),
        binding_mode="WaitForFirstConsumer",
    ),
    "fast": StorageClass("fast", allowed_topologies=(((ZONE, ("us-west-2a",)),),)),
}


def reqs(*claims: str) -> tuple[tuple[NodeSelectorRequirement, ...], tuple[str, ...]]:
    return volume_requirements(make_pod(pvc_names=claims), claims=CLAIMS, volumes=VOLUMES, classes=CLASSES)


def test_bound_claims_take_the_first_node_affinity_term_of_their_volume() -> None:
    assert reqs("bound") == ((NodeSelectorRequirement(ZONE, "In", ("us-west-2a",)),), ())


def test_local_volumes_drop_the_old_hostname_but_keep_the_zone() -> None:
    assert reqs("local") == ((NodeSelectorRequirement(ZONE, "In", ("us-west-2c",)),), ())


def test_unbound_claims_take_the_first_allowed_topology_of_their_storage_class() -> None:
    assert reqs("pending") == ((NodeSelectorRequirement(ZONE, "In", ("us-west-2b",)),), ())


def test_what_karpenter_would_refuse_is_reported_and_imposes_nothing() -> None:
    found, notes = reqs("missing", "no-class", "immediate")
    assert found == (NodeSelectorRequirement(ZONE, "In", ("us-west-2a",)),)  # Immediate still has a topology
    assert notes == (
        "PersistentVolumeClaim default/missing not found",
        "unbound PersistentVolumeClaim default/no-class has no storage class",
        "unbound PersistentVolumeClaim default/immediate uses StorageClass fast with volumeBindingMode Immediate: "
        "it must be bound first",
    )


def test_the_nodeclaim_is_pinned_to_the_volume_zone_and_a_conflict_is_explained() -> None:
    pod = make_pod("db", pvc_names=("bound",))
    zone_a = (NodeSelectorRequirement(ZONE, "In", ("us-west-2a",)),)
    result = solve(replace(make_input([pod]), volume_requirements={pod.key: zone_a}))
    (nc,) = result.nodeclaims
    assert nc.zone == "us-west-2a" and nc.zones == frozenset({"us-west-2a"})
    only_b = make_nodepool(requirements=[{"key": ZONE, "operator": "In", "values": ["us-west-2b"]}])
    result = solve(replace(make_input([pod], nodepools=[only_b]), volume_requirements={pod.key: zone_a}))
    reason = result.unschedulable[pod.key]
    assert reason.startswith('nodepool "default": incompatible requirements: key topology.kubernetes.io/zone')
    assert reason.endswith("the pod's volumes require topology.kubernetes.io/zone In [us-west-2a]")


def test_volume_zones_do_not_change_which_nodes_topology_spread_counts() -> None:
    pod = make_pod("db", pvc_names=("bound",))
    zone_a = (NodeSelectorRequirement(ZONE, "In", ("us-west-2a",)),)
    inp = replace(make_input([pod]), volume_requirements={pod.key: zone_a})
    from nodesmith.core.scheduling.pods import Constraints, PodDataCache

    data = PodDataCache(inp.volume_requirements).get(pod, Constraints.from_pod(pod))
    assert data.requirements.get(ZONE).single_value() == "us-west-2a"
    assert data.strict.get(ZONE).single_value() == "us-west-2a"
    assert all(not t.has(ZONE) for t in data.node_filter_terms)
