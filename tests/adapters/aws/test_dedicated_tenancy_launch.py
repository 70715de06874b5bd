"""A NodeClaim whose requirements rule out default tenancy launches on dedicated hardware: its launch template places
the instance with ``Tenancy: dedicated``, the kubelet registers the tenancy label, and the launch says which tenancy
it got; a NodeClaim that allows default tenancy (or says nothing of it) launches as before."""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

from ec2_support import nodeclass, seeded_provider

from nodesmith.core.ports import LaunchRequest
from nodesmith.sim.aws import SeededAws, write_price_table

if TYPE_CHECKING:
    from pathlib import Path


def launch(seeded: SeededAws, tmp_path: Path, tenancy: str) -> Any:
    cloud = seeded_provider(
        seeded, types=("m5.large",), price_table=write_price_table(path=tmp_path / "prices.json", source=None)
    )
    nc = nodeclass()
    return cloud.create(
        request=LaunchRequest(
            nodeclaim_name=f"default-{tenancy[:3]}01", nodepool_name="default", nodeclass=nc,
            instance_types=tuple(cloud.instance_types(nodeclass=nc)), capacity_types=frozenset({"on-demand"}),
            zones=frozenset({"us-east-1a"}), client_token=f"default-{tenancy}", tenancy=tenancy,
        )
    )  # fmt: skip


def template(ec2: Any, name: str) -> dict[str, Any]:
    return dict(
        ec2.describe_launch_template_versions(LaunchTemplateName=name)["LaunchTemplateVersions"][0][
            "LaunchTemplateData"
        ]
    )


def test_dedicated_tenancy_is_placed_labelled_and_reported(seeded: SeededAws, ec2: Any, tmp_path: Path) -> None:
    result = launch(seeded, tmp_path, "dedicated")
    data = template(ec2, result.launch_template_name)
    assert data["Placement"] == {"Tenancy": "dedicated"}
    assert "karpenter.k8s.aws/instance-tenancy=dedicated" in base64.b64decode(data["UserData"]).decode()
    assert result.tenancy == "dedicated"


def test_default_tenancy_leaves_placement_to_ec2(seeded: SeededAws, ec2: Any, tmp_path: Path) -> None:
    result = launch(seeded, tmp_path, "default")
    data = template(ec2, result.launch_template_name)
    assert "Placement" not in data
    assert "karpenter.k8s.aws/instance-tenancy=default" in base64.b64decode(data["UserData"]).decode()
    assert result.tenancy == "default"
