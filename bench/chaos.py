"""The demo's cluster driven through scale-ups and downs, spot interruptions, rebalance recommendations, an AMI drift
and consolidation for ``--minutes``, through the real handlers on the embedded AWS and Kubernetes; then it settles
and the invariants are counted. What it does and what each JSON key means: ``bench/README.md``.

    python bench/chaos.py --seed 1 --minutes 3 --json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import sys
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any, TextIO

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lambdas"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from chaos_faults import Faults, fault_rates
from chaos_monitor import Monitor, end_state, unclaimed_instances
from interruptions_monitor import conditions

from infra.config import NodesmithConfig
from nodesmith.cli.world import MANIFESTS, EmbeddedWorld
from nodesmith.core.timestamps import from_rfc3339
from nodesmith.sim import fleet as sim_fleet
from nodesmith.sim.kube.errors import ApiError
from nodesmith.sim.kubelet import SimKubelet
from nodesmith.sim.lambda_runtime import (
    AsyncInvocations,
    EventSourceOptions,
    SqsEventSource,
    install_function_timeouts,
)

NOTICE_SECONDS = 120.0
"""EC2 reclaims a spot instance two minutes after its interruption warning."""
TIMEOUTS = {"nodesmith-interruption": float(NodesmithConfig.interruption_timeout_seconds),
            "nodesmith-termination": float(NodesmithConfig.termination_timeout_seconds),
            "nodesmith-reconcile": float(NodesmithConfig.reconcile_timeout_seconds)}  # fmt: skip
BUDGETED_REPLICAS = 4
REGISTRATION_TTL_SECONDS = 60
"""Karpenter's 15-minute registration TTL, compressed like the rest of the simulated cluster's times."""
TOLERATION_SECONDS = 20
"""The API server's default not-ready and unreachable toleration (Kubernetes' 300 s), compressed like the
registration TTL: pods on a node NotReady for ``chaos_faults.NOT_READY_SECONDS`` are evicted before it recovers."""
NODECLASSES = "ec2nodeclasses.karpenter.k8s.aws"
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
BURST = "burst"
"""The second NodePool and its own EC2NodeClass, deleted and recreated once in a run."""


class ChaosWorld(EmbeddedWorld):
    """The demo's world whose SQS event sources end invocations at the stack's function timeouts."""

    def _source(self, queue_url: str, handler: Any, function_name: str) -> SqsEventSource:
        if function_name not in self._sources:
            options = EventSourceOptions(batching_window=0.0, function_timeout=TIMEOUTS[function_name])
            self._sources[function_name] = SqsEventSource(
                sqs=self.client("sqs"), queue_url=queue_url, handler=handler, function_name=function_name,
                options=options,
            )  # fmt: skip
        return self._sources[function_name]

    def start_chaos(self) -> ChaosWorld:
        """Start the world (:meth:`EmbeddedWorld.start`) with the registration TTL and the default not-ready and
        unreachable tolerations compressed, pods deleted gracefully (Terminating until their kubelet confirms), and
        the reconcile function run as Lambda runs the schedule's invocations (one at a time, ended at its timeout);
        returns it."""
        from nodesmith.handlers import wiring
        from nodesmith.handlers.reconcile import handler

        self.start()
        self._set_env({"NODESMITH_REGISTRATION_TTL_SECONDS": str(REGISTRATION_TTL_SECONDS)})
        wiring.reset()
        self.store.graceful_pod_deletion = True
        self.store.not_ready_toleration_seconds = self.store.unreachable_toleration_seconds = TOLERATION_SECONDS

        def logged(event: dict[str, Any], context: Any) -> Any:
            with self._lambda_stdout():
                return handler(event, context)

        self.reconciler = AsyncInvocations(
            handler=logged, function_name="nodesmith-reconcile", timeout_seconds=TIMEOUTS["nodesmith-reconcile"]
        )
        return self

    def reconcile(self) -> dict[str, Any]:
        """One scheduled invocation of the reconcile function; its summary ({} when it raised or was ended)."""
        outcomes: list[Any] = []
        self.reconciler.on_invoke = lambda _event, outcome, _started, _ended: outcomes.append(outcome)
        self.reconciler.invoke({"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}})
        self.reconciler.run_next(wait=1.0)
        return outcomes[-1] if outcomes and isinstance(outcomes[-1], dict) else {}

    @property
    def kubelet(self) -> SimKubelet:
        """The simulated kubelet."""
        for runner in self._runners:
            if isinstance(runner.component, SimKubelet):
                return runner.component
        raise RuntimeError("the world runs no simulated kubelet")

    def put_ec2_event(self, *, detail_type: str, instance_id: str, zone: str) -> None:
        """Put an ``aws.ec2`` event about ``instance_id`` on the default bus, in the EC2 documentation's shape."""
        detail: dict[str, Any] = {"instance-id": instance_id}
        if detail_type == "EC2 Spot Instance Interruption Warning":
            detail["instance-action"] = "terminate"
        self.client("events").put_events(Entries=[{
            "Source": "aws.ec2", "DetailType": detail_type, "Detail": json.dumps(detail),
            "Resources": [f"arn:aws:ec2:{zone}:instance/{instance_id}"],
        }])  # fmt: skip


class Chaos:
    """One run: the world, the seeded random actions, EC2's reclaims and the counts (see the module docstring)."""

    def __init__(self, world: ChaosWorld, args: argparse.Namespace) -> None:
        self.world, self.args, self.rng = world, args, random.Random(args.seed)
        self.actions: Counter[str] = Counter()
        self.exceptions: list[str] = []
        self.reclaims: dict[str, float] = {}  # instance id -> when EC2 takes it back (monotonic)
        self.lost_to_reclaim = 0
        self.reclaimed: list[dict[str, Any]] = []
        self.reclaimed_keys: set[str] = set()  # namespace/name of the pods lost to a reclaim
        self.terminating_at_reclaim = 0
        self.last_pass: dict[str, Any] = {}
        self.unsettled: list[str] = []
        world.apply_file(MANIFESTS / "nodepool.yaml")
        world.apply_file(MANIFESTS / "inflate.yaml")
        self.burst = self._burst_manifests()
        self.burst_state, self.burst_templates_left = "live", 0
        for doc in self.burst:
            world.store.apply(doc)
        budgeted = sim_fleet.deploy(world.store, pods=2 * BUDGETED_REPLICAS, replicas=BUDGETED_REPLICAS, pdb_every=1,
                                    cpu="500m", grace_seconds=5)  # fmt: skip
        self.monitor = Monitor(store=world.store, budgeted=budgeted)
        self.faults = Faults(world, rates=fault_rates(args.fault_rate, args.mix), seed=args.seed)
        self._instrument()

    def _instrument(self) -> None:
        """Record the pods the termination function deletes directly (its deadline passed)."""
        from nodesmith.adapters.kube.cluster import KubeCluster

        delete_pod, monitor = KubeCluster.delete_pod, self.monitor

        def counted(cluster: Any, **kwargs: Any) -> None:
            delete_pod(cluster, **kwargs)
            monitor.forced(kwargs["pod"].key)

        KubeCluster.delete_pod = counted  # type: ignore[method-assign,assignment]

    # -- the run ---------------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """Bring the budgeted Deployments up, drive the cluster for ``--minutes``, settle for up to ``--settle``
        seconds, count."""
        if not self._settle(time.monotonic() + self.args.settle):
            raise RuntimeError(f"the budgeted Deployments did not run within {self.args.settle:.0f} s")
        self.monitor.start()
        self.faults.on()
        began = time.monotonic()
        end = began + 60.0 * self.args.minutes
        next_action, drift_at, drifted = began + 5.0, began + 0.4 * (end - began), False
        burst_delete_at = began + 0.6 * (end - began)
        while time.monotonic() < end:
            now = time.monotonic()
            if now >= next_action:
                self._act()
                next_action = now + self.rng.uniform(4.0, 12.0)
            if not drifted and now >= drift_at:
                drifted = self._drift()
            if self.burst_state == "live" and now >= burst_delete_at:
                self._delete_burst()
            self._tick()
        self.world.scale(deployment="inflate", replicas=self.rng.randint(1, 6))
        settled = self._settle(time.monotonic() + self.args.settle)
        self.faults.off()
        self.monitor.stop()
        return self._report(began, settled)

    def _tick(self) -> None:
        """One second of the functions: reconcile (the schedule), interruptions and terminations (their queues)."""
        for name, call in (("reconcile", self._reconcile),
                           ("interruption", lambda: list(self.world.deliver_interruptions(wait_seconds=0))),
                           ("termination", self.world.deliver_terminations)):  # fmt: skip
            try:
                call()
            except Exception:  # an unhandled exception ends the invocation: counted, the run goes on
                self.exceptions.append(f"{name}: {traceback.format_exc(limit=3)}")
        self._reclaim()
        self._recreate_burst()
        time.sleep(0.2)

    def _reconcile(self) -> None:
        self.last_pass = self.world.reconcile()

    def _settle(self, deadline: float) -> bool:
        """Tick until nothing is pending, draining or in flight, or ``deadline``; whether it settled."""
        while time.monotonic() < deadline:
            self._tick()
            if self._quiet():
                return True
        return False

    def _empty_nodes(self) -> list[dict[str, Any]]:
        """The nodes without a workload pod: their taints, cordon, conditions and their NodeClaim's conditions."""
        store = self.world.store
        busy = {(p.get("spec") or {}).get("nodeName") for p in store.objects("pods")
                if (p["metadata"].get("labels") or {}).get("app")}  # fmt: skip
        claims = {(c.get("status") or {}).get("nodeName"): c for c in store.objects("nodeclaims.karpenter.sh")}

        return [
            {"node": n["metadata"]["name"], "unschedulable": bool(n["spec"].get("unschedulable")),
             "taints": [t.get("key") for t in n["spec"].get("taints") or []], "node_conditions": conditions(n),
             "nodeclaim_conditions": conditions(claims.get(n["metadata"]["name"]) or {})}
            for n in store.objects("nodes") if n["metadata"]["name"] not in busy
        ]  # fmt: skip

    def _quiet(self) -> bool:
        self.unsettled = self._unsettled()
        return not self.unsettled

    def _unsettled(self) -> list[str]:
        """What keeps the run from settling (empty: settled). A NodeClaim not yet initialized is capacity in flight:
        it registers, or the registration TTL deletes it. A Terminating pod waits for its kubelet (one that
        never confirms the deletion is a cluster fault), not for Nodesmith: its replacement must run like any other
        pod, and a node left with Terminating pods only is a node the pods do not need. The deleted ``burst``
        EC2NodeClass must be gone (and recreated): its launch templates are counted when it goes."""
        store = self.world.store
        pods = [p for p in store.objects("pods") if (p["metadata"].get("labels") or {}).get("app")]
        claims = store.objects("nodeclaims.karpenter.sh")
        disrupted = {
            n["metadata"]["name"]
            for n in store.objects("nodes")
            if any(t.get("key") == "karpenter.sh/disrupted" for t in (n.get("spec") or {}).get("taints") or [])
        }
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        reasons = [
            f"pod {p['metadata']['name']} {(p.get('status') or {}).get('phase')}"
            for p in live
            if (p.get("status") or {}).get("phase") != "Running"
        ]
        reasons += [
            f"nodeclaim {c['metadata']['name']} deleting" for c in claims if c["metadata"].get("deletionTimestamp")
        ]
        reasons += [f"node {n} disrupted" for n in sorted(disrupted)]
        reasons += [f"reclaim of {i} to come" for i in sorted(self.reclaims)]
        if self.burst_state == "deleting":  # its finalizer waits for a reconcile pass after its last NodeClaim went
            reasons.append(f"EC2NodeClass {BURST} deleting")
        reasons += [
            f"nodeclaim {c['metadata']['name']} in flight"
            for c in claims
            if not c["metadata"].get("deletionTimestamp") and conditions(c).get("Initialized") != "True"
        ]
        busy = {(p.get("spec") or {}).get("nodeName") for p in live}
        reasons += [f"node {n['metadata']['name']} without a workload pod" for n in store.objects("nodes")
                    if n["metadata"]["name"] not in busy]  # fmt: skip
        return reasons or self._unclaimed_instances(claims)

    def _unclaimed_instances(self, claims: list[dict[str, Any]]) -> list[str]:
        """Our live instances that no NodeClaim's providerID names: orphans that garbage collection has yet to
        terminate, or launches whose NodeClaim has yet to record them. Read last, once the cluster is quiet."""
        try:
            return [f"instance {i} without a NodeClaim" for i in unclaimed_instances(
                ec2=self.world.client("ec2"), cluster_name=self.world.cluster_name, claims=claims)]  # fmt: skip
        except Exception as exc:  # the bench's own read meets the run's faults too: not settled yet
            return [f"instances unread: {exc}"]

    # -- what happens to the cluster -------------------------------------------------------------------

    def _act(self) -> None:
        kind = self.rng.choices(["scale", "spot", "rebalance"], weights=[3, 2, 1])[0]
        if kind == "scale":
            self.world.scale(deployment="inflate", replicas=self.rng.randint(0, 12))
        else:  # EC2 sends both for spot instances only (EC2 User Guide, "Spot Instance interruptions")
            nodes = sorted(n["spec"]["providerID"] for n in self.world.store.objects("nodes")
                           if not (n.get("spec") or {}).get("unschedulable")
                           and (n["metadata"].get("labels") or {}).get(CAPACITY_TYPE_LABEL) == "spot")  # fmt: skip
            if not nodes:
                return
            zone, instance_id = self.rng.choice(nodes).split("/")[-2:]
            detail_type = ("EC2 Spot Instance Interruption Warning" if kind == "spot"
                           else "EC2 Instance Rebalance Recommendation")  # fmt: skip
            self.world.put_ec2_event(detail_type=detail_type, instance_id=instance_id, zone=zone)
            if kind == "spot":
                self.reclaims.setdefault(instance_id, time.monotonic() + NOTICE_SECONDS)
        self.actions[kind] += 1

    def _burst_manifests(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """A second EC2NodeClass (the demo's spec) and a NodePool on it, weight 50 and at most 4 CPUs: the first
        pods land there, so it has launch templates when it is deleted."""
        store = self.world.store
        nodeclass, nodepool = (
            store.snapshot(NODECLASSES, "default"),
            store.snapshot("nodepools.karpenter.sh", "default"),
        )
        assert nodeclass is not None and nodepool is not None
        spec = json.loads(json.dumps(nodepool["spec"]))
        spec["template"]["spec"]["nodeClassRef"]["name"] = BURST
        spec.update(weight=50, limits={"cpu": "4"})
        return (
            {"apiVersion": nodeclass["apiVersion"], "kind": "EC2NodeClass", "metadata": {"name": BURST},
             "spec": json.loads(json.dumps(nodeclass["spec"]))},
            {"apiVersion": nodepool["apiVersion"], "kind": "NodePool", "metadata": {"name": BURST}, "spec": spec},
        )  # fmt: skip

    def _delete_burst(self) -> None:
        """Delete the burst NodePool, its NodeClaims (what Kubernetes' garbage collector does for their owner
        references) and its EC2NodeClass, whose finalization then waits for them to go."""
        store = self.world.store
        store.delete("nodepools.karpenter.sh", BURST)
        for claim in store.objects("nodeclaims.karpenter.sh"):
            if (claim["metadata"].get("labels") or {}).get("karpenter.sh/nodepool") == BURST:
                with contextlib.suppress(ApiError):
                    store.delete("nodeclaims.karpenter.sh", claim["metadata"]["name"])
        store.delete(NODECLASSES, BURST)
        self.burst_state = "deleting"
        self.actions["nodeclass_delete"] += 1

    def _burst_templates(self) -> int:
        """Launch templates tagged for the burst EC2NodeClass."""
        templates = self.world.client("ec2").describe_launch_templates()["LaunchTemplates"]
        tags = [{t["Key"]: t["Value"] for t in lt.get("Tags") or []} for lt in templates]
        return sum(1 for t in tags if t.get("karpenter.k8s.aws/ec2nodeclass") == BURST)

    def _recreate_burst(self) -> None:
        """Once the deleted burst EC2NodeClass is gone: count the launch templates left for it, recreate both."""
        if self.burst_state != "deleting" or self.world.store.snapshot(NODECLASSES, BURST) is not None:
            return
        self.burst_templates_left = self._burst_templates()
        for doc in self.burst:
            self.world.store.apply(doc)
        self.burst_state = "recreated"
        self.actions["nodeclass_recreate"] += 1

    def _drift(self) -> bool:
        """Point the EC2NodeClass at another AMI: every node drifts (``AMIDrift``)."""
        ami = self.world.register_ami(name="amazon-eks-node-al2023-x86_64-standard-1.31-v20260301")
        terms = {"amiFamily": "AL2023", "amiSelectorTerms": [{"id": ami}]}  # an AMI id needs its family
        self.world.store.mutate("ec2nodeclasses.karpenter.k8s.aws", "default", lambda nc: nc["spec"].update(terms))
        self.actions["drift"] += 1
        return True

    def _reclaim(self) -> None:
        """EC2 takes back a warned spot instance at its deadline if it still runs: Ready pods on it are lost."""
        now = time.monotonic()
        for instance_id, at in list(self.reclaims.items()):
            if now < at:
                continue
            del self.reclaims[instance_id]
            ec2 = self.world.client("ec2")
            state = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]["State"]
            if state["Name"] not in ("pending", "running"):
                continue
            node = next((n for n in self.world.store.objects("nodes")
                         if n["spec"].get("providerID", "").endswith("/" + instance_id)), None)  # fmt: skip
            if node is not None:
                running = [p for p in self.world.store.pods_on(node["metadata"]["name"])
                           if (p["metadata"].get("labels") or {}).get("app")
                           and (p.get("status") or {}).get("phase") == "Running"]  # fmt: skip
                # a pod whose graceful deletion had run its course waits only for its kubelet's confirmation (a
                # cluster fault when it never comes): it left the node's drain in time, and is not lost to it
                over = [p for p in running if _graceful_deletion_over(p, time.time())]
                self.terminating_at_reclaim += len(over)
                lost = [p for p in running if p not in over]
                self.lost_to_reclaim += len(lost)
                self.reclaimed_keys |= {f"{p['metadata'].get('namespace')}/{p['metadata']['name']}" for p in lost}
                self.reclaimed += [self._reclaimed(instance_id, node, p) for p in lost]
            ec2.terminate_instances(InstanceIds=[instance_id])

    def _reclaimed(self, instance_id: str, node: dict[str, Any], pod: dict[str, Any]) -> dict[str, Any]:
        """What a pod lost to a reclaim says about its drain: its node's cordon and taints, whether its NodeClaim was
        being deleted (its termination requested), and whether the pod itself was being deleted."""
        claim = next((c for c in self.world.store.objects("nodeclaims.karpenter.sh")
                      if (c.get("status") or {}).get("nodeName") == node["metadata"]["name"]), None)  # fmt: skip
        return {
            "pod": pod["metadata"]["name"], "node": node["metadata"]["name"], "instance": instance_id,
            "unschedulable": bool(node["spec"].get("unschedulable")),
            "taints": [t.get("key") for t in node["spec"].get("taints") or []],
            "nodeclaim_deleting": bool(claim is not None and claim["metadata"].get("deletionTimestamp")),
            "pod_deleting": bool(pod["metadata"].get("deletionTimestamp")),
            "pod_created": pod["metadata"].get("creationTimestamp"),
        }  # fmt: skip

    # -- the counts -------------------------------------------------------------------------------------

    def _report(self, began: float, settled: bool) -> dict[str, Any]:
        world, monitor = self.world, self.monitor
        stats = {name: source.stats for name, source in world._sources.items()}
        stats["nodesmith-reconcile"] = world.reconciler.stats
        ended = end_state(store=world.store, ec2=world.client("ec2"), cluster_name=world.cluster_name)
        if self.burst_state == "deleting":  # its deletion never finished: its templates are left behind
            self.burst_templates_left = self._burst_templates()
        ended["launch_templates_orphaned"] += self.burst_templates_left
        invariants = {
            # a pod lost to a reclaim is removed with its node afterwards: each pod counts once
            "pods_lost_to_interruptions": len(self.reclaimed_keys | monitor.forced_pods | set(monitor.lost_with_node)),
            "pdb_violations": monitor.violations,
            **ended,
            "invocations_past_timeout": sum(s.timed_out for s in stats.values()),
            "unhandled_exceptions": len(self.exceptions) + sum(len(s.errors) for s in stats.values()),
        }
        return {
            "command": {k: v for k, v in vars(self.args).items() if k != "lambda_log"},
            "invariants": invariants,
            "ok": not any(invariants.values()) and settled and self.burst_state == "recreated",
            "burst_nodeclass": self.burst_state,
            "settled": settled,
            "unsettled": self.unsettled[:5],
            "actions": dict(self.actions),
            "faults_injected": self.faults.injected(),
            "cluster_faults_drawn": self.faults.cluster.drawn() if self.faults.cluster else {},
            "invocations": {
                name: {
                    "invocations": s.invocations,
                    "records": s.records,
                    "failed": s.failed,
                    "timed_out": s.timed_out,
                    "killed": s.killed,
                    "timeouts_injected": s.timeouts_injected,
                }
                for name, s in stats.items()
            },
            "exceptions": self.exceptions[:3] + [e for s in stats.values() for e in s.errors][:3],
            "monitor_errors": monitor.errors[:3],
            "pdb_violation_details": monitor.details,
            "pods_evicted_from_not_ready_nodes": monitor.involuntary,
            "pods_lost": {
                "to_reclaim": self.lost_to_reclaim,
                "terminating_at_reclaim": self.terminating_at_reclaim,
                "reclaimed": self.reclaimed[:5],
                "force_deleted": sorted(monitor.forced_pods)[:5],
                "with_their_node": [f"{pod} on {node}" for pod, node in sorted(monitor.lost_with_node.items())][:5],
            },
            "last_pass_unschedulable": self.last_pass.get("unschedulable"),
            "empty_at_end": self._empty_nodes()[:5],
            "pending_at_end": [
                {
                    "pod": p["metadata"]["name"],
                    "node": p["spec"].get("nodeName"),
                    "phase": p["status"].get("phase"),
                    "why": [
                        c.get("message", "") for c in p["status"].get("conditions") or [] if c.get("status") != "True"
                    ],
                }
                for p in world.store.objects("pods")
                if (p["metadata"].get("labels") or {}).get("app") and p["status"].get("phase") != "Running"
            ][:5],
            "seconds": round(time.monotonic() - began, 1),
        }


def _graceful_deletion_over(pod: dict[str, Any], now: float) -> bool:
    """Whether ``pod``'s deletion was requested and its grace period has passed by ``now`` (epoch seconds): its
    ``deletionTimestamp`` (the request's time plus the grace period, as the API server sets it) is not later."""
    deleting = from_rfc3339(pod["metadata"].get("deletionTimestamp"))
    return deleting is not None and deleting <= now


def _json_stdout() -> TextIO:
    """The process's real stdout, kept for the one JSON line; file descriptor 1 is pointed at stderr, so the log lines
    of the embedded world and the handlers (written to stdout, as Lambda's are) go to stderr."""
    sys.stdout.flush()
    real = os.dup(1)
    os.dup2(2, 1)
    return os.fdopen(real, "w")


def main(argv: list[str] | None = None) -> int:
    """Run once; print the result (one JSON line with ``--json``); exit 1 when an invariant is broken."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--minutes", type=float, default=3.0, help="how long the actions go on")
    parser.add_argument("--settle", type=float, default=300.0, help="seconds allowed to settle afterwards")
    parser.add_argument("--fault-rate", type=float, default=0.0, help="share of calls that meet a fault (0..1)")
    parser.add_argument("--mix", default="", help="another rate for some layers: kube=R,aws=R,lambda=R,cluster=R")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    parser.add_argument("--lambda-log", help="keep the functions' and simulated cluster's log there")
    args = parser.parse_args(argv)
    try:
        fault_rates(args.fault_rate, args.mix)
    except ValueError as exc:
        parser.error(str(exc))
    out = _json_stdout() if args.json else sys.stdout
    install_function_timeouts()
    world = ChaosWorld()
    try:
        result = Chaos(world.start_chaos(), args).run()
    finally:
        if args.lambda_log is not None and world.lambda_log.exists():
            shutil.copyfile(world.lambda_log, args.lambda_log)
        world.stop()
    print(json.dumps(result, sort_keys=True) if args.json else json.dumps(result, indent=1, sort_keys=True), file=out)
    out.flush()
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
