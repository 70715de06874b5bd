"""A consolidation's trials each schedule the cluster's pending pods again (Karpenter's ``SimulateScheduling``
adds them to every trial); what the scheduler derives from a pod (its unrelaxed constraints and requirements) is
derived once per pass and shared by every trial, and the decision is the one per-trial derivations make."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from disruption_factories import NOW, catalogue, make_node, make_nodepool, make_pod

from nodesmith.core.disruption import DisruptionSnapshot, decide
from nodesmith.core.scheduling import pods as scheduling_pods

if TYPE_CHECKING:
    import pytest


def _snapshot() -> DisruptionSnapshot:
    pool = make_nodepool(policy="WhenEmptyOrUnderutilized", budgets=[{"nodes": "100%"}])
    cluster = [make_node(f"light-{i}", instance_type="m5.2xlarge", pod_specs=[("500m", "512Mi")]) for i in range(5)]
    pending = [make_pod(f"waiting-{i}", cpu="1", memory="1Gi") for i in range(3)]
    return DisruptionSnapshot(nodes=cluster, nodepools=[pool], instance_types=catalogue(), pending_pods=pending)


def _counting(monkeypatch: pytest.MonkeyPatch) -> tuple[Counter[str], Counter[str]]:
    """Count, per pod name, the unrelaxed constraints derived and the PodData built."""
    derived: Counter[str] = Counter()
    built: Counter[str] = Counter()
    from_pod, init = scheduling_pods.Constraints.from_pod, scheduling_pods.PodData.__init__

    def counting_from_pod(pod: Any, **kwargs: Any) -> Any:
        derived[pod.name] += 1
        return from_pod(pod, **kwargs)

    def counting_init(self: Any, pod: Any, constraints: Any, volume: Any = ()) -> None:
        built[pod.name] += 1
        init(self, pod, constraints, volume)

    monkeypatch.setattr(scheduling_pods.Constraints, "from_pod", staticmethod(counting_from_pod))
    monkeypatch.setattr(scheduling_pods.PodData, "__init__", counting_init)
    return derived, built


def test_every_trial_shares_what_is_derived_from_each_pending_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = _snapshot()
    with monkeypatch.context() as unshared:  # every trial derives its own: the decision to match
        unshared.setattr(scheduling_pods.PodDataCache, "serves", lambda self, volumes: False)
        derived, _ = _counting(unshared)
        before = decide(snapshot, now=NOW)
        assert derived["waiting-0"] >= 2, derived  # the decision ran several trials, each with the pending pods

    derived, built = _counting(monkeypatch)
    after = decide(snapshot, now=NOW)

    assert after.command == before.command and after.rejected == before.rejected
    assert after.command is not None  # the light nodes are replaced by one
    waiting = [name for name in derived if name.startswith("waiting-")]
    assert len(waiting) == 3, derived
    assert all(derived[name] == 1 for name in waiting), derived
    assert all(built[name] == 1 for name in waiting), built
