"""``nodesmith demo``: the whole path on the embedded AWS and Kubernetes, as a timeline.

Scenario (what a Karpenter user does on day one):

1. apply a NodePool + EC2NodeClass and the ``inflate`` Deployment (pause, 1 CPU per pod);
2. scale ``inflate`` 0 -> 5: pods Pending -> NodeClaim -> CreateFleet -> Node Ready -> Running;
3. put a real-format ``EC2 Spot Instance Interruption Warning`` for one instance on EventBridge;
   the rule delivers it to the SQS queue, the interruption handler checks it against EC2 and the cluster,
   cordons and taints the node and sends its termination request; the termination handler drains it
   through the Eviction API round by round, the evicted pods are recreated by their ReplicaSet and run
   again on new capacity, and the instance is terminated;
4. scale to 0: the empty nodes are removed by the disruption pass once ``consolidateAfter`` (5 s)
   has passed and the command was re-validated (2 s here instead of Karpenter's 15 s);
5. scale to 1, then point the EC2NodeClass at another AMI (``amiSelectorTerms: [{id: ...}]``):
   the running node is ``AMIDrift``-ed, a replacement is launched and becomes Ready, then the old
   node is drained and terminated, and the pod runs on the new node.

The reconcile handler is invoked every second here (the deployed stack runs it every minute).
The last stdout line is one JSON summary ``{"ok", "pods_running_peak", "nodes_launched",
"interruptions_handled", "pods_rescheduled", "empty_nodes_removed", "drift_replaced", "seconds"}``;
the exit code is 1 when a step failed.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    from nodesmith.cli.world import EmbeddedWorld

__all__ = ["DemoFailed", "run_demo"]

APP = "inflate"
REPLICAS = 5
STEP_TIMEOUT = 120.0  # seconds allowed for one step (generous: a loaded CI machine is slow)


class DemoFailed(RuntimeError):
    """A step of the demo did not reach its expected state in time."""


@dataclass
class Timeline:
    """Prints timestamped lines and remembers what it saw, for the summary and the report."""

    quiet: bool
    start: float = field(default_factory=time.monotonic)
    events: list[tuple[float, str, str]] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    samples: list[dict[str, float]] = field(default_factory=list)

    def elapsed(self) -> float:
        """Seconds since the demo started."""
        return time.monotonic() - self.start

    def say(self, kind: str, text: str) -> None:
        """Record and print one timeline line."""
        at = self.elapsed()
        self.events.append((at, kind, text))
        if not self.quiet:
            print(f"[{at:6.2f}s] {kind:<13} {text}", flush=True)

    def once(self, key: str, kind: str, text: str) -> None:
        """Like :meth:`say`, but only the first time ``key`` is seen."""
        if key not in self.seen:
            self.seen.add(key)
            self.say(kind, text)


def _conditions(obj: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions") or []}


def _app_pods(world: EmbeddedWorld) -> list[dict[str, Any]]:
    return [
        p
        for p in world.store.objects("pods")
        if (p["metadata"].get("labels") or {}).get("app") == APP and not p["metadata"].get("deletionTimestamp")
    ]


def _running(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]


class Observer:
    """Turns changes in the emulator's objects into timeline lines and samples."""

    def __init__(self, world: EmbeddedWorld, timeline: Timeline) -> None:
        self.world = world
        self.timeline = timeline
        self.pods_running_peak = 0
        self.nodeclaims: set[str] = set()
        self.cost = 0.0  # USD/hour, as the last reconcile pass reported it (ClusterCostUSDPerHour)

    def observe(self) -> list[dict[str, Any]]:
        """Look at Events, NodeClaims, Nodes and pods once; print what is new; return the app's pods."""
        tl = self.timeline
        for claim in self.world.store.objects("nodeclaims.karpenter.sh"):
            name = claim["metadata"]["name"]
            self.nodeclaims.add(name)
            tl.once(f"nc:{name}", "NodeClaim", f"{name} created by the reconcile Lambda")
        # The Kubernetes Events our Lambdas post, as `kubectl get events` would show them
        # (identical messages, such as one Nominated per pod, are shown once).
        events = sorted(self.world.store.objects("events"), key=lambda e: e["metadata"].get("resourceVersion", ""))
        for event in events:
            involved = event.get("involvedObject") or {}
            reason, message = event.get("reason", ""), event.get("message", "")
            tl.once(
                f"ev:{reason}:{message}", reason or "Event", f"{involved.get('kind')}/{involved.get('name')}: {message}"
            )
        for node in self.world.store.objects("nodes"):
            name = node["metadata"]["name"]
            if _conditions(node).get("Ready") == "True":
                tl.once(f"ready:{name}", "NodeReady", f"node {name} Ready")
            if (node.get("spec") or {}).get("unschedulable"):
                tl.once(f"cordoned:{name}", "Cordoned", f"node {name} cordoned and tainted karpenter.sh/disrupted")
        pods = _app_pods(self.world)
        running = len(_running(pods))
        self.pods_running_peak = max(self.pods_running_peak, running)
        pending = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Pending")
        tl.samples.append(
            {
                "t": round(tl.elapsed(), 3),
                "pending": pending,
                "running": running,
                "nodes": len(self.world.store.objects("nodes")),
                "cost": round(self.cost, 6),
            }
        )
        return pods

    def until(self, predicate: Any, *, what: str, reconcile: bool = True, timeout: float = STEP_TIMEOUT) -> None:
        """Reconcile once a second, hand termination requests to the termination handler, and observe until
        ``predicate(pods)`` holds; DemoFailed otherwise."""
        deadline = time.monotonic() + timeout
        next_reconcile = 0.0
        while time.monotonic() < deadline:
            pods = self.observe()
            if predicate(pods):
                return
            if reconcile:
                self.world.deliver_terminations()
            if reconcile and time.monotonic() >= next_reconcile:
                summary = self.world.reconcile()
                self.cost = float(summary.get("cost_usd_per_hour", self.cost))
                next_reconcile = time.monotonic() + 1.0
                for reason, count in (summary.get("unschedulable") or {}).items():
                    self.timeline.once(f"unsched:{reason}", "Unschedulable", f"{count} pod(s): {reason}")
            time.sleep(0.1)
        raise DemoFailed(f"timed out after {timeout:.0f}s waiting for {what}")


def _scenario(world: EmbeddedWorld, tl: Timeline, summary: dict[str, Any]) -> None:
    from nodesmith.cli.world import MANIFESTS

    obs = Observer(world, tl)
    world.apply_file(MANIFESTS / "nodepool.yaml")
    tl.say("apply", "NodePool default + EC2NodeClass default (c/m/t, gen > 4, spot + on-demand, amd64)")
    world.apply_file(MANIFESTS / "inflate.yaml")
    tl.say("apply", "Deployment inflate (pause, 1 CPU per pod), replicas 0")

    world.scale(deployment=APP, replicas=REPLICAS)
    tl.say("scale", f"inflate 0 -> {REPLICAS}")
    obs.until(
        lambda pods: len(pods) == REPLICAS and all(not (p.get("spec") or {}).get("nodeName") for p in pods),
        what="pods created and marked Unschedulable",
        reconcile=False,
    )
    tl.say("Pending", f"{REPLICAS} pods Unschedulable (no nodes yet)")
    obs.until(lambda pods: len(_running(pods)) == REPLICAS, what=f"{REPLICAS} pods Running")
    tl.say("Running", f"{REPLICAS}/{REPLICAS} inflate pods Running on {len(world.store.objects('nodes'))} node(s)")

    # -- spot interruption -------------------------------------------------------------------------
    by_node: dict[str, int] = {}
    for pod in _app_pods(world):
        by_node[pod["spec"]["nodeName"]] = by_node.get(pod["spec"]["nodeName"], 0) + 1
    victim = max(sorted(by_node), key=lambda n: by_node[n])
    node = world.store.get("nodes", victim)
    provider_id = node["spec"]["providerID"]
    zone, instance_id = provider_id.split("/")[-2], provider_id.split("/")[-1]
    evicted_uids = {p["metadata"]["uid"] for p in _app_pods(world) if p["spec"]["nodeName"] == victim}
    world.put_spot_interruption(instance_id=instance_id, zone=zone)
    tl.say(
        "EventBridge", f"EC2 Spot Instance Interruption Warning for {instance_id} ({victim}, {len(evicted_uids)} pods)"
    )

    handled = 0
    deadline = time.monotonic() + STEP_TIMEOUT
    while not handled and time.monotonic() < deadline:
        for batch in world.deliver_interruptions(wait_seconds=1):
            handled += batch["records"] - batch["failures"]
            tl.say("SQS -> Lambda", f"interruption handler: {batch['records']} record(s), {batch['failures']} failed")
    if not handled:
        raise DemoFailed("the interruption never reached the handler through EventBridge and SQS")
    summary["interruptions_handled"] = handled
    obs.observe()

    def rescheduled(pods: list[dict[str, Any]]) -> bool:
        running = _running(pods)
        return (
            len(running) == REPLICAS
            and all(p["spec"].get("nodeName") != victim for p in running)
            and not any(p["metadata"]["uid"] in evicted_uids for p in pods)
        )

    obs.until(rescheduled, what="evicted pods running again on new capacity")
    summary["pods_rescheduled"] = len(evicted_uids)
    tl.say("Running", f"{REPLICAS}/{REPLICAS} Running again; {len(evicted_uids)} pod(s) rescheduled off {victim}")

    world.scale(deployment=APP, replicas=0)
    tl.say("scale", f"inflate {REPLICAS} -> 0")
    obs.until(lambda pods: not pods, what="inflate scaled to zero", reconcile=False)
    summary["pods_running_peak"] = obs.pods_running_peak
    nodes_before = {n["metadata"]["name"] for n in world.store.objects("nodes")}
    tl.say("consolidate", f"{len(nodes_before)} empty node(s); consolidateAfter is 5s")
    obs.until(lambda _pods: not world.store.objects("nodes"), what="empty nodes removed by the disruption pass")
    summary["empty_nodes_removed"] = len(nodes_before)
    tl.say("Emptiness", f"{len(nodes_before)} empty node(s) removed: {', '.join(sorted(nodes_before))}")
    _drift(world, tl, obs, summary)
    summary["nodes_launched"] = len(obs.nodeclaims)
    tl.say("done", "inflate has no pods")


def _drift(world: EmbeddedWorld, tl: Timeline, obs: Observer, summary: dict[str, Any]) -> None:
    """Scale to 1, change the EC2NodeClass AMI, and watch the node be replaced (AMIDrift)."""
    world.scale(deployment=APP, replicas=1)
    tl.say("scale", "inflate 0 -> 1")
    obs.until(lambda pods: len(_running(pods)) == 1, what="1 pod Running")
    (old_node,) = {p["spec"]["nodeName"] for p in _running(_app_pods(world))}
    ami = world.register_ami(name="amazon-eks-node-al2023-x86_64-standard-1.31-v20260201")
    world.store.mutate(
        "ec2nodeclasses.karpenter.k8s.aws",
        "default",
        lambda nc: nc["spec"].update(amiFamily="AL2023", amiSelectorTerms=[{"id": ami}]),
    )
    tl.say("apply", f"EC2NodeClass default: amiSelectorTerms -> id {ami} (node {old_node} runs the old AMI)")

    def replaced(pods: list[dict[str, Any]]) -> bool:
        running = _running(pods)
        return (
            world.store.find("nodes", old_node) is None
            and len(running) == 1
            and running[0]["spec"].get("nodeName") != old_node
        )

    obs.until(replaced, what=f"drifted node {old_node} replaced")
    new_node = _running(_app_pods(world))[0]["spec"]["nodeName"]
    summary["drift_replaced"] = 1
    tl.say("Drift", f"node {old_node} (old AMI) replaced by {new_node} ({ami}); the pod runs there")
    world.scale(deployment=APP, replicas=0)
    tl.say("scale", "inflate 1 -> 0")
    obs.until(lambda pods: not pods, what="inflate scaled to zero", reconcile=False)


def run_demo(*, report: Path | None = None, quiet: bool = False) -> int:
    """Run the demo; print the timeline (unless ``quiet``) and the JSON summary; return the exit code."""
    from nodesmith.cli.world import EmbeddedWorld

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    tl = Timeline(quiet=quiet)
    summary: dict[str, Any] = {
        "ok": False,
        "pods_running_peak": 0,
        "nodes_launched": 0,
        "interruptions_handled": 0,
        "pods_rescheduled": 0,
        "empty_nodes_removed": 0,
        "drift_replaced": 0,
        "seconds": 0.0,
    }
    error = ""
    try:
        tl.say("start", "embedded AWS (moto: EC2, SQS, EventBridge, SSM) + Kubernetes API emulator")
        with EmbeddedWorld() as world:
            tl.say("ready", f"cluster 'demo', interruption queue {world.queue_url.rsplit('/', 1)[-1]}")
            _scenario(world, tl, summary)
        summary["ok"] = True
    except Exception as exc:  # the demo reports any failure in its summary and exit code
        error = f"{type(exc).__name__}: {exc}"
        tl.say("FAILED", error)
    summary["seconds"] = round(tl.elapsed(), 2)
    if report is not None:
        from nodesmith.cli.report import write_report

        write_report(path=report, timeline=tl.events, samples=tl.samples, summary=summary, error=error)
        if not quiet:
            print(f"report written to {report}", flush=True)
    print(json.dumps(summary), flush=True)
    return 0 if summary["ok"] else 1
