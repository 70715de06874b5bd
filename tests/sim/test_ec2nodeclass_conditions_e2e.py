"""EC2NodeClass status conditions end to end, through the real reconcile handler on the embedded AWS and Kubernetes:
a class whose subnet selector matches nothing gets ``SubnetsReady=False`` (``SubnetsNotFound``) and ``Ready=False``
naming it, while its NodePool launches nothing and its ``NodeClassReady`` says why; a pass that finds nothing new
writes nothing; once the selector is fixed the class turns ``Ready`` and the pending pods get capacity."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import pytest
from embedded_world import demo_nodeclass, nodeclass_conditions, until

from nodesmith.cli.world import MANIFESTS, EmbeddedWorld

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("embedded-world")]

NODECLASSES = "ec2nodeclasses.karpenter.k8s.aws"
NODECLAIMS = "nodeclaims.karpenter.sh"
NODEPOOLS = "nodepools.karpenter.sh"


@pytest.fixture
def world() -> Iterator[EmbeddedWorld]:
    with EmbeddedWorld(ready_delay=0.0) as w:
        w.apply_file(MANIFESTS / "nodepool.yaml")
        w.apply_file(MANIFESTS / "inflate.yaml")
        yield w


def test_a_selector_matching_nothing_is_reported_on_the_class_and_blocks_launches_until_fixed(
    world: EmbeddedWorld,
) -> None:
    broken = copy.deepcopy(demo_nodeclass())
    broken["spec"]["subnetSelectorTerms"] = [{"tags": {"karpenter.sh/discovery": "no-such-cluster"}}]
    world.store.apply(broken)
    world.scale(deployment="inflate", replicas=2)

    world.reconcile()

    got = nodeclass_conditions(world)
    assert (got["SubnetsReady"]["status"], got["SubnetsReady"]["reason"]) == ("False", "SubnetsNotFound")
    assert "no-such-cluster" in got["SubnetsReady"]["message"]
    for part in ("SecurityGroupsReady", "AMIsReady", "InstanceProfileReady", "CapacityReservationsReady"):
        assert got[part]["status"] == "True", got[part]
    assert (got["Ready"]["status"], got["Ready"]["reason"]) == ("False", "UnhealthyDependents")
    assert got["Ready"]["message"] == "SubnetsReady=False"
    generation = world.store.get(NODECLASSES, "default")["metadata"]["generation"]
    assert {c["observedGeneration"] for c in got.values()} == {generation}
    assert world.store.objects(NODECLAIMS) == []

    version = world.store.get(NODECLASSES, "default")["metadata"]["resourceVersion"]
    world.reconcile()
    assert world.store.get(NODECLASSES, "default")["metadata"]["resourceVersion"] == version
    assert world.store.objects(NODECLAIMS) == []
    pool = {c["type"]: c for c in world.store.get(NODEPOOLS, "default")["status"]["conditions"]}
    assert (pool["NodeClassReady"]["status"], pool["NodeClassReady"]["reason"]) == ("False", "UnhealthyDependents")
    assert pool["NodeClassReady"]["message"] == "SubnetsReady=False"

    world.store.apply(demo_nodeclass())
    assert until(
        world, lambda: nodeclass_conditions(world)["Ready"]["status"] == "True", timeout=30, terminations=False
    )
    fixed = nodeclass_conditions(world)
    assert (fixed["SubnetsReady"]["status"], fixed["SubnetsReady"]["reason"]) == ("True", "SubnetsReady")
    assert fixed["AMIsReady"]["lastTransitionTime"] == got["AMIsReady"]["lastTransitionTime"]
    assert until(world, lambda: len(world.store.objects(NODECLAIMS)) > 0, timeout=30, terminations=False)
