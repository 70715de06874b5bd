"""N simultaneous spot interruptions through the real handlers in the embedded environment: how fast every node is
cordoned, its replacement launched and its pods run again, and whether any pod or PodDisruptionBudget suffered.

The world (moto in a process of its own; the Kubernetes API emulator and the simulated cluster here; a fleet built
by ``nodesmith.sim.fleet``), the Lambda processes (:mod:`interruptions_lambda`: the SQS event sources with Lambda's
scaling and function timeout, the reconcile function with reserved concurrency 1), the burst, EC2's reclaim at
each warning's deadline and what each JSON key means are described in ``bench/README.md``.

    python bench/interruptions.py --nodes 100 --json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lambdas"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from interruptions_lambda import INTERRUPTION, RECONCILE, TERMINATION, Spec, invocations_process, reconcile_process
from interruptions_monitor import Monitor, conditions

from infra.config import NodesmithConfig
from nodesmith.cli.world import MANIFESTS, EmbeddedWorld
from nodesmith.sim import aws as sim_aws
from nodesmith.sim import fleet as sim_fleet
from nodesmith.sim.lambda_runtime import Stats

NOTICE_SECONDS = 120.0
SCHEDULE_SECONDS = 60.0


def calibrate() -> float:
    """Seconds one thread takes for 10 million additions in a pure-Python loop: how fast the machine is now."""
    began, total = time.perf_counter(), 0
    for i in range(10_000_000):
        total += i
    return round(time.perf_counter() - began, 3)


class BenchWorld(EmbeddedWorld):
    """The demo's world, with moto in a process of its own and the kubelet reading EC2 through
    :class:`~nodesmith.sim.fleet.KubeletInstances`; the simulated components step at most every half second."""

    instances: sim_fleet.KubeletInstances

    def _start_aws(self) -> sim_aws.EmbeddedAws:
        return sim_aws.start_process(cluster_name=self.cluster_name)

    def _start_components(self) -> None:
        from nodesmith.sim.controllers import SimControllers
        from nodesmith.sim.kube_scheduler import SimScheduler
        from nodesmith.sim.kubelet import SimKubelet
        from nodesmith.sim.runner import Runner

        self.instances = sim_fleet.KubeletInstances(ec2=self.client("ec2"), store=self.store, resync_seconds=5.0)
        parts = (SimControllers(store=self.store), SimScheduler(store=self.store),
                 SimKubelet(store=self.store, instances=self.instances, ready_delay=self.ready_delay))  # fmt: skip
        self._runners = [Runner(p, interval=0.5, min_step_seconds=0.5).start() for p in parts]  # type: ignore[arg-type]


def _nodepool_docs() -> list[dict[str, Any]]:
    """The demo's NodePool and EC2NodeClass, without the NodePool's CPU limit and with consolidation off."""
    import yaml

    docs = [d for d in yaml.safe_load_all((MANIFESTS / "nodepool.yaml").read_text()) if d]
    pool = next(d["spec"] for d in docs if d["kind"] == "NodePool")
    pool.pop("limits", None)
    pool["disruption"] = {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"}
    return docs


class Bench:
    """One run: :meth:`set_up` the world and the Lambda processes, then :meth:`burst` (see the module docstring).
    The processes' reports (tuples, see :mod:`interruptions_lambda`) are collected in a thread into ``events``."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args, self.world, self.processes = args, BenchWorld(ready_delay=1.0), list[Any]()
        self.stop, self.lock = threading.Event(), threading.Lock()
        self.events: list[tuple[Any, ...]] = []
        self.sent: dict[str, float] = {}  # instance id -> its first warning's SentTimestamp
        self.lost: dict[str, str] = {}  # pod -> node, of the instances EC2 took back
        self.put: dict[str, float] = {}  # instance id -> when its warning was put on EventBridge (epoch seconds)
        self.t0_epoch = 0.0  # the burst's t0, in epoch seconds

    def set_up(self) -> None:
        args, world = self.args, self.world.start()
        os.environ["NODESMITH_STATE_TABLE"] = sim_aws.create_state_table()
        for doc in _nodepool_docs():
            world.store.apply(doc)
        self.fleet = sim_fleet.launch_fleet(ec2=world.client("ec2"), store=world.store,
                                            cluster_name=world.cluster_name, count=args.nodes)  # fmt: skip
        if not world.wait_for(lambda: sim_fleet.register_nodes(world.store, self.fleet) == args.nodes, timeout=900):
            raise RuntimeError("the simulated kubelet did not register every node")
        self.total = args.nodes * args.pods_per_node
        budgeted = sim_fleet.deploy(world.store, pods=self.total, pdb_every=args.pdb_every)
        if not world.wait_for(lambda: self._running() >= self.total, timeout=900, every=0.5):
            raise RuntimeError(f"only {self._running()} of {self.total} pods started")
        self.node_of = {n.instance_id: n.node_name for n in self.fleet}
        targets = self.fleet[:: args.crash_every] if args.crash_every else []
        urls = {INTERRUPTION: world.queue_url, TERMINATION: world.termination_queue_url}
        self.spec = Spec(args=args, urls=urls, crash_targets=frozenset(n.node_name for n in targets))
        ctx, n = multiprocessing.get_context("spawn"), max(1, args.processes)
        channels = (ctx.Event(), ctx.Event(), ctx.Queue(), ctx.Queue(), ctx.Queue())
        self.go, self.stop_all, ready, self.reports, self.wakes = channels
        parts = [*((invocations_process, dataclasses.replace(self.spec, share=(k, n))) for k in range(n)),
                 (reconcile_process, self.spec)]  # fmt: skip
        self.processes = [ctx.Process(target=t, args=(s, channels), daemon=True) for t, s in parts]
        for process in self.processes:
            process.start()
        for _ in self.processes:  # each says when warm: handlers imported, clients and catalogue cached
            ready.get(timeout=900)
        threading.Thread(target=self._collect, name="collect", daemon=True).start()
        self.monitor = Monitor(store=world.store, nodes=set(self.node_of.values()), budgeted=budgeted)

    def _running(self) -> int:
        return sum(1 for p in self.world.store.objects("pods") if conditions(p).get("Ready") == "True")

    def _collect(self) -> None:
        while True:
            event = self.reports.get()
            with self.lock:
                self.events.append(event)
                for _, body, attributes in event[2] if event[:2] == ("records", INTERRUPTION) else ():
                    if attributes.get("ApproximateReceiveCount") == "1":  # a warning's first delivery
                        iid, sent = json.loads(body)["detail"]["instance-id"], int(attributes["SentTimestamp"]) / 1000
                        self.sent[iid] = min(sent, self.sent.get(iid, sent))

    def of(self, kind: str) -> list[tuple[Any, ...]]:
        """The reports of ``kind``, without it."""
        with self.lock:
            return [e[1:] for e in self.events if e[0] == kind]

    def _reclaim(self, put: dict[str, float]) -> None:
        """EC2 takes back each interrupted instance still running at its deadline; its pods go into ``lost``."""
        ec2, pending = self.world.client("ec2"), set(put)
        while pending and not self.stop.wait(0.5):
            with self.lock:
                due = sorted(i for i in pending if time.time() >= self.sent.get(i, put[i]) + NOTICE_SECONDS)
            pending -= set(due)
            reservations = ec2.describe_instances(InstanceIds=due)["Reservations"] if due else []
            running = [i["InstanceId"] for r in reservations for i in r["Instances"] if i["State"]["Name"] == "running"]
            gone = {self.node_of[i] for i in running}
            with self.monitor.lock:  # pods still on a reclaimed node (not terminating) are lost with it
                self.lost.update({k: n for k, (_, n, ok) in self.monitor.pods.items() if ok and n in gone})
            if running:
                ec2.terminate_instances(InstanceIds=running)
                self.world.instances.refresh(running)

    def _schedule(self) -> None:
        """The reconcile function's EventBridge schedule: a tick every 60 s from 60 s after ``t0``."""
        while not self.stop.wait(SCHEDULE_SECONDS):
            self.wakes.put((time.time(), {}))

    def _cpu(self) -> dict[str, float]:
        """CPU seconds (user + system, from ``/proc``) so far: this process (the emulator, the simulated cluster,
        the bench), moto, the invocation processes and the reconcile function's."""
        moto = self.world.aws.pid if self.world.aws and self.world.aws.pid else os.getpid()
        parts = {"moto": [moto], "reconcile": [self.processes[-1].pid],
                 "invocations": [p.pid for p in self.processes[:-1]]}  # fmt: skip
        stat = {p: Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split() for v in parts.values() for p in v}
        ticks = {p: (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK") for p, f in stat.items()}
        return {"world": time.process_time()} | {k: sum(ticks[p] for p in v) for k, v in parts.items()}

    def _finished(self) -> bool:
        with self.monitor.lock:
            return self.monitor.all_running_at is not None and self.monitor.nodes <= self.monitor.removed.keys()

    def burst(self) -> dict[str, Any]:
        """Put the warnings, follow the run to its end and return the figures."""
        args, monitor = self.args, self.monitor
        calibration = {"before": calibrate()}
        if args.verbose:
            print(f"burst: {len(self.fleet)} warnings", file=sys.stderr, flush=True)
        cpu0, t0, self.t0_epoch = self._cpu(), time.monotonic(), time.time()
        monitor.start(t0, self.total)
        self.go.set()
        self.put = sim_fleet.put_spot_warnings(self.world.client("events"), [n.instance_id for n in self.fleet])
        events_put = time.monotonic() - t0
        threading.Thread(target=self._reclaim, args=(self.put,), daemon=True).start()
        threading.Thread(target=self._schedule, daemon=True).start()
        cpu_cordoned = None  # CPU seconds by part when the last node was cordoned: which part bounded the cordons
        while not self._finished() and time.monotonic() - t0 < args.timeout:
            time.sleep(1.0)
            if cpu_cordoned is None and len(monitor.cordoned) >= len(self.fleet):
                cpu_cordoned = {k: round(v - cpu0[k], 1) for k, v in self._cpu().items()}
            if args.verbose:
                with monitor.lock:
                    print(f"t={time.monotonic() - t0:6.1f}s cordoned={len(monitor.cordoned)} launched="
                          f"{len(monitor.launched)} safe={monitor.safe}/{self.total} removed={len(monitor.removed)} "
                          f"lost={len(self.lost)} errors={monitor.errors[:2]}", file=sys.stderr,
                          flush=True)  # fmt: skip
        end, done, cpu1 = time.monotonic() - t0, self._finished(), self._cpu()
        self.stop.set()
        self.stop_all.set()
        deadline = time.monotonic() + 120  # each invocation process reports its event sources' stats
        while len(self.of("stats")) < 2 * max(1, args.processes) and time.monotonic() < deadline:
            time.sleep(0.5)
        monitor.stop.set()
        self.processes[-1].terminate()  # the reconcile function may still be watching the burst
        for process in self.processes:
            process.join(timeout=60)  # the exits' CPU must not slow the calibration
        calibration["after"] = calibrate()
        cpu = {k: round(cpu1[k] - cpu0[k], 1) for k in cpu0}
        share = round(sum(cpu.values()) / max(end, 1e-9) / len(os.sched_getaffinity(0)), 2)
        return report(self) | {"run_seconds": round(end, 2), "timed_out": not done, "cpu_seconds": cpu,
                               "machine_cpu_share": share, "events_put_seconds": round(events_put, 2),
                               "cpu_seconds_until_cordoned": cpu_cordoned,
                               "calibration_loop_seconds": calibration}  # fmt: skip


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Set the world up, run the burst and return the figures."""
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")
    os.environ["NODESMITH_DISRUPTION"] = "false"
    os.environ["NODESMITH_RECONCILE_FUNCTION"] = RECONCILE
    began, bench = time.monotonic(), Bench(args)
    try:
        bench.set_up()
        return {"setup_seconds": round(time.monotonic() - began, 1)} | bench.burst()
    finally:
        for process in bench.processes:
            process.terminate()
        bench.world.stop()


def _spread(values: list[float]) -> dict[str, float] | None:
    """``{min, p50, max}`` of ``values`` (rounded), or None when there are none."""
    v = sorted(round(x, 2) for x in values)
    return {"min": v[0], "p50": v[len(v) // 2], "max": v[-1]} if v else None


def _cordon_latencies(bench: Bench) -> list[float]:
    """Per cordoned node, seconds from when our interruption queue received its warning (the first delivery's
    ``SentTimestamp``; the put on EventBridge when no first delivery was reported) to its cordon."""
    with bench.lock:
        received = {bench.node_of[i]: bench.sent.get(i, put) for i, put in bench.put.items()}
    return [bench.t0_epoch + at - received[node] for node, at in bench.monitor.cordoned.items() if node in received]


def report(bench: Bench) -> dict[str, Any]:
    """The figures of one run (seconds from ``t0``; ``bench/README.md`` says what each means)."""
    args, monitor, lost = bench.args, bench.monitor, bench.lost
    forced = dict(bench.of("forced"))  # pod -> node
    rounds = bench.of("round")  # (NodeClaim, status, detail)
    queued = sorted({m: (int(a["SentTimestamp"]) / 1000, int(a["ApproximateFirstReceiveTimestamp"]) / 1000)
                     for function, records in bench.of("records") if function == TERMINATION
                     for m, _, a in records}.values())  # (sent, first received) per message  # fmt: skip
    summed: dict[str, Stats] = {}  # per function, over the processes
    for function, stats in bench.of("stats"):
        summed.setdefault(function, Stats()).add(stats)
    invocations = {function: dataclasses.asdict(stats) for function, stats in summed.items()}
    with monitor.lock:
        nodes = monitor.nodes
        fresh = Counter(node for node, attempt in bench.of("drain") if attempt == 1 and node in nodes)
        lost_pods = set(lost) | set(monitor.lost_with_node) | set(forced)
        crash = None
        if args.crash_every:
            killed = {n for (n,) in bench.of("killed")}
            claims = {n.nodeclaim: n.node_name for n in bench.fleet}
            ended = {claims.get(c): d for c, status, d in rounds if status == "terminated" and claims.get(c) in killed}
            crash = {"targets": len(bench.spec.crash_targets), "invocations_killed": len(killed),
                     "terminated_after": len(ended), "drained_after": sum(d == "drained" for d in ended.values()),
                     "pods_lost": sum(1 for p in lost_pods if (lost | forced).get(p) in killed)}  # fmt: skip
        return {
            "command": vars(args), "cpus": len(os.sched_getaffinity(0)), "nodes": args.nodes, "pods": bench.total,
            "pods_behind_pdbs": sum(monitor.budgeted.values()),
            "cordoned_seconds": round(max(monitor.cordoned.values()), 2) if monitor.cordoned.keys() >= nodes else None,
            "nodes_cordoned": len(monitor.cordoned),
            "cordons_seconds": _spread(list(monitor.cordoned.values())),
            "cordon_latency_seconds": _spread(_cordon_latencies(bench)),
            "replacements_launched_seconds": round(max(monitor.launched.values()), 2) if monitor.launched else None,
            "replacement_nodeclaims": len(monitor.launched),
            "pods_running_again_seconds": None if monitor.all_running_at is None else round(monitor.all_running_at, 2),
            "nodes_removed": len(nodes & monitor.removed.keys()),
            "pods_lost": len(lost_pods), "pods_lost_to_reclaim": len(lost), "pods_force_deleted": len(forced),
            "pods_lost_with_their_node": len(set(monitor.lost_with_node) - set(lost) - set(forced)),
            "pdb_violations": monitor.violations, "pdb_violation_details": monitor.violation_details,
            "drains_per_event": {"max_fresh": max(fresh.values(), default=0),
                                 "nodes_drained_twice": sorted(n for n, c in fresh.items() if c > 1)[:5],
                                 "duplicated_deliveries": invocations.get(INTERRUPTION, {}).get("duplicated", 0)},
            "termination_rounds": dict(Counter(f"{s}: {d.split(' ', 1)[-1] if d[:1].isdigit() else d}"
                                               for _, s, d in rounds)),
            "termination_queue_age_seconds": None if not queued else {"messages": len(queued),
                "max": round(max(f - s for s, f in queued), 2), "last": round(queued[-1][1] - queued[-1][0], 2)},
            "crash_resume": crash,
            "invocations": invocations,
            "reconcile_invocations": dict(Counter(f"{kind} {status}" for kind, status in bench.of("reconcile"))),
            "monitor_errors": monitor.errors[:5],
        }  # fmt: skip


def main() -> None:
    """Parse the command line, run, print one JSON line (``--json``) or one figure per line."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add = parser.add_argument
    add("--nodes", type=int, default=100)
    add("--pods-per-node", type=int, default=4)
    add("--pdb-every", type=int, default=4, help="every n-th Deployment gets a PDB (0: none)")
    add("--concurrency", type=int, default=NodesmithConfig.interruption_max_concurrency, help="interruptions at once")
    add("--termination-concurrency", type=int, default=NodesmithConfig.termination_max_concurrency,
        help="termination invocations at once")  # fmt: skip
    add("--batch-size", type=int, default=NodesmithConfig.interruption_batch_size, help="records per invocation")
    add("--processes", type=int, default=4, help="processes the concurrent invocations run in")
    add("--duplicate-every", type=int, default=10, help="deliver every n-th warning twice (0: never)")
    add("--crash-every", type=int, default=0, help="kill every n-th node's first drain round (0: never)")
    add("--timeout", type=float, default=600.0, help="seconds to wait for the pods to run again")
    add("--json", action="store_true", help="print one JSON line")
    add("--verbose", action="store_true", help="progress and the handlers' logs on stderr")
    args = parser.parse_args()
    result = run(args)
    lines = [json.dumps(result, sort_keys=True)] if args.json else [f"{k:32} {v}" for k, v in sorted(result.items())]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
