"""The milestones of ``bench/interruptions.py``: :class:`Monitor` follows the API emulator's store and
records when each interrupted node is cordoned, each replacement NodeClaim launched, and when every
Deployment pod runs again on a node that was not interrupted; it counts PodDisruptionBudget violations
and Ready pods removed with their node."""

from __future__ import annotations

import bisect
import itertools
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from interruptions_world import DISRUPTED, _conditions

if TYPE_CHECKING:
    from collections.abc import Callable


class Monitor:
    """Follows the emulator's store (a watch subscription) and records when the milestones happen."""

    def __init__(self, *, store: Any, nodes: set[str], initial_claims: set[str], pdb_apps: dict[str, int]) -> None:
        self.store = store
        self.nodes = nodes  # interrupted node names
        self.initial_claims = initial_claims
        self.pdb_apps = pdb_apps  # app -> replicas
        self.t0 = 0.0
        self.cordoned: dict[str, float] = {}
        self.launched: dict[str, float] = {}
        self.pods: dict[str, tuple[str, str, bool]] = {}  # key -> (app, node, healthy)
        self.healthy_by_app: Counter[str] = Counter()
        self.safe = 0  # healthy pods on nodes that were not interrupted
        self.total_pods = 0
        self.all_running_at: float | None = None
        self.violations = 0
        self.in_violation: set[str] = set()
        self.details: list[dict[str, Any]] = []
        self.deleted_while_ready: list[tuple[str, str, bool]] = []  # (pod key, node, node already deleted)
        self.removed_nodes: set[str] = set()
        # budgeted apps: when each pod began terminating (evicted or deleted) and each new pod became Ready
        self.terminating: set[str] = set()
        self.budgeted_terminations: dict[str, list[float]] = {}
        self.budgeted_ready: dict[str, list[float]] = {}
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.errors: list[str] = []
        # CPU seconds by part of the bench (:func:`interruptions.cpu_by_part`), read at start and at the last cordon
        self.cpu_probe: Callable[[], dict[str, float]] | None = None
        self.cpu_at_start: dict[str, float] = {}
        self.cpu_at_last_cordon: dict[str, float] = {}
        self.sub = store.subscribe(resources=["nodes", "pods", "nodeclaims.karpenter.sh"])
        for pod in store.objects("pods"):
            self._pod(pod, deleted=False)

    def start(self, t0: float, total_pods: int) -> threading.Thread:
        self.t0 = t0
        self.total_pods = total_pods
        if self.cpu_probe is not None:
            self.cpu_at_start = self.cpu_probe()
        thread = threading.Thread(target=self._run, name="bench-monitor", daemon=True)
        thread.start()
        return thread

    def _run(self) -> None:
        while not self.stop.is_set():
            event = self.sub.get(timeout=0.2)
            if event is None:
                continue
            for ev in [event, *self.sub.drain()]:
                now = time.monotonic() - self.t0
                with self.lock:
                    try:
                        self._handle(ev, now)
                    except Exception as exc:  # a bench bug must not silently stop the measurements
                        self.errors.append(f"{type(exc).__name__}: {exc}")

    def _handle(self, ev: Any, now: float) -> None:
        obj = ev.object
        name = obj["metadata"]["name"]
        if ev.resource == "nodes":
            if ev.type == "DELETED":
                self.removed_nodes.add(name)
                return
            spec = obj.get("spec") or {}
            disrupted = any(t.get("key") == DISRUPTED for t in spec.get("taints") or [])
            if name in self.nodes and name not in self.cordoned and spec.get("unschedulable") and disrupted:
                self.cordoned[name] = now
                if len(self.cordoned) == len(self.nodes) and self.cpu_probe is not None:
                    self.cpu_at_last_cordon = self.cpu_probe()
        elif ev.resource == "nodeclaims.karpenter.sh":
            fresh = name not in self.initial_claims and name not in self.launched and ev.type != "DELETED"
            if fresh and _conditions(obj).get("Launched") == "True":
                self.launched[name] = now
        else:
            self._pod(obj, deleted=ev.type == "DELETED")
            self._check(now)

    def _pod(self, pod: dict[str, Any], *, deleted: bool) -> None:
        """Update the pod's entry and the running totals (healthy per app, healthy on safe nodes)."""
        meta = pod["metadata"]
        key = f"{meta.get('namespace')}/{meta['name']}"
        app = (meta.get("labels") or {}).get("app", "")
        old = self.pods.pop(key, None)
        if deleted and old is not None and old[2]:
            self.deleted_while_ready.append((key, old[1], old[1] in self.removed_nodes))
        budgeted = app in self.pdb_apps and bool(self.t0)
        if budgeted and (deleted or meta.get("deletionTimestamp")) and key not in self.terminating:
            self.terminating.add(key)  # evicted or deleted: terminating, or gone at once without a grace period
            self.budgeted_terminations.setdefault(app, []).append(time.monotonic() - self.t0)
        if old is not None and old[2]:
            self.healthy_by_app[old[0]] -= 1
            self.safe -= old[1] not in self.nodes
        if deleted or not app:
            return
        node = (pod.get("spec") or {}).get("nodeName") or ""
        healthy = bool(
            not meta.get("deletionTimestamp")
            and (pod.get("status") or {}).get("phase") == "Running"
            and _conditions(pod).get("Ready") == "True"
        )
        self.pods[key] = (app, node, healthy)
        if budgeted and healthy and (old is None or not old[2]) and node not in self.nodes:
            self.budgeted_ready.setdefault(app, []).append(time.monotonic() - self.t0)
        if healthy:
            self.healthy_by_app[app] += 1
            self.safe += node not in self.nodes

    def budget_chains(self, before: float) -> dict[str, Any]:
        """How the budgeted Deployments' evictions (maxUnavailable 1) followed one another before ``before``
        (seconds from t0; the deadline's force-deletions come after): per app, when its first pod began to
        terminate and how many did, the seconds between successive ones, and from each to the next Ready
        replacement."""
        gaps: list[float] = []
        to_ready: list[float] = []
        firsts: list[float] = []
        counts: list[float] = []
        for app in self.pdb_apps:
            times = sorted(t for t in self.budgeted_terminations.get(app, []) if t < before)
            counts.append(len(times))
            if times:
                firsts.append(times[0])
            gaps += [b - a for a, b in itertools.pairwise(times)]
            ready = sorted(self.budgeted_ready.get(app, []))
            for t in times:
                at = bisect.bisect_left(ready, t)  # the first replacement Ready at or after it
                if at < len(ready):
                    to_ready.append(ready[at] - t)
        return {
            "first_termination": firsts,
            "terminations_per_app": counts,
            "between_terminations": gaps,
            "termination_to_ready": to_ready,
        }

    def _check(self, now: float) -> None:
        if self.all_running_at is None and self.safe >= self.total_pods:
            self.all_running_at = now
        for app, replicas in self.pdb_apps.items():
            below = self.healthy_by_app[app] < replicas - 1  # maxUnavailable: 1
            if below and app not in self.in_violation:
                self.violations += 1
                self.in_violation.add(app)
                if len(self.details) < 5:
                    unhealthy = sorted(node for a, node, healthy in self.pods.values() if a == app and not healthy)
                    self.details.append({"t": round(now, 2), "app": app, "healthy": self.healthy_by_app[app],
                                         "unhealthy_on": unhealthy})  # fmt: skip
            elif not below:
                self.in_violation.discard(app)
