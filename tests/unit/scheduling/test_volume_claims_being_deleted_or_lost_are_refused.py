"""Claims and volumes Karpenter's ValidatePersistentVolumeClaims refuses: a claim or volume being
deleted, a Lost claim. They impose nothing and say why; parsed from the API objects' fields."""

from __future__ import annotations

from scheduling_support import make_pod

from nodesmith.core.model import NodeSelectorRequirement, NodeSelectorTerm
from nodesmith.core.objects.volumes import persistent_volume_from_dict, volume_claim_from_dict
from nodesmith.core.scheduling.volumes import PersistentVolume, VolumeClaim, VolumeContext

ZONE = "topology.kubernetes.io/zone"
PINNED = (NodeSelectorTerm((NodeSelectorRequirement(ZONE, "In", ("us-west-2a",)),)),)


def test_deleting_or_lost_claims_and_deleting_volumes_are_reported_and_impose_nothing() -> None:
    context = VolumeContext.of(
        claims=[
            VolumeClaim("default", "going", "gp3", "pv-a", deleting=True),
            VolumeClaim("default", "lost", "gp3", "pv-gone", lost=True),
            VolumeClaim("default", "on-deleting-pv", "gp3", "pv-deleting"),
            VolumeClaim("default", "fine", "gp3", "pv-a"),
        ],
        volumes=[PersistentVolume("pv-a", PINNED), PersistentVolume("pv-deleting", PINNED, deleting=True)],
    )
    pod = make_pod(pvc_names=("going", "lost", "on-deleting-pv", "fine"))

    reqs, notes = context.requirements(pod)

    assert reqs == PINNED[0].match_expressions
    assert notes == (
        "PersistentVolumeClaim default/going is being deleted",
        "PersistentVolumeClaim default/lost is Lost (its PersistentVolume pv-gone is gone)",
        "PersistentVolume pv-deleting (of claim default/on-deleting-pv) is being deleted",
    )


def test_parsers_read_deletion_and_the_lost_phase() -> None:
    claim = volume_claim_from_dict(
        {
            "metadata": {"name": "c", "namespace": "ns", "deletionTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"volumeName": "pv"},
            "status": {"phase": "Lost"},
        }
    )
    assert (claim.deleting, claim.lost) == (True, True)
    assert not volume_claim_from_dict({"metadata": {"name": "c"}, "spec": {}, "status": {"phase": "Bound"}}).lost
    volume = persistent_volume_from_dict({"metadata": {"name": "pv", "deletionTimestamp": "2026-01-01T00:00:00Z"}})
    assert volume.deleting
