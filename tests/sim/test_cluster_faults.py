"""Cluster faults (issue 36) played by the simulated kubelet, met by the real reconcile handler and termination
service with the real EC2 and Kubernetes adapters on the embedded AWS and API emulator; the simulated components
are stepped by hand.

* An instance whose Node never registers: its NodeClaim holds the pending pods (no launch after launch), and once
  the registration TTL (Karpenter's 15 minutes, ``liveness.go``) has passed the NodeClaim is deleted and its instance
  terminated; the next pass launches again.
* A Node going NotReady: its ``node.kubernetes.io/not-ready`` taints keep new pods off it, so one NodeClaim is
  launched for them, once, not one per pass.
* Pods whose deletion is never confirmed: the drain stops waiting for them a minute past their deletion time
  (Karpenter's ``IsStuckTerminating``), and the node is terminated.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest
from stepped_world import CLUSTER, NODECLAIMS, Sim, stepped_sim

from nodesmith.core.termination import TerminationRequest
from nodesmith.handlers import wiring
from nodesmith.services.provisioning.lifecycle import REGISTRATION_TTL_SECONDS
from nodesmith.services.termination.service import Status, run_round
from nodesmith.sim.cluster_faults import ClusterFaults
from nodesmith.sim.kube.admission import NOT_READY_TAINT, UNREACHABLE_TAINT

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.slow


@pytest.fixture
def sim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sim]:
    with stepped_sim(tmp_path, monkeypatch) as world:
        yield world


def test_nodes_that_never_register_hold_their_pods_until_the_registration_ttl_then_go(sim: Sim) -> None:
    sim.faults.never_register = 1.0
    sim.scale(3)
    sim.step()
    first = sim.reconcile()
    assert first.nodeclaims_created >= 1 and first.pods_scheduled == 3
    launched = sim.live_instances()
    claims = {c["metadata"]["name"] for c in sim.store.objects(NODECLAIMS)}
    assert len(launched) == len(claims) == first.nodeclaims_created

    for _ in range(3):  # the instances run, their Nodes never come: the pods wait for them, no launch after launch
        sim.step()
        again = sim.reconcile()
        assert again.nodeclaims_created == 0 and again.pods_awaiting_capacity == 3
    assert not sim.store.objects("nodes") and sim.live_instances() == launched
    assert sim.faults.counts()["never_registers"] == len(launched)

    early = sim.reconcile(now=time.time() + REGISTRATION_TTL_SECONDS - 60)
    assert early.nodeclaims_terminated == 0 and sim.live_instances() == launched

    sim.faults.never_register = 0.0  # the instances launched from now on register
    expired = sim.reconcile(now=time.time() + REGISTRATION_TTL_SECONDS + 1)
    assert expired.nodeclaims_terminated == len(claims)
    assert {k[0] for k in expired.terminated_by} == {"RegistrationTimeout"}
    assert not (launched & sim.live_instances())  # every unregistered instance terminated
    assert not claims & {c["metadata"]["name"] for c in sim.store.objects(NODECLAIMS)}

    for _ in range(3):
        sim.step()
        sim.reconcile()
    sim.step()
    assert sim.running() == 3


def test_the_registration_ttl_setting_shortens_the_wait(sim: Sim, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODESMITH_REGISTRATION_TTL_SECONDS", "120")
    wiring.reset()
    sim.faults.never_register = 1.0
    sim.scale(1)
    sim.step()
    sim.reconcile()
    launched = sim.live_instances()
    assert sim.reconcile(now=time.time() + 100).nodeclaims_terminated == 0
    assert sim.reconcile(now=time.time() + 121).terminated_by == {("RegistrationTimeout", "default", "spot"): 1}
    assert not launched & sim.live_instances()


def test_a_registration_ttl_outside_10_s_to_an_hour_is_refused_naming_its_variable() -> None:
    from nodesmith.handlers.settings import SettingsError, load_settings

    env = {"NODESMITH_CLUSTER_NAME": CLUSTER, "NODESMITH_CLUSTER_ENDPOINT": "https://k.invalid"}
    assert load_settings(env).registration_ttl_seconds == REGISTRATION_TTL_SECONDS
    with pytest.raises(SettingsError, match="NODESMITH_REGISTRATION_TTL_SECONDS"):
        load_settings({**env, "NODESMITH_REGISTRATION_TTL_SECONDS": "5"})


def test_a_node_gone_not_ready_takes_no_new_pods_and_its_replacement_is_launched_once(sim: Sim) -> None:
    sim.scale(1)
    sim.step()
    sim.reconcile()
    sim.step()
    sim.reconcile()
    sim.step()
    assert sim.running() == 1
    (node,) = sim.store.objects("nodes")

    sim.kubelet.faults = sim.faults = ClusterFaults(seed=3, not_ready=1.0)
    sim.step()
    sim.step()  # the node lifecycle controller (in the controllers) taints it by its Ready condition
    down = sim.store.snapshot("nodes", node["metadata"]["name"])
    assert down is not None
    key = UNREACHABLE_TAINT if sim.faults.stops_reporting(node["metadata"]["name"]) else NOT_READY_TAINT
    assert {(t["key"], t["effect"]) for t in down["spec"]["taints"] if t["key"] == key} == {
        (key, "NoSchedule"),
        (key, "NoExecute"),
    }
    assert sim.faults.counts()["goes_not_ready"] == 1
    sim.faults.not_ready = 0.0

    sim.scale(2)  # the new pod fits the NotReady node's room, but not its taints
    sim.step()
    first = sim.reconcile()
    assert first.pods_pending == 1 and first.nodeclaims_created == 1
    for _ in range(2):
        again = sim.reconcile()
        assert again.nodeclaims_created == 0
    sim.step()
    sim.reconcile()
    sim.step()
    assert sim.running() == 2
    assert len(sim.store.objects("nodes")) == 2


@pytest.mark.parametrize("silent", [False, True], ids=["ready-false", "ready-unknown"])
def test_pods_evicted_from_a_not_ready_node_run_again_on_one_new_nodeclaim(sim: Sim, silent: bool) -> None:
    """Taint-based eviction (Kubernetes docs, "Taint based evictions"): the pods of a node whose Ready condition is
    False or Unknown are evicted once their default 300 s toleration (compressed to 20 s here) runs out; they stay
    Terminating while the kubelet is down, their ReplicaSet replaces them, and the reconcile handler launches one
    NodeClaim for the replacements, not one per pass, and none before the eviction."""
    sim.store.graceful_pod_deletion = True
    sim.store.not_ready_toleration_seconds = sim.store.unreachable_toleration_seconds = 20
    sim.scale(1)
    for _ in range(3):
        sim.step()
        sim.reconcile()
    sim.step()
    assert sim.running() == 1
    (node,) = {p["spec"]["nodeName"] for p in sim.pods()}
    old = {p["metadata"]["name"] for p in sim.pods()}
    assert all(t.get("tolerationSeconds") == 20 for p in sim.pods() for t in p["spec"]["tolerations"]
               if t["effect"] == "NoExecute")  # fmt: skip

    faults = ClusterFaults(seed=3, not_ready=1.0, not_ready_seconds=60)
    faults.stops_reporting = lambda _name: silent  # type: ignore[method-assign]
    sim.kubelet.faults = sim.faults = faults
    t0 = time.time()
    sim.step(t0)
    assert faults.counts()["goes_not_ready"] == 1
    faults.not_ready = 0.0  # the replacement node stays Ready
    sim.step(t0 + 1)
    taint = UNREACHABLE_TAINT if silent else NOT_READY_TAINT
    tainted = sim.store.get("nodes", node)["spec"]["taints"]
    assert {(taint, "NoSchedule"), (taint, "NoExecute")} <= {(t["key"], t["effect"]) for t in tainted}

    sim.step(t0 + 19)
    assert sim.running() == 1 and not any(p["metadata"].get("deletionTimestamp") for p in sim.pods())
    assert sim.reconcile(now=t0 + 19).nodeclaims_created == 0  # bound, Running pods: nothing to provision

    sim.step(t0 + 21)  # the tolerations ran out: evicted, Terminating (the kubelet is down), replaced
    sim.step(t0 + 21)
    evicted = [p for p in sim.pods() if p["metadata"]["name"] in old]
    assert len(evicted) == 1 and all(p["metadata"].get("deletionTimestamp") for p in evicted)
    fresh = [p for p in sim.pods() if p["metadata"]["name"] not in old]
    assert len(fresh) == 1 and not any(p["spec"].get("nodeName") for p in fresh)

    first = sim.reconcile(now=t0 + 22)
    assert first.pods_pending == 1 and first.nodeclaims_created == 1
    for _ in range(2):
        assert sim.reconcile(now=t0 + 23).nodeclaims_created == 0
    for _ in range(3):
        sim.step(t0 + 24)
        sim.reconcile(now=t0 + 24)
    running = [p for p in sim.pods() if p["status"].get("phase") == "Running" and p["metadata"]["name"] not in old]
    assert len(running) == 1 and {p["spec"]["nodeName"] for p in running} != {node}
    assert len(sim.store.objects(NODECLAIMS)) == 2

    sim.store.clock = lambda: time.time() + 120  # the node is back: its kubelet confirms the evicted pods' deletion
    sim.step(t0 + 61)
    sim.step(t0 + 61)
    assert not sim.store.pods_on(node)
    ready = sim.store.get("nodes", node)
    assert not [t for t in ready["spec"].get("taints") or [] if t["key"] in (NOT_READY_TAINT, UNREACHABLE_TAINT)]


def test_a_drain_stops_waiting_for_pods_stuck_terminating_and_the_node_goes(sim: Sim) -> None:
    sim.store.graceful_pod_deletion = True  # a bound pod is Terminating until its kubelet confirms the deletion
    grace = {"terminationGracePeriodSeconds": 5}
    sim.store.mutate(
        "deployments.apps", "inflate", lambda d: d["spec"]["template"]["spec"].update(grace), namespace="default"
    )
    sim.scale(2)
    for _ in range(3):
        sim.step()
        sim.reconcile()
    sim.step()
    assert sim.running() == 2
    (claim, *_) = sim.store.objects(NODECLAIMS)
    name, instance_id = claim["metadata"]["name"], claim["status"]["providerID"].rsplit("/", 1)[-1]
    node = claim["status"]["nodeName"]
    sim.store.delete(NODECLAIMS, name)  # kubectl delete nodeclaim: the termination finalizer holds it

    settings = wiring.get_settings()
    ports, tuning = wiring.ports(settings), wiring.termination_settings(settings)
    request = TerminationRequest(nodeclaim=name, instanceId=instance_id, reason="Drifted")
    now = time.time()
    first = run_round(ports=ports, settings=tuning, request=request, now=now, attempt=1)
    assert first.status is Status.DRAINING
    sim.faults.stuck_terminating = 1.0
    evicted = [p for p in sim.pods() if p["spec"].get("nodeName") == node]
    assert evicted and all(p["metadata"].get("deletionTimestamp") for p in evicted)

    sim.store.clock = lambda: time.time() + 10  # past the pods' deletion time: the kubelet confirms none of them
    sim.step(now + 10)
    assert sim.faults.counts()["stuck_terminating"] == len(evicted)
    still = [p for p in sim.pods() if p["spec"].get("nodeName") == node]
    assert len(still) == len(evicted)
    waiting = run_round(ports=ports, settings=tuning, request=request, now=now + 10, attempt=2)
    assert waiting.status is Status.DRAINING  # terminating pods are waited for, at first

    done = run_round(ports=ports, settings=tuning, request=request, now=now + 5 + 61, attempt=3)
    assert done.status is Status.TERMINATED, done
    assert instance_id not in sim.live_instances()
    assert sim.store.snapshot(NODECLAIMS, name) is None


def test_decisions_are_seeded_made_once_and_counted() -> None:
    def draws(seed: int) -> list[bool]:
        faults = ClusterFaults(seed=seed, never_register=0.5)
        return [faults.registers(f"i-{n}") for n in range(64)]

    assert draws(7) == draws(7) and draws(7) != draws(8)
    faults = ClusterFaults(seed=7, never_register=0.5, stuck_terminating=1.0)
    first = [faults.registers(f"i-{n}") for n in range(64)]
    assert [faults.registers(f"i-{n}") for n in range(64)] == first  # decided once per instance
    assert faults.stays_terminating("uid-1") and faults.stays_terminating("uid-1")
    assert faults.counts() == {"never_registers": first.count(False), "goes_not_ready": 0, "stuck_terminating": 1}


@pytest.mark.parametrize("seed", range(20))
def test_a_few_launches_meet_the_configured_rate_of_each_fault(seed: int) -> None:
    """A chaos run launches about ten instances: at 0.1 exactly one of them never registers, for every seed (10
    independent draws at 0.1 would give none a third of the time); the faults still fall at seeded positions."""
    faults = ClusterFaults(seed=seed, never_register=0.1, not_ready=0.25, stuck_terminating=0.05)
    assert [faults.registers(f"i-{n}") for n in range(10)].count(False) == 1
    assert [faults.goes_not_ready(f"node-{n}") for n in range(8)].count(True) == 2
    assert [faults.stays_terminating(f"uid-{n}") for n in range(200)].count(True) == 10
    assert faults.counts() == {"never_registers": 1, "goes_not_ready": 2, "stuck_terminating": 10}
    assert faults.drawn() == {"never_registers": 10, "goes_not_ready": 8, "stuck_terminating": 200}


def test_where_the_faults_fall_depends_on_the_seed() -> None:
    def hits(seed: int) -> list[int]:
        faults = ClusterFaults(seed=seed, never_register=0.1)
        return [n for n in range(100) if not faults.registers(f"i-{n}")]

    assert len({tuple(hits(seed)) for seed in range(10)}) == 10
    assert all(len(hits(seed)) == 10 for seed in range(10))


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [({"not_ready": 1.5}, "not_ready"), ({"never_register": -0.1}, "never_register"),
     ({"not_ready_seconds": 0}, "not_ready_seconds")],
)  # fmt: skip
def test_a_rate_outside_0_1_or_a_non_positive_duration_is_refused_by_name(kwargs: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        ClusterFaults(**kwargs)
