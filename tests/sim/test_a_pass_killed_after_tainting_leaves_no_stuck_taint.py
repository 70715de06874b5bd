"""A reconcile invocation killed between tainting a node ``karpenter.sh/disrupted`` and recording the disruption command
(issue 36): the scheduled reconcile handler run as Lambda runs it, against the embedded AWS and API emulator through
the real adapters. The next pass removes the taint nothing accounts for, as Karpenter's disruption controller does for
nodes "not in the queue and not deleting", and the empty node is consolidated afterwards within its budget; a tainted
node whose termination was requested keeps its taint."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest
from stepped_world import NODECLAIMS, Sim, invoke_scheduled, reconcile_function, stepped_sim

from nodesmith.core.drain import DISRUPTED_TAINT
from nodesmith.handlers import reconcile as reconcile_handler
from nodesmith.handlers import wiring
from nodesmith.services.disruption import command
from nodesmith.services.disruption.state import CONDITION_CANDIDATE, CONDITION_DISRUPTING
from nodesmith.services.reconciler import container
from nodesmith.services.termination.requests import request_termination
from nodesmith.sim.lambda_runtime import AsyncInvocations, install_function_timeouts, kill_invocation

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.slow


class ShiftedTime:
    """The ``time`` module as the reconcile handler and its passes see it, its wall clock ``offset`` seconds ahead
    (so passes run past ``consolidateAfter`` without waiting)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def time(self) -> float:
        return time.time() + self.offset


@pytest.fixture
def sim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sim]:
    install_function_timeouts()
    with stepped_sim(tmp_path, monkeypatch) as world:
        monkeypatch.setenv("NODESMITH_DISRUPTION", "true")
        monkeypatch.setenv("NODESMITH_DISRUPTION_VALIDATION_DELAY_SECONDS", "0")
        wiring.reset()
        yield world


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> ShiftedTime:
    shifted = ShiftedTime()
    monkeypatch.setattr(reconcile_handler, "time", shifted)
    monkeypatch.setattr(container, "time", shifted)
    return shifted


def one_empty_node(sim: Sim, function: AsyncInvocations) -> tuple[str, str]:
    """Scale ``inflate`` to one pod and back to zero: one Ready, empty node. Returns (node, NodeClaim) names."""
    sim.scale(1)
    sim.step()
    invoke_scheduled(function)
    sim.step()
    invoke_scheduled(function)
    sim.step()
    assert sim.running() == 1
    sim.scale(0)
    sim.step()
    (claim,) = sim.store.objects(NODECLAIMS)
    return claim["status"]["nodeName"], claim["metadata"]["name"]


def is_tainted(sim: Sim, node: str) -> bool:
    spec = sim.store.get("nodes", node)["spec"]
    return any(t["key"] == DISRUPTED_TAINT.key for t in spec.get("taints") or [])


def claim_of(sim: Sim, name: str) -> dict[str, Any]:
    return next(c for c in sim.store.objects(NODECLAIMS) if c["metadata"]["name"] == name)


def condition(claim: dict[str, Any], kind: str) -> bool:
    conditions = (claim.get("status") or {}).get("conditions") or []
    return any(c["type"] == kind and c["status"] == "True" for c in conditions)


def test_a_pass_killed_right_after_tainting_leaves_a_taint_the_next_pass_removes(
    sim: Sim, clock: ShiftedTime, monkeypatch: pytest.MonkeyPatch
) -> None:
    function = reconcile_function()
    node, claim = one_empty_node(sim, function)
    clock.offset = 30.0
    invoke_scheduled(function)  # sees the pod gone: consolidateAfter (5 s) counts from here
    clock.offset = 40.0
    invoke_scheduled(function)  # emptiness: recorded as a candidate
    assert condition(claim_of(sim, claim), CONDITION_CANDIDATE)

    real_cordon = command.cordon_node

    def cordon_then_die(**kwargs: Any) -> bool:
        real_cordon(**kwargs)
        kill_invocation("killed right after tainting")

    monkeypatch.setattr(command, "cordon_node", cordon_then_die)
    clock.offset = 41.0
    invoke_scheduled(function)
    assert function.stats.killed == 1
    assert is_tainted(sim, node) and sim.store.get("nodes", node)["spec"]["unschedulable"] is True
    assert not condition(claim_of(sim, claim), CONDITION_DISRUPTING) and not claim_of(sim, claim)["metadata"].get(
        "deletionTimestamp"
    )
    monkeypatch.setattr(command, "cordon_node", real_cordon)

    clock.offset = 42.0
    released = invoke_scheduled(function)
    assert isinstance(released, dict), released
    assert not is_tainted(sim, node) and not sim.store.get("nodes", node)["spec"].get("unschedulable")

    for offset in (43.0, 44.0, 45.0):  # candidate again, validated, executed
        clock.offset = offset
        invoke_scheduled(function)
        if claim_of(sim, claim)["metadata"].get("deletionTimestamp"):
            break
    assert claim_of(sim, claim)["metadata"].get("deletionTimestamp"), "the empty node was never consolidated"


def test_a_tainted_node_whose_termination_was_requested_keeps_its_taint(sim: Sim, clock: ShiftedTime) -> None:
    function = reconcile_function()
    sim.scale(1)
    sim.step()
    invoke_scheduled(function)
    sim.step()
    invoke_scheduled(function)
    sim.step()
    (claim,) = sim.store.objects(NODECLAIMS)
    node = claim["status"]["nodeName"]
    cluster = wiring.build_cluster(wiring.get_settings())
    cluster.taint_and_cordon(node_name=node, taint=DISRUPTED_TAINT)  # as the interruption function does, then:
    nodeclaim = cluster.get_nodeclaim(name=claim["metadata"]["name"])
    assert nodeclaim is not None
    request_termination(cluster=cluster, nodeclaim=nodeclaim, reason="SpotInterrupted", now=time.time())

    clock.offset = 30.0
    out = invoke_scheduled(function)
    assert isinstance(out, dict), out
    assert is_tainted(sim, node)
