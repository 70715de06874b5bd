"""With a NodeOverlay price on the offerings, CreateFleet launches by the overrides' priorities (the overlaid prices)
instead of EC2's own prices, as Karpenter's AWS provider does (``[aws]:pkg/providers/instance/types.go``)."""

from __future__ import annotations

import pytest

from nodesmith.adapters.aws.fleet import FleetChoice, Override, build_create_fleet_request


@pytest.mark.parametrize(
    ("capacity_type", "options", "plain", "prioritized"),
    [
        ("spot", "SpotOptions", "price-capacity-optimized", "capacity-optimized-prioritized"),
        ("on-demand", "OnDemandOptions", "lowest-price", "prioritized"),
    ],
)
def test_the_allocation_strategy_follows_the_overlaid_priorities(
    capacity_type: str, options: str, plain: str, prioritized: str
) -> None:
    choice = FleetChoice(
        capacity_type,
        (
            Override("m5.large", "us-east-1a", "subnet-a", "ami-1", 0.001),
            Override("c5.large", "us-east-1a", "subnet-a", "ami-1", 0.085),
        ),
    )
    templates = {("ami-1", ""): "lt-1"}
    normal = build_create_fleet_request(choice=choice, launch_templates=templates, tags={}, token="t")
    overlaid = build_create_fleet_request(
        choice=choice, launch_templates=templates, tags={}, token="t", prioritized=True
    )
    assert normal[options] == {"AllocationStrategy": plain}
    assert overlaid[options] == {"AllocationStrategy": prioritized}
    priorities = [o["Priority"] for o in overlaid["LaunchTemplateConfigs"][0]["Overrides"]]
    assert priorities == [0.001, 0.085]
