"""What ``bench/interruptions.py`` watches in the cluster: :class:`Monitor` follows the API emulator's store and
records when each interrupted node is cordoned and removed, each new NodeClaim launched, and when every
Deployment pod runs again on a node that was not interrupted; it counts PodDisruptionBudget violations and Ready
pods removed with their node."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

DISRUPTED = "karpenter.sh/disrupted"


def conditions(obj: dict[str, Any]) -> dict[str, str]:
    """``{type: status}`` of an object's ``status.conditions``."""
    return {c.get("type", ""): c.get("status", "") for c in (obj.get("status") or {}).get("conditions") or []}


class Monitor:
    """Follows the store (a watch subscription from construction) and records the milestones in seconds from
    :meth:`start`'s ``t0`` (monotonic). ``nodes`` are the interrupted nodes, ``budgeted`` app -> replicas behind a
    ``maxUnavailable: 1`` budget. Read the fields under :attr:`lock`."""

    def __init__(self, *, store: Any, nodes: set[str], budgeted: dict[str, int]) -> None:
        self.nodes, self.budgeted, self.t0, self.total_pods = nodes, budgeted, 0.0, 0
        self.initial_claims = {c["metadata"]["name"] for c in store.objects("nodeclaims.karpenter.sh")}
        self.cordoned: dict[str, float] = {}
        self.launched: dict[str, float] = {}
        self.removed: dict[str, float] = {}
        self.pods: dict[str, tuple[str, str, bool]] = {}  # key -> (app, node, healthy)
        self.healthy_by_app: Counter[str] = Counter()
        self.safe = 0  # healthy Deployment pods on nodes that were not interrupted
        self.all_running_at: float | None = None
        self.violations, self.in_violation, self.violation_details = 0, set[str](), list[dict[str, Any]]()
        self.lost_with_node: set[str] = set()  # Ready pods deleted after their node was (the pod GC): never evicted
        self.errors: list[str] = []
        self.lock, self.stop = threading.Lock(), threading.Event()
        self._sub = store.subscribe(resources=["nodes", "pods", "nodeclaims.karpenter.sh"])
        for pod in store.objects("pods"):
            self._pod(pod, deleted=False)

    def start(self, t0: float, total_pods: int) -> None:
        """Start recording (in a thread) from ``t0``."""
        self.t0, self.total_pods = t0, total_pods
        threading.Thread(target=self._run, name="bench-monitor", daemon=True).start()

    def _run(self) -> None:
        while not self.stop.is_set():
            event = self._sub.get(timeout=0.2)
            for ev in [event, *self._sub.drain()] if event is not None else []:
                with self.lock:
                    try:
                        self._handle(ev, time.monotonic() - self.t0)
                    except Exception as exc:  # a bench bug must not silently stop the measurements
                        self.errors.append(f"{type(exc).__name__}: {exc}")

    def _handle(self, ev: Any, now: float) -> None:
        obj = ev.object
        name = obj["metadata"]["name"]
        if ev.resource == "nodes":
            spec = obj.get("spec") or {}
            tainted = any(t.get("key") == DISRUPTED for t in spec.get("taints") or [])
            if ev.type == "DELETED":
                self.removed.setdefault(name, now)
            elif name in self.nodes and name not in self.cordoned and spec.get("unschedulable") and tainted:
                self.cordoned[name] = now
        elif ev.resource == "nodeclaims.karpenter.sh":
            fresh = name not in self.initial_claims and name not in self.launched and ev.type != "DELETED"
            if fresh and conditions(obj).get("Launched") == "True":
                self.launched[name] = now
        else:
            self._pod(obj, deleted=ev.type == "DELETED")
            self._check(now)

    def _pod(self, pod: dict[str, Any], *, deleted: bool) -> None:
        meta = pod["metadata"]
        key, app = f"{meta.get('namespace')}/{meta['name']}", (meta.get("labels") or {}).get("app", "")
        old = self.pods.pop(key, None)
        if old is not None and old[2]:
            self.healthy_by_app[old[0]] -= 1
            self.safe -= old[1] not in self.nodes
            if deleted and old[1] in self.removed:
                self.lost_with_node.add(key)
        if deleted or not app:
            return
        node = (pod.get("spec") or {}).get("nodeName") or ""
        healthy = not meta.get("deletionTimestamp") and conditions(pod).get("Ready") == "True"
        self.pods[key] = (app, node, healthy)
        if healthy:
            self.healthy_by_app[app] += 1
            self.safe += node not in self.nodes

    def _check(self, now: float) -> None:
        if self.all_running_at is None and self.safe >= self.total_pods:
            self.all_running_at = now
        for app, replicas in self.budgeted.items():
            if self.healthy_by_app[app] >= replicas - 1:  # maxUnavailable: 1
                self.in_violation.discard(app)
            elif app not in self.in_violation:
                self.violations += 1
                self.in_violation.add(app)
                if len(self.violation_details) < 5:
                    self.violation_details.append({"t": round(now, 2), "app": app, "healthy": self.healthy_by_app[app]})
