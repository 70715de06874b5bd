"""Watch mode's pending-pod set (PendingPodWatch over the real KubeCluster and the emulator) stays right while the
API server cuts watch streams, expires their versions and throttles or fails lists: every pod that became pending
is in it, every pod bound since is not."""

from __future__ import annotations

import threading
from typing import Any

from nodesmith.adapters.kube import KubeCluster, build_api_client
from nodesmith.adapters.kube.retry import RetryPolicy
from nodesmith.services.provisioning.pod_watch import PendingPodWatch
from nodesmith.sim.kube import KubeEmulator, KubeFaults, Store

UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}


def pending_pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
        "status": {"phase": "Pending", "conditions": [UNSCHEDULABLE]},
    }


def test_the_pending_set_stays_right_through_cut_expired_and_refused_watches() -> None:
    with KubeEmulator(store=Store(history=200)) as kube:
        api = build_api_client(cluster_endpoint=kube.endpoint, kube_auth="none")
        cluster = KubeCluster(api_client=api, retry=RetryPolicy(sleep=lambda _: None))
        kube.faults = faults = KubeFaults(
            seed=9,
            rates={
                "watch pods": {"cut": 0.5, "expired": 0.3, "throttle": 0.1},
                "list pods": {"throttle": 0.3, "error": 0.2},
            },
            retry_after_seconds=0,
            cut_after_events=3,
        )
        changed = threading.Event()
        tracker = PendingPodWatch(cluster=cluster, on_change=changed.set, retry_seconds=0.01, stream_seconds=5)
        assert tracker.start(wait_seconds=20)
        for i in range(20):
            kube.store.create("pods", pending_pod(f"p{i}"))
        for i in range(0, 20, 2):
            kube.store.mutate("pods", f"p{i}", lambda p: p["spec"].update(nodeName="n1"), namespace="default")
        expected = {f"default/p{i}" for i in range(1, 20, 2)}
        for _ in range(400):  # until the watch caught up (it is woken by each change it applies)
            if tracker.pending() == expected:
                break
            changed.wait(0.05)
            changed.clear()
        tracker.stop()
        assert tracker.pending() == expected
        assert faults.counts()["cut"] + faults.counts()["expired"] >= 1
