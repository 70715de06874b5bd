"""Reconcile invocations ended mid-pass (issue 36, Lambda faults): the scheduled reconcile handler run as Lambda runs
it, an asynchronous invocation with the function timeout, against the embedded AWS and API emulator through the real
adapters, killed where a pass is most fragile or at random calls. What a killed pass leaves half-applied (a
NodeClaim created without an instance, an instance launched for a NodeClaim whose status was never written) is
repaired by the next pass: the NodeClaim is launched or adopts its instance, never a second one, and an instance no
NodeClaim claims is terminated by garbage collection.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest
from stepped_world import NODECLAIMS, Sim, invoke_scheduled, reconcile_function, stepped_sim

from nodesmith.handlers import wiring
from nodesmith.handlers.reconcile import run_pass
from nodesmith.sim.lambda_runtime import (
    Crashes,
    inject_crashes,
    install_function_timeouts,
    kill_invocation,
)

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.slow

ORPHAN_GRACE = 31.0  # past the orphan instances' grace (AWS garbage collection controller: 30 s)


@pytest.fixture
def sim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sim]:
    install_function_timeouts()
    with stepped_sim(tmp_path, monkeypatch) as world:
        try:
            yield world
        finally:
            inject_crashes(None)


def instances_by_claim(sim: Sim) -> Counter[str]:
    """Live instances per ``karpenter.sh/nodeclaim`` tag."""
    reservations = sim.aws.client("ec2").describe_instances(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    )["Reservations"]
    tags = [{t["Key"]: t["Value"] for t in i.get("Tags") or []} for r in reservations for i in r["Instances"]]
    return Counter(t.get("karpenter.sh/nodeclaim", "") for t in tags)


def consistent(sim: Sim) -> None:
    """Every live instance is claimed by exactly one NodeClaim, which names it; every NodeClaim has one."""
    claims = {c["metadata"]["name"]: c for c in sim.store.objects(NODECLAIMS)}
    by_claim = instances_by_claim(sim)
    assert set(by_claim) == set(claims), (by_claim, list(claims))
    assert all(n == 1 for n in by_claim.values()), by_claim
    assert all((c.get("status") or {}).get("providerID") for c in claims.values())


def kill_at(event: str) -> None:
    """End the running invocation at botocore's ``event`` (``before-call.ec2.CreateFleet``), once."""
    client: Any = wiring.build_cloud(wiring.get_settings())
    client = client._ec2  # the adapter's own client, the one the pass calls
    fired: list[bool] = []

    def die(**_: Any) -> None:
        if not fired:
            fired.append(True)
            kill_invocation(f"killed at {event}")

    client.meta.events.register(event, die)


@pytest.mark.parametrize(
    "event", ["before-call.ec2.CreateFleet", "after-call.ec2.CreateFleet"], ids=["before-launch", "after-launch"]
)
def test_a_pass_killed_around_its_launch_is_repaired_by_the_next(sim: Sim, event: str) -> None:
    function = reconcile_function()
    sim.scale(1)
    sim.step()
    kill_at(event)
    first = invoke_scheduled(function)
    assert function.stats.killed == 1, first
    (claim,) = sim.store.objects(NODECLAIMS)  # created, its launch never recorded
    assert not (claim.get("status") or {}).get("providerID")
    launched = instances_by_claim(sim)
    assert launched == (Counter({claim["metadata"]["name"]: 1}) if event.startswith("after") else Counter())
    if event.startswith("before"):
        # within EC2's eventual-consistency grace the next pass leaves it (an instance of it may not be listed yet),
        # counting it as capacity: no other NodeClaim, no instance
        early = invoke_scheduled(function)
        assert isinstance(early, dict) and early["nodeclaims_created"] == 0, early
        assert instances_by_claim(sim) == Counter()
        late = run_pass(now=time.time() + 11)  # a pass once the grace has passed launches it
        assert not late.errors and late.nodeclaims_created == 0 and late.nodeclaims_launched == 1, late.errors

    second = invoke_scheduled(function)
    assert isinstance(second, dict) and not second["errors"], second
    consistent(sim)
    assert instances_by_claim(sim) == Counter({claim["metadata"]["name"]: 1})  # launched or adopted: one instance
    assert second["nodeclaims_created"] == 0
    sim.step()
    invoke_scheduled(function)
    sim.step()
    assert sim.running() == 1


def test_passes_ended_at_random_points_leave_nothing_the_next_passes_cannot_repair(sim: Sim) -> None:
    function = reconcile_function()
    sim.scale(6)
    sim.step()
    inject_crashes(Crashes(rate=0.4, timeouts=0.2, spread=60, seed=1))  # a pass makes tens of calls
    try:
        for n in range(12):
            invoke_scheduled(function)
            sim.step()
            if n == 5:
                sim.scale(2)
                sim.step()
    finally:
        inject_crashes(None)
    assert function.stats.killed >= 2 and function.stats.timeouts_injected >= 1, function.stats
    assert function.stats.timed_out == 0 and not function.stats.errors

    for later in (0.0, ORPHAN_GRACE, ORPHAN_GRACE + 1):  # clean passes, the last ones past the orphan grace
        out = run_pass(now=time.time() + later)
        assert not out.errors, out.errors
        sim.step()
    consistent(sim)
    assert sim.running() == 2
