"""A simulated kube-scheduler (plus the kubelet's "start the containers"): binds pending pods to
Nodes they fit and marks the others ``PodScheduled=False, reason=Unschedulable``.

Filters, as the default scheduler profile's plugins do (``NodeUnschedulable``, ``TaintToleration``,
``NodeAffinity``, ``NodeResourcesFit``; https://kubernetes.io/docs/reference/scheduling/config/):

* the Node is Ready, not cordoned (``spec.unschedulable``) and not being deleted;
* every ``NoSchedule``/``NoExecute`` taint is tolerated;
* ``nodeSelector`` matches and, when set, one required node-affinity term matches;
* requests (cpu millicores, memory bytes, ``pods: 1`` and extended resources) fit the Node's
  allocatable minus what bound, non-terminal pods request.

Pods are taken by priority (desc), then creation time, then name; Nodes are tried by name and the
first that fits wins. A pod that fits no Node waits before it is tried again, as in kube-scheduler's
backoff queue (1 s, doubling with each failed attempt, at most 10 s: ``podInitialBackoffSeconds`` and
``podMaxBackoffSeconds``), unless a schedulable Node appears (added, Ready or uncordoned) or a pod bound
to a schedulable Node goes, the cluster events that move kube-scheduler's unschedulable pods back to its
queue. Within a step, once a pod has fit no Node, a pod of the same shape (requests, tolerations,
``nodeSelector``, required node affinity) is given the same reasons without trying the Nodes again, until a
pod is bound and the Nodes' usage changes. A bound pod is then marked ``Running`` and ``Ready`` straight away
(the images are assumed pulled). Not simulated: pod (anti-)affinity, topology spread, host ports, volumes,
preemption; the unschedulable message mirrors kube-scheduler's ``0/N nodes are available: ...``.

Like kube-scheduler, whose informers keep its cache of pods and nodes current from watch events, a step
after the first updates its view of the pods from the store's events since the previous step (pods waiting
to be bound, pods bound but not started, what each Node's pods request) instead of reading every pod, and
reads everything again once every :data:`~nodesmith.sim.changes.RESYNC_SECONDS`, so a step costs in
proportion to the changes, not to the cluster.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nodesmith.core.objects import ObjectParseError, node_from_dict, pod_from_dict
from nodesmith.core.requirements import Requirement
from nodesmith.core.resources import add
from nodesmith.sim.changes import RESYNC_SECONDS, ChangeFeed
from nodesmith.sim.kube.errors import ApiError
from nodesmith.sim.kube.timefmt import rfc3339
from nodesmith.sim.parsed import ParseCache

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from nodesmith.core.model import Node, NodeSelectorTerm, Pod
    from nodesmith.core.resources import Resources
    from nodesmith.sim.kube.events import WatchEvent
    from nodesmith.sim.kube.store import Store

__all__ = ["SimScheduler", "why_not"]

LOG = logging.getLogger(__name__)

_DEFAULT_SCHEDULER = "default-scheduler"
_CORDONED = "node(s) were unschedulable"
_BACKOFF_INITIAL_SECONDS, _BACKOFF_MAX_SECONDS = 1.0, 10.0
"""kube-scheduler's ``podInitialBackoffSeconds`` and ``podMaxBackoffSeconds`` defaults."""


def _term_matches(term: NodeSelectorTerm, labels: Mapping[str, str]) -> bool:
    for expr in term.match_expressions:
        try:
            req = Requirement.new(expr.key, expr.operator, expr.values)
        except ValueError:
            return False
        value = labels.get(req.key)
        if value is None:
            if expr.operator not in ("NotIn", "DoesNotExist"):
                return False
        elif not req.has(value):
            return False
    return True


def why_not(pod: Pod, node: Node, used: Mapping[str, int]) -> str | None:
    """Why ``pod`` cannot go on ``node`` (a kube-scheduler-style reason), or None when it fits.

    ``used`` is what pods already bound to the node request (cpu millicores, memory bytes, pods).
    """
    if node.unschedulable:
        return _CORDONED
    for taint in node.taints:
        if taint.effect == "PreferNoSchedule":
            continue
        if not any(t.tolerates(taint) for t in pod.tolerations):
            value = f": {taint.value}" if taint.value else ""
            return f"node(s) had untolerated taint {{{taint.key}{value}}}"
    for key, value in pod.node_selector.items():
        if node.labels.get(key) != value:
            return "node(s) didn't match Pod's node affinity/selector"
    if pod.required_node_affinity and not any(_term_matches(t, node.labels) for t in pod.required_node_affinity):
        return "node(s) didn't match Pod's node affinity/selector"
    for name, amount in sorted(pod.requests.items()):
        if amount > 0 and used.get(name, 0) + amount > node.allocatable.get(name, 0):
            return "Too many pods" if name == "pods" else f"Insufficient {name}"
    return None


PodKey = tuple[str, str]
"""(namespace, name) of a pod."""

_Shape = tuple[Any, ...]
"""What :func:`why_not` reads of a pod: two pods of one shape fit, or fail to fit, the same nodes for the same
reasons."""


def _shape(pod: Pod) -> _Shape:
    return (
        tuple(sorted(pod.requests.items())),
        pod.tolerations,
        tuple(sorted(pod.node_selector.items())),
        pod.required_node_affinity,
    )


def _pod_key(raw: Mapping[str, Any]) -> PodKey:
    meta = raw.get("metadata") or {}
    return meta.get("namespace") or "default", meta.get("name") or ""


@dataclass(slots=True)
class _PodView:
    """The scheduler's cache of the pods: each pod's snapshot and parse (None: unparseable), the pods waiting
    for this scheduler, the bound ones not started yet, the keys of the non-terminal pods bound to each Node,
    and what those request per Node (recomputed for the Nodes whose pods changed)."""

    pods: dict[PodKey, tuple[dict[str, Any], Pod | None]] = field(default_factory=dict)
    pending: set[PodKey] = field(default_factory=set)
    starting: set[PodKey] = field(default_factory=set)
    bound: dict[str, set[PodKey]] = field(default_factory=dict)
    used: dict[str, Resources] = field(default_factory=dict)
    dirty: set[str] = field(default_factory=set)

    def put(self, raw: dict[str, Any], pod: Pod | None) -> None:
        """Record ``raw`` (a pod's current snapshot) and its parse, replacing what was known of that pod."""
        key = _pod_key(raw)
        self.remove(key)
        self.pods[key] = (raw, pod)
        if pod is None or pod.is_terminal:
            return
        if pod.node_name:
            # Terminating pods hold their resources until the kubelet confirms they are gone.
            self.bound.setdefault(pod.node_name, set()).add(key)
            self.dirty.add(pod.node_name)
            if pod.phase == "Pending" and pod.deletion_timestamp is None:
                self.starting.add(key)
        elif pod.deletion_timestamp is None and _default_scheduler(raw):
            self.pending.add(key)

    def remove(self, key: PodKey) -> None:
        """Forget the pod ``key`` (deleted, or about to be replaced by a newer snapshot)."""
        known = self.pods.pop(key, None)
        self.pending.discard(key)
        self.starting.discard(key)
        pod = None if known is None else known[1]
        if pod is not None and pod.node_name:
            on_node = self.bound.get(pod.node_name)
            if on_node is not None:
                on_node.discard(key)
                self.dirty.add(pod.node_name)

    def requests_by_node(self) -> dict[str, Resources]:
        """What the non-terminal pods bound to each Node request (cpu millicores, memory bytes, pods, ...)."""
        for node in self.dirty:
            used: Resources = {}
            for key in self.bound.get(node, ()):
                pod = self.pods[key][1]
                if pod is not None:
                    used = add(used, pod.requests)
            if used:
                self.used[node] = used
            else:
                self.used.pop(node, None)
        self.dirty.clear()
        return self.used


def _default_scheduler(raw: Mapping[str, Any]) -> bool:
    return bool((raw.get("spec") or {}).get("schedulerName", _DEFAULT_SCHEDULER) == _DEFAULT_SCHEDULER)


class SimScheduler:
    """Binds pending pods (``schedulerName`` default) to fitting Ready Nodes; see the module docstring.

    ``resync_seconds`` (default :data:`~nodesmith.sim.changes.RESYNC_SECONDS`; 0: always) is how often a
    step reads every pod again instead of applying the changes since the step before.
    """

    watch = ("pods", "nodes")

    def __init__(self, *, store: Store, resync_seconds: float = RESYNC_SECONDS) -> None:
        self.store = store
        self._nodes: ParseCache[Node] = ParseCache(node_from_dict)
        self._changes = ChangeFeed(store, self.watch, resync_seconds=resync_seconds)
        self._view = _PodView()
        self._waits: dict[PodKey, tuple[float, int]] = {}  # unschedulable pod -> (next attempt at, attempts)
        self._open: set[str] = set()  # the schedulable Nodes of the step before
        self._freed = False  # a pod bound to one of them went since

    def _ready_nodes(self) -> list[Node]:
        nodes: list[Node] = []
        for raw in self.store.objects("nodes"):
            try:
                node = self._nodes(raw)
            except ObjectParseError:
                continue
            if node.ready and node.deletion_timestamp is None:
                nodes.append(node)
        return sorted(nodes, key=lambda n: n.name)

    @staticmethod
    def _parse(raw: dict[str, Any]) -> Pod | None:
        try:
            return pod_from_dict(raw)
        except ObjectParseError:
            return None

    def _resync(self) -> None:
        """Read every pod (the first step, and every ``resync_seconds``); a snapshot already parsed is kept."""
        before, view = self._view.pods, _PodView()
        for raw in self.store.objects("pods"):
            known = before.get(_pod_key(raw))
            view.put(raw, known[1] if known is not None and known[0] is raw else self._parse(raw))
        self._view = view

    def _apply(self, events: Iterable[WatchEvent]) -> None:
        """Bring the view up to date with the pods' events since the last step (in order: the last one wins)."""
        for event in events:
            if event.resource != "pods":
                continue
            spec, status = event.object.get("spec") or {}, event.object.get("status") or {}
            if spec.get("nodeName") in self._open and (
                event.type == "DELETED" or status.get("phase") in ("Succeeded", "Failed")
            ):
                self._freed = True
            if event.type == "DELETED":
                self._view.remove(_pod_key(event.object))
            else:
                self._view.put(event.object, self._parse(event.object))

    def _pods(
        self, ready: set[str]
    ) -> tuple[dict[str, Resources], list[tuple[Pod, dict[str, Any]]], list[dict[str, Any]]]:
        """(requests in use per node, pending pods for this scheduler, bound pods to start)."""
        view = self._view
        pending: list[tuple[Pod, dict[str, Any]]] = []
        for key in view.pending:
            raw, pod = view.pods[key]
            if pod is not None:
                pending.append((pod, raw))
        pending.sort(key=lambda item: (-item[0].priority, item[0].creation_timestamp, item[0].key))
        starting = []
        for key in sorted(view.starting):  # in key order: the same writes in the same order every time
            raw, pod = view.pods[key]
            if pod is not None and pod.node_name in ready:
                starting.append(raw)
        return view.requests_by_node(), pending, starting

    def step(self, now: float) -> int:
        """Schedule what can be scheduled as of ``now`` (epoch seconds); returns how many pods were bound."""
        events = self._changes.since_last(now)
        if events is None:
            self._resync()
        else:
            self._apply(events)
        nodes = self._ready_nodes()
        used, pending, starting = self._pods({n.name for n in nodes})
        self._nodes.sweep()
        for raw in starting:
            self._run(raw, now)
        bound = 0
        # a cordoned Node fits no pod, for the same reason (why_not's first check): counted, not tried per pod
        open_nodes = [n for n in nodes if not n.unschedulable]
        cordoned = len(nodes) - len(open_nodes)
        names = {n.name for n in open_nodes}
        if self._freed or names - self._open:  # room may have appeared: every waiting pod is tried again
            self._waits.clear()
        self._open, self._freed = names, False
        self._waits = {k: w for k, w in self._waits.items() if k in self._view.pending}
        # the reasons of the shapes that fit no open node since the last bind: nothing why_not reads has changed
        failed: dict[_Shape, Counter[str]] = {}
        for pod, raw in pending:
            key = _pod_key(raw)
            if self._waits.get(key, (0.0, 0))[0] > now:
                continue
            shape = _shape(pod)
            target: Node | None = None
            if (known := failed.get(shape)) is not None:
                reasons = known
            else:
                reasons = Counter({_CORDONED: cordoned} if cordoned else {})
                for node in open_nodes:
                    reason = why_not(pod, node, used.get(node.name, {}))
                    if reason is None:
                        target = node
                        break
                    reasons[reason] += 1
            if target is None:
                failed[shape] = reasons
                self._unschedulable(raw, len(nodes), reasons, now)
                attempts = self._waits.get(key, (0.0, 0))[1] + 1
                wait = min(_BACKOFF_MAX_SECONDS, _BACKOFF_INITIAL_SECONDS * 2 ** (attempts - 1))
                self._waits[key] = (now + wait, attempts)
                continue
            try:
                self.store.bind(pod.name, namespace=pod.namespace, node_name=target.name)
            except ApiError as exc:
                LOG.debug("bind %s -> %s failed: %s", pod.key, target.name, exc)
                continue
            used[target.name] = add(used.get(target.name, {}), pod.requests)
            failed.clear()
            bound += 1
            self._run(raw, now)
        return bound

    def _run(self, raw: Mapping[str, Any], now: float) -> None:
        """Mark a bound pod Running and Ready (containers started)."""
        meta = raw["metadata"]
        stamp = rfc3339(now)

        def edit(obj: dict[str, Any]) -> None:
            status = obj.setdefault("status", {})
            kept = [c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"]
            status["conditions"] = kept + [
                {"type": t, "status": "True", "lastTransitionTime": stamp}
                for t in ("Initialized", "ContainersReady", "Ready")
            ]
            status["phase"] = "Running"
            status["startTime"] = status.get("startTime") or stamp
            status["containerStatuses"] = [
                {
                    "name": c.get("name", ""),
                    "image": c.get("image", ""),
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": stamp}},
                }
                for c in (obj.get("spec") or {}).get("containers") or []
            ]

        try:
            self.store.mutate("pods", meta["name"], edit, namespace=meta.get("namespace") or "default")
        except ApiError as exc:
            if exc.code != 404:
                raise

    def _unschedulable(self, raw: Mapping[str, Any], total: int, reasons: Counter[str], now: float) -> None:
        """Set ``PodScheduled=False, reason=Unschedulable`` unless it already says the same."""
        if total == 0:
            message = "0/0 nodes are available: no nodes available to schedule pods."
        else:
            parts = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
            message = f"0/{total} nodes are available: {parts}."
        for cond in (raw.get("status") or {}).get("conditions") or []:
            if (
                cond.get("type") == "PodScheduled"
                and cond.get("status") == "False"
                and cond.get("reason") == "Unschedulable"
                and cond.get("message") == message
            ):
                return
        meta = raw["metadata"]
        stamp = rfc3339(now)

        def edit(obj: dict[str, Any]) -> None:
            status = obj.setdefault("status", {})
            kept = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
            status["conditions"] = [
                *kept,
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                    "lastTransitionTime": stamp,
                },
            ]
            status.setdefault("phase", "Pending")

        try:
            self.store.mutate("pods", meta["name"], edit, namespace=meta.get("namespace") or "default")
        except ApiError as exc:
            if exc.code != 404:
                raise
