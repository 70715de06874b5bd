"""NodeClaim garbage collection after a burst of interruptions: hundreds of NodeClaims may have lost their
instance at once (the interruption handlers are removing them too). Their instances are confirmed in one
describe, not one call per NodeClaim, and the deletions run in parallel; a deletion that fails is reported
and the others still count."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import pytest
from reconcile_fakes import FakeCloud, FakeCluster

from nodesmith.core.api.nodeclaim import NodeClaim
from nodesmith.core.errors import KubernetesError
from nodesmith.core.model import Node
from nodesmith.core.ports import Instance
from nodesmith.services.ports import Ports
from nodesmith.services.provisioning.capacity import to_rfc3339
from nodesmith.services.provisioning.lifecycle import GcLimits, LifecycleOutcome, collect_garbage

if TYPE_CHECKING:
    from collections.abc import Sequence

NOW = 10_000.0


def launched_claim(n: int) -> NodeClaim:
    """A NodeClaim launched and registered 5 minutes ago on instance ``i-<n>`` (with Karpenter's finalizer)."""
    stamp = to_rfc3339(NOW - 300)
    return NodeClaim.model_validate(
        {
            "metadata": {
                "name": f"default-{n}",
                "creationTimestamp": stamp,
                "finalizers": ["karpenter.sh/termination"],
                "labels": {"karpenter.sh/nodepool": "default", "karpenter.sh/capacity-type": "spot"},
            },
            "spec": {
                "requirements": [{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"]}],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            },
            "status": {
                "providerID": f"aws:///us-east-1a/i-{n:017x}",
                "nodeName": f"ip-10-0-0-{n}.ec2.internal",
                "conditions": [
                    {"type": t, "status": "True", "lastTransitionTime": stamp} for t in ("Launched", "Registered")
                ],
            },
        }
    )


class CountingCloud(FakeCloud):
    """Records every describe; describing instances one by one is a failure here."""

    def __init__(self) -> None:
        super().__init__()
        self.describes: list[list[str]] = []

    def get_instance(self, *, instance_id: str) -> Instance | None:
        raise AssertionError(f"described {instance_id} on its own")

    def get_instances(self, *, instance_ids: Sequence[str]) -> dict[str, Instance]:
        self.describes.append(list(instance_ids))
        return super().get_instances(instance_ids=instance_ids)


def burst(n: int) -> tuple[FakeCluster, CountingCloud, list[NodeClaim]]:
    """``n`` NodeClaims whose instances were terminated (no longer listed, still described), and their Nodes
    (registered, so carrying Karpenter's finalizer)."""
    cluster, cloud = FakeCluster(), CountingCloud()
    claims = [launched_claim(i) for i in range(1, n + 1)]
    for nc in claims:
        cluster.nodeclaims[nc.name] = nc.model_copy(deep=True)
        cluster.nodes.append(
            Node(name=nc.status.node_name, provider_id=nc.status.provider_id, finalizers=("karpenter.sh/termination",))
        )
        iid = nc.status.provider_id.rsplit("/", 1)[-1]
        cloud.instances[iid] = Instance(iid, "m5.large", "us-east-1a", "spot", "terminated", NOW - 300)
    return cluster, cloud, claims


def test_instances_gone_are_confirmed_in_one_describe_and_their_nodeclaims_deleted() -> None:
    cluster, cloud, claims = burst(6)
    out = LifecycleOutcome()

    collect_garbage(
        ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"),
        nodeclaims=claims,
        nodes=[],
        instances={},
        now=NOW,
        outcome=out,
    )

    assert len(cloud.describes) == 1 and sorted(cloud.describes[0]) == sorted(cloud.instances)
    assert out.deleted == {nc.name for nc in claims} and out.terminated == 6
    # the Nodes and NodeClaims go (deleted, their finalizers removed: nothing is left to drain)
    assert sorted(cluster.deleted_nodes) == sorted(nc.status.node_name for nc in claims) and not cluster.nodes
    assert sorted(cluster.deleted_nodeclaims) == sorted(out.deleted) and not cluster.nodeclaims
    assert [e[2] for e in cluster.events] == ["InstanceTerminated"] * 6


def test_the_deletions_run_at_the_same_time() -> None:
    cluster, cloud, claims = burst(3)
    together = threading.Barrier(3, timeout=5)  # broken, and so raising, unless all three wait at once
    delete = cluster.delete_nodeclaim

    def waiting_delete(*, name: str) -> None:
        together.wait()
        delete(name=name)

    cluster.delete_nodeclaim = waiting_delete  # type: ignore[method-assign]
    out = LifecycleOutcome()

    collect_garbage(
        ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"),
        nodeclaims=claims,
        nodes=[],
        instances={},
        now=NOW,
        outcome=out,
    )

    assert out.terminated == 3 and not out.errors


@pytest.mark.parametrize("workers", [1, 8])
def test_a_failed_deletion_is_reported_and_the_others_still_count(workers: int) -> None:
    cluster, cloud, claims = burst(4)
    delete = cluster.delete_nodeclaim

    def flaky_delete(*, name: str) -> None:
        if name == claims[1].name:
            raise KubernetesError("the API server said 500")
        delete(name=name)

    cluster.delete_nodeclaim = flaky_delete  # type: ignore[method-assign]
    out = LifecycleOutcome()

    collect_garbage(
        ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"),
        nodeclaims=claims,
        nodes=[],
        instances={},
        now=NOW,
        outcome=out,
        limits=GcLimits(workers=workers),
    )

    assert out.deleted == {claims[0].name, claims[2].name, claims[3].name} and out.terminated == 3
    assert len(out.errors) == 1 and claims[1].name in out.errors[0] and "500" in out.errors[0]
    assert claims[1].name in cluster.nodeclaims  # left for the next pass
    assert sorted(cluster.nodeclaims) == [claims[1].name]  # the others went
