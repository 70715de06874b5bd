"""EC2NodeClass finalization through the reconcile handler, the real Kubernetes and EC2 adapters, the API emulator and
the embedded EC2: every EC2NodeClass gets Karpenter's ``karpenter.k8s.aws/termination`` finalizer; a deleted one
launches nothing more, waits while a NodeClaim still refers to it, then its launch templates (those tagged for it and
owned by the cluster, as Karpenter's policy scopes ``DeleteLaunchTemplate``) are deleted and it goes.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest
from stepped_world import NODECLAIMS, Sim, stepped_sim

from nodesmith.core.termination import TerminationRequest
from nodesmith.handlers import wiring
from nodesmith.services.termination.service import Status, run_round

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.slow

NODECLASSES = "ec2nodeclasses.karpenter.k8s.aws"
FINALIZER = "karpenter.k8s.aws/termination"
OWNED = {"Key": "kubernetes.io/cluster/demo", "Value": "owned"}


@pytest.fixture
def sim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sim]:
    with stepped_sim(tmp_path, monkeypatch) as world:
        yield world


def templates(sim: Sim) -> dict[str, dict[str, str]]:
    """Launch template name -> tags."""
    found = sim.aws.client("ec2").describe_launch_templates()["LaunchTemplates"]
    return {lt["LaunchTemplateName"]: {t["Key"]: t["Value"] for t in lt.get("Tags") or []} for lt in found}


def make_template(sim: Sim, name: str, tags: list[dict[str, str]]) -> None:
    sim.aws.client("ec2").create_launch_template(
        LaunchTemplateName=name,
        LaunchTemplateData={"ImageId": "ami-12345678"},
        TagSpecifications=[{"ResourceType": "launch-template", "Tags": tags}],
    )


def terminate(claim: dict[str, Any]) -> None:
    """Delete the NodeClaim and run the termination function's rounds until its node is gone."""
    name, provider_id = claim["metadata"]["name"], claim["status"]["providerID"]
    settings = wiring.get_settings()
    ports, tuning = wiring.ports(settings), wiring.termination_settings(settings)
    ports.cluster.delete_nodeclaim(name=name)
    request = TerminationRequest(nodeclaim=name, instanceId=provider_id.rsplit("/", 1)[-1], reason="Deleted")
    for attempt in range(1, 6):
        if run_round(ports=ports, settings=tuning, request=request, now=time.time(), attempt=attempt).status is (
            Status.TERMINATED
        ):
            return
    raise AssertionError(f"NodeClaim {name} not terminated")


def test_a_deleted_nodeclass_waits_for_its_nodeclaims_then_its_launch_templates_go(sim: Sim) -> None:
    sim.scale(1)
    sim.step()
    sim.reconcile()
    nodeclass = sim.store.snapshot(NODECLASSES, "default")
    assert nodeclass is not None and FINALIZER in nodeclass["metadata"]["finalizers"]
    ours = {n for n, tags in templates(sim).items() if tags.get("karpenter.k8s.aws/ec2nodeclass") == "default"}
    assert ours and all(templates(sim)[n].get("kubernetes.io/cluster/demo") == "owned" for n in ours)
    # not to be touched: another class's template, and one without the cluster's ownership tag
    make_template(sim, "nodesmith/demo/other", [OWNED, {"Key": "karpenter.k8s.aws/ec2nodeclass", "Value": "other"}])
    make_template(sim, "nodesmith/demo/unowned", [{"Key": "karpenter.k8s.aws/ec2nodeclass", "Value": "default"}])

    sim.store.delete(NODECLASSES, "default")
    sim.scale(3)
    sim.step()
    waiting = sim.reconcile()
    assert waiting.nodeclaims_created == 0 and not waiting.launch_templates_deleted  # its NodeClaim still runs
    deleting = sim.store.snapshot(NODECLASSES, "default")
    assert deleting is not None and deleting["metadata"].get("deletionTimestamp")
    assert ours <= set(templates(sim))

    (claim,) = sim.store.objects(NODECLAIMS)
    terminate(claim)
    released = sim.reconcile()
    assert sorted(released.launch_templates_deleted) == sorted(ours)
    assert sim.store.snapshot(NODECLASSES, "default") is None
    assert set(templates(sim)) == {"nodesmith/demo/other", "nodesmith/demo/unowned"}

    sim.store.apply(  # recreated: it gets the finalizer again and launches (a new launch template) for the pods
        {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
         "spec": dict(nodeclass["spec"])}
    )  # fmt: skip
    again = sim.reconcile()
    assert again.nodeclaims_created >= 1 and not again.errors
    recreated = sim.store.snapshot(NODECLASSES, "default")
    assert recreated is not None and FINALIZER in recreated["metadata"]["finalizers"]
