"""KubeCluster's finalizer-aware calls against the Kubernetes API emulator: a NodeClaim or Node DELETE with
``karpenter.sh/termination`` only marks it deleting; removing that finalizer lets it go and leaves any other
controller's finalizer in place (a guarded merge patch); registration adds the finalizer to a Node with a
strategic merge patch; annotations merge; cordoned nodes are listed by field selector."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodesmith.core.termination import TERMINATION_FINALIZER

if TYPE_CHECKING:
    from nodesmith.adapters.kube import KubeCluster
    from nodesmith.sim.kube import KubeEmulator

CLAIMS = "nodeclaims.karpenter.sh"


def claim(kube: KubeEmulator, name: str, finalizers: list[str]) -> None:
    kube.store.create(
        CLAIMS,
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": name, "finalizers": finalizers},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [],
            },
        },
    )


def node(kube: KubeEmulator, name: str, **spec: Any) -> None:
    kube.store.create(
        "nodes",
        {
            "metadata": {"name": name, "finalizers": spec.pop("finalizers", [])},
            "spec": {"providerID": f"aws:///us-east-1a/i-{name}", **spec},
        },
    )


def test_a_nodeclaim_with_our_finalizer_waits_for_it_and_keeps_anothers(
    kube: KubeEmulator, cluster: KubeCluster
) -> None:
    claim(kube, "a", [TERMINATION_FINALIZER, "example.com/backup"])
    cluster.annotate_nodeclaim(name="a", annotations={"nodesmith.dev/termination-reason": "Drifted"})
    cluster.delete_nodeclaim(name="a")
    got = cluster.get_nodeclaim(name="a")
    assert got is not None and got.metadata.deletion_timestamp is not None
    assert got.metadata.annotations["nodesmith.dev/termination-reason"] == "Drifted"

    cluster.remove_nodeclaim_finalizer(name="a", finalizer=TERMINATION_FINALIZER)
    after = cluster.get_nodeclaim(name="a")
    assert after is not None and after.metadata.finalizers == ["example.com/backup"]  # still the other's to release

    kube.store.mutate(CLAIMS, "a", lambda o: o["metadata"].update(finalizers=[]))
    assert cluster.get_nodeclaim(name="a") is None
    cluster.remove_nodeclaim_finalizer(name="a", finalizer=TERMINATION_FINALIZER)  # gone: nothing to do
    cluster.delete_nodeclaim(name="a")


def test_removing_our_finalizer_lets_a_deleting_nodeclaim_go(kube: KubeEmulator, cluster: KubeCluster) -> None:
    claim(kube, "b", [TERMINATION_FINALIZER])
    cluster.delete_nodeclaim(name="b")
    assert cluster.get_nodeclaim(name="b") is not None
    cluster.remove_nodeclaim_finalizer(name="b", finalizer=TERMINATION_FINALIZER)
    assert cluster.get_nodeclaim(name="b") is None


def test_a_node_gets_our_finalizer_at_registration_and_goes_when_it_is_removed(
    kube: KubeEmulator, cluster: KubeCluster
) -> None:
    node(kube, "n1", finalizers=["example.com/keep"])
    cluster.label_node(node_name="n1", labels={"karpenter.sh/registered": "true"}, finalizers=[TERMINATION_FINALIZER])
    got = cluster.get_node(name="n1")
    assert got is not None and set(got.finalizers) == {"example.com/keep", TERMINATION_FINALIZER}
    assert got.labels["karpenter.sh/registered"] == "true"

    cluster.delete_node(name="n1")
    deleting = cluster.get_node(name="n1")
    assert deleting is not None and deleting.deletion_timestamp is not None
    cluster.remove_node_finalizer(name="n1", finalizer=TERMINATION_FINALIZER)
    kept = cluster.get_node(name="n1")
    assert kept is not None and kept.finalizers == ("example.com/keep",)
    kube.store.mutate("nodes", "n1", lambda o: o["metadata"].update(finalizers=[]))
    assert cluster.get_node(name="n1") is None


def test_cordoned_nodes_are_listed_by_field_selector(kube: KubeEmulator, cluster: KubeCluster) -> None:
    node(kube, "ready")
    node(kube, "cordoned", unschedulable=True)
    assert cluster.cordoned_node_names() == {"cordoned"}
