"""N simultaneous spot interruptions in the embedded environment: how fast every node is cordoned,
replacements are launched and the pods run again, and whether any pod or PodDisruptionBudget suffered.

World (:mod:`interruptions_world`): the embedded AWS (``nodesmith.sim.aws``: moto server with EC2,
SQS, EventBridge, DynamoDB) in a process of its own, and in this process the Kubernetes API emulator
(``nodesmith.sim.kube``), the simulated kube-scheduler, kubelet and Deployment/ReplicaSet controllers
(``nodesmith.sim``). The
Lambda side (:mod:`interruptions_lambda`): the real interruption handler, adapters and services,
invoked by the SQS event source mapping's pollers in ``--processes`` processes of their own, and the
reconcile function the batches wake in one more, all warmed up (handlers imported, clients and
instance-type catalogue cached; the reconcile function has run the schedule's last pass, with its garbage
collection, as a container the 1-minute schedule keeps warm has) before the clock starts. Setup,
not timed:

* ``--nodes`` spot ``m5.large`` instances (moto ``RunInstances``) tagged as Nodesmith launched them,
  one NodeClaim each, labelled with its instance as a launch labels it; the simulated kubelet registers
  their Nodes;
* Deployments of 20 replicas filling every node with ``--pods-per-node`` pods (450m CPU each);
  every ``--pdb-every``-th Deployment has a PodDisruptionBudget ``maxUnavailable: 1``;
* the state table in DynamoDB and the interruption queue fed by the EventBridge rules.

Timed run, from ``t0`` = the moment the bench starts putting the events on EventBridge:

* one real-format ``EC2 Spot Instance Interruption Warning`` per node goes to the default event bus
  (``PutEvents``, 10 entries a call); the rule delivers it to the SQS queue;
* poller threads do what the Lambda SQS event source mapping does: receive up to ``--batch-size``
  messages (filling the batch for up to the stack's 1 s batching window), invoke the interruption
  handler, delete what it did not report as failed; 5 pollers at first and 5 more each second up
  to ``--concurrency`` (the stack's ``MaximumConcurrency``, 25), as Lambda scales an SQS event source. Every
  ``--duplicate-every``-th message is delivered twice (SQS is at-least-once);
* the reconcile handler runs every 60 s from ``t0 + 60`` (the EventBridge schedule), and when a batch
  wakes it (``InvocationType=Event``), one invocation at a time in its own process (reserved
  concurrency 1: a tick waits while a woken invocation runs, and is dropped after the stack's 60 s
  event age; ``--no-reconcile-wake``: never woken);
* at each event's deadline (event time + 120 s) EC2 reclaims its instance if it is still running
  (the bench terminates it; pods still on the node are lost).

Measured (seconds from ``t0``): ``cordoned_seconds`` when every interrupted node is tainted
``karpenter.sh/disrupted`` and unschedulable; ``replacements_launched_seconds`` when the last NodeClaim
created after ``t0`` was launched; ``pods_running_again_seconds`` when every Deployment pod is
Running and Ready on a node that was not interrupted (null if that never happened before
``--timeout``). ``pods_lost`` = pods still on a node when EC2 reclaimed it + pods deleted
directly (force-deleted for the deadline, bypassing PodDisruptionBudgets). ``pdb_violations``
counts times a budgeted Deployment had fewer healthy pods than the budget allows.
With ``--preload`` every warning is delivered before ``t0`` (the consumers start at ``t0``; each
deadline still counts from its warning's delivery), which takes the emulator's delivery cost out of
the cordon figure without giving the drains more time.
``drains_per_event`` is how many times a drain actually ran per (event, instance) on its first
attempt -- the original message, or its hand-off continuation in a burst -- (target exactly 1,
duplicates included); continuations of long drains are counted apart. Its ``max_fresh`` leaves out the
runs that resumed a run whose invocation was ended at the function timeout (``resumed_after_timeout``:
the record came back and the drain went on from its stored progress), so a ``max_fresh`` above 1 is a
drain done twice. ``pods_lost`` also counts
Ready pods removed with their node (the pod garbage collector), never evicted.
``--crash-every n`` kills the invocation draining every n-th instance once, right after its first
evictions' progress was stored (a ``BaseException``, as if Lambda timed out): nothing of that
invocation is acknowledged, and its records come back when the visibility the handler gave them on
start (its remaining time + 5 s, ``ChangeMessageVisibilityBatch`` in moto) ends, not after the
queue's 121 s; ``crash_resume`` reports how many drains resumed from the progress in DynamoDB.

Every invocation ends at the stack's function timeout, as Lambda ends it: from then on each AWS and
Kubernetes call made for it (from its thread or its pool threads) raises, so nothing more of it reaches
AWS or the cluster, and none of its records is acknowledged (``invocations_timed_out``);
``--no-function-timeout`` lets them run on instead, as this bench did before.

Caveats, also in the output: every "Lambda invocation" is a thread of one of ``--processes``
processes, sharing its GIL and its Kubernetes client and caches, and all of them share the
machine's cores with moto and the emulator; real invocations each have their own CPU, and the
control plane and AWS are not on ours (``machine_cpu_share`` says how busy the cores were).
Where moto or the simulation is quadratic in the number of nodes, pods or messages, the bench
takes a shortcut with the same answers and lists it in ``emulator_shortcuts``; the handlers,
services and adapters run unchanged.

    python bench/interruptions.py --nodes 100 --json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lambdas"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from interruptions_counters import Counters, merge
from interruptions_lambda import (
    BATCH_SIZE,
    ESM_INITIAL_POLLERS,
    ESM_POLLERS_PER_SECOND,
    INVOCATION_PROCESSES,
    MAX_CONCURRENCY,
    TICK,
    VISIBILITY_TIMEOUT_SECONDS,
    _warm_up,
    invocations_process,
    reconcile_process,
)
from interruptions_monitor import Monitor
from interruptions_report import Run, calibrate, report
from interruptions_world import (
    KUBELET_INSTANCE_CACHE_SECONDS,
    SCHEDULE_SECONDS,
    TERMINATED,
    _conditions,
    _create_table,
    _deploy,
    _launch_nodes,
    _nodepool_docs,
    _put_events,
    _running,
    _send_events,
    _world_class,
    process_cpu_seconds,
)


def _reclaim(
    world: Any, launched: list[dict[str, Any]], deadlines: dict[str, float], stop: threading.Event
) -> set[str]:
    """EC2 takes back every interrupted instance still running at its deadline; returns the pods lost with them."""
    ec2 = world.client("ec2")
    by_id = {i["InstanceId"]: i for i in launched}
    lost: set[str] = set()
    pending = dict(deadlines)
    while pending and not stop.is_set():
        now = time.monotonic()
        due = [iid for iid, at in pending.items() if at <= now]
        if due:
            running = {
                i["InstanceId"]
                for r in ec2.describe_instances(InstanceIds=due)["Reservations"]
                for i in r["Instances"]
                if i["State"]["Name"] in ("pending", "running")
            }
            names = {by_id[iid]["PrivateDnsName"] for iid in running}
            lost |= {
                f"{p['metadata'].get('namespace')}/{p['metadata']['name']}"
                for p in world.store.objects("pods")
                if (p.get("spec") or {}).get("nodeName") in names and (p["metadata"].get("labels") or {}).get("app")
            }
            if running:
                TERMINATED.update(running)
                ec2.terminate_instances(InstanceIds=sorted(running))
            for iid in due:
                pending.pop(iid)
        stop.wait(0.5)
    return lost


def _schedule(events: Any, t0: float, stop: threading.Event, sent: list[float]) -> None:
    """The reconcile Lambda's EventBridge schedule: a tick every 60 s from t0 + 60, put on the reconcile
    function's queue of asynchronous invocations (:class:`interruptions_lambda.AsyncReconcile` runs it);
    each one's monotonic time goes on ``sent``."""
    tick = t0 + SCHEDULE_SECONDS
    while not stop.wait(max(0.0, tick - time.monotonic())):
        sent.append(time.monotonic())
        events.put((TICK, sent[-1]))
        tick += SCHEDULE_SECONDS


def run(args: argparse.Namespace) -> dict[str, Any]:
    os.environ.update(
        {
            "POWERTOOLS_LOG_LEVEL": os.environ.get("POWERTOOLS_LOG_LEVEL", "ERROR"),
            "POWERTOOLS_METRICS_DISABLED": "true",
            "NODESMITH_DISRUPTION": "false",
            "NODESMITH_DRAIN_TIMEOUT_SECONDS": "15",  # the stack's min(drainTimeoutSeconds, timeout - 5) at 20 s
        }
    )
    KUBELET_INSTANCE_CACHE_SECONDS["seconds"] = max(1.0, args.nodes / 1000)
    counters = Counters()
    counters.install()
    started = time.monotonic()
    world = _world_class()(ready_delay=1.0).start()
    try:
        from nodesmith.handlers import wiring

        table = _create_table(world)
        os.environ["NODESMITH_STATE_TABLE"] = table
        wiring.reset()
        for doc in _nodepool_docs():
            world.store.apply(doc)
        launched = _launch_nodes(world, args.nodes)
        names = {i["PrivateDnsName"] for i in launched}
        if args.crash_every:
            counters.crash_targets = {i["InstanceId"] for i in launched[:: args.crash_every]}

        def ready() -> int:
            nodes = world.store.objects("nodes")
            return sum(1 for n in nodes if n["metadata"]["name"] in names and _conditions(n).get("Ready") == "True")

        _say(args, f"{len(launched)} instances launched; waiting for their nodes")
        if not world.wait_for(lambda: ready() >= len(names), timeout=600):
            raise RuntimeError("the simulated kubelet did not register every node")
        total_pods = args.nodes * args.pods_per_node
        budgeted = _deploy(world.store, total_pods, args.pdb_every)
        _say(args, f"{len(names)} nodes ready; waiting for {total_pods} pods")
        if not world.wait_for(lambda: _running(world.store) >= total_pods, timeout=900, every=0.5):
            raise RuntimeError(f"only {_running(world.store)} of {total_pods} pods started")
        _warm_up()
        setup_seconds = time.monotonic() - started
        monitor = Monitor(
            store=world.store,
            nodes=names,
            initial_claims={c["metadata"]["name"] for c in world.store.objects("nodeclaims.karpenter.sh")},
            pdb_apps=budgeted,
        )

        stop = threading.Event()
        processes, go, stop_all, results, terminated, reconcile_events = _start_invocations(args, world, counters)
        monitor.cpu_probe = cpu_by_part(world.moto.pid, [p.pid for p in processes[:-1]], processes[-1].pid)
        threading.Thread(target=_note_terminations, args=(terminated, stop), name="terminated", daemon=True).start()
        deliver = _send_events if args.deliver == "sqs" else _put_events
        if args.preload:  # every warning waits in the queue before the clock starts (deadlines run already)
            put_started = time.monotonic()
            deadlines = deliver(world, launched)
            events_put = time.monotonic() - put_started
        world.freeze_heaps()  # set up: full garbage collections skip the world from now on
        calibration = {"before": calibrate()}  # the invocation processes are warm and waiting for go
        t0 = time.monotonic()
        cpu0 = time.process_time()
        children_cpu0 = _children_cpu()
        moto_cpu0 = process_cpu_seconds(world.moto.pid)
        monitor.start(t0, total_pods)
        go.set()  # the invocation processes start polling
        if not args.preload:
            deadlines = deliver(world, launched)
            events_put = time.monotonic() - t0
        lost_box: list[set[str]] = []
        reclaimer = threading.Thread(
            target=lambda: lost_box.append(_reclaim(world, launched, deadlines, stop)), name="reclaim", daemon=True
        )
        reclaimer.start()
        ticks_sent: list[float] = []
        scheduler = threading.Thread(
            target=_schedule, args=(reconcile_events, t0, stop, ticks_sent), name="schedule", daemon=True
        )
        scheduler.start()

        def finished() -> bool:
            with monitor.lock:
                return monitor.all_running_at is not None and names <= monitor.removed_nodes

        deadline = time.monotonic() + args.timeout
        while not finished() and time.monotonic() < deadline:
            time.sleep(1.0)
            with monitor.lock:
                pending = sum(1 for _, node, _ in monitor.pods.values() if not node)
                interrupted = sum(1 for _, node, _ in monitor.pods.values() if node in monitor.nodes)
                _say(args, f"t={time.monotonic() - t0:6.1f}s cordoned={len(monitor.cordoned)} "
                     f"launched={len(monitor.launched)} safe={monitor.safe}/{total_pods} "
                     f"pending={pending} on_interrupted={interrupted} "
                     f"removed={len(names & monitor.removed_nodes)} errors={monitor.errors[:2]}")  # fmt: skip
        moto_cpu = process_cpu_seconds(world.moto.pid) - moto_cpu0
        stop.set()
        stop_all.set()
        killed, duplicated = 0, set()
        for _ in processes:
            part_killed, part_duplicated = merge(counters, results.get(timeout=180))
            killed += part_killed
            duplicated |= part_duplicated
        for proc in processes:
            proc.join(timeout=30)
        for t in (reclaimer, scheduler):
            t.join(timeout=120)
        monitor.stop.set()
        end = time.monotonic() - t0
        cpu = time.process_time() - cpu0
        invocations_cpu = _children_cpu() - children_cpu0
        done = finished()
        calibration["after"] = calibrate()
        return report(
            Run(
                args=args,
                counters=counters,
                monitor=monitor,
                names=names,
                total_pods=total_pods,
                budgeted=budgeted,
                reclaimed=lost_box[0] if lost_box else set(),
                t0=t0,
                end=end,
                cpu=cpu,
                invocations_cpu=invocations_cpu,
                moto_cpu=moto_cpu,
                events_put=events_put,
                ticks_sent=ticks_sent,
                killed=killed,
                duplicated=duplicated,
                setup_seconds=setup_seconds,
                done=done,
                calibration=calibration,
            )
        )
    finally:
        world.stop()


def _start_invocations(
    args: argparse.Namespace, world: Any, counters: Counters
) -> tuple[list[Any], Any, Any, Any, Any, Any]:
    """Start ``--processes`` processes of "Lambda invocations" (:func:`interruptions_lambda.invocations_process`)
    sharing Lambda's SQS scaling between them, and one more for the reconcile function, which their batches wake
    (unless ``--no-reconcile-wake``) and the schedule ticks (:func:`interruptions_lambda.reconcile_process`);
    returns (processes, go, stop, results, terminated, reconcile events: the queue wakes and ticks go on) once
    every process is warm (handlers imported, clients and catalogue cached), so the clock starts on warm
    containers. Every process puts one summary on ``results``."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    go, stop, ready = ctx.Event(), ctx.Event(), ctx.Queue()
    results, terminated, wakes = ctx.Queue(), ctx.Queue(), ctx.Queue()
    n = max(1, args.processes)
    spec = {
        "queue_url": world.queue_url,
        "crash_targets": sorted(counters.crash_targets),
        "function_timeout": not args.no_function_timeout,
        "reconcile_wake": not args.no_reconcile_wake,
        "duplicate_every": args.duplicate_every,
        "visibility_timeout": args.visibility_timeout,
        "batch_size": args.batch_size,
        "initial": ESM_INITIAL_POLLERS,
        "per_second": ESM_POLLERS_PER_SECOND,
        "most": args.concurrency,
    }
    specs = [{**spec, "share": (k, n)} for k in range(n)]  # the k-th process starts pollers k, k + n, ...
    channels = (go, stop, results, terminated, ready, wakes)
    targets = [*((invocations_process, s) for s in specs), (reconcile_process, spec)]
    processes = [ctx.Process(target=target, args=(s, channels), daemon=True) for target, s in targets]
    for proc in processes:
        proc.start()
    for _ in processes:
        ready.get(timeout=300)
    return processes, go, stop, results, terminated, wakes


def _note_terminations(terminated: Any, stop: threading.Event) -> None:
    """Instance ids the handlers (in the invocation processes) terminated, into :data:`TERMINATED`."""
    import queue

    while not stop.is_set():
        try:
            TERMINATED.update(terminated.get(timeout=0.5))
        except queue.Empty:
            continue


def cpu_by_part(moto_pid: int, invocation_pids: list[int], reconcile_pid: int) -> Callable[[], dict[str, float]]:
    """A probe of the CPU seconds (user + system, so far) of each part of the bench: ``world`` (this process: the
    API emulator, the simulated scheduler, kubelet and controllers, the event putter and the monitor), ``moto``,
    ``invocations`` (the invocation processes together) and ``reconcile`` (the reconcile function's process)."""

    def probe() -> dict[str, float]:
        return {
            "world": time.process_time(),
            "moto": process_cpu_seconds(moto_pid),
            "invocations": sum(process_cpu_seconds(pid) for pid in invocation_pids),
            "reconcile": process_cpu_seconds(reconcile_pid),
        }

    return probe


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children."""
    times = os.times()
    return times.children_user + times.children_system


def _say(args: argparse.Namespace, text: str) -> None:
    if args.verbose:
        print(text, file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--pods-per-node", type=int, default=4)
    parser.add_argument("--pdb-every", type=int, default=4, help="every n-th Deployment gets a PDB (0: none)")
    parser.add_argument(
        "--concurrency",
        type=int,
        default=MAX_CONCURRENCY,
        help="most concurrent invocations: the stack's MaximumConcurrency (pollers scale up to it)",
    )
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE, help="messages per invocation at most")
    parser.add_argument(
        "--processes", type=int, default=INVOCATION_PROCESSES, help="processes the concurrent invocations run in"
    )
    parser.add_argument("--duplicate-every", type=int, default=10, help="deliver every n-th message twice (0: never)")
    parser.add_argument(
        "--crash-every",
        type=int,
        default=0,
        help="kill the invocation draining every n-th instance once, after its first eviction (0: never)",
    )
    parser.add_argument(
        "--visibility-timeout",
        type=int,
        default=VISIBILITY_TIMEOUT_SECONDS,
        help="seconds a received message stays invisible until the handler shortens it (default: the stack's)",
    )
    parser.add_argument(
        "--deliver",
        choices=["eventbridge", "sqs"],
        default="eventbridge",
        help="put the warnings on EventBridge (its rule feeds the queue) or straight on the queue",
    )
    parser.add_argument(
        "--preload",
        action="store_true",
        help="deliver every warning before the clock starts (their 2 minutes run from delivery)",
    )
    parser.add_argument(
        "--no-function-timeout",
        action="store_true",
        help="let invocations run past the function timeout (Lambda would end them; the figures before it did)",
    )
    parser.add_argument(
        "--no-reconcile-wake",
        action="store_true",
        help="batches that find the reconcile lease free run the replacement pass themselves instead of waking "
        "the reconcile function (the stack without NODESMITH_RECONCILE_FUNCTION)",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the pods to run again")
    parser.add_argument(
        "--cpus",
        type=int,
        default=0,
        help="run the bench and every process it starts on this many of the machine's CPUs (0: all); "
        "--cpus 1 on a 2-core machine is a machine half as fast",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    parser.add_argument("--verbose", action="store_true", help="progress on stderr")
    args = parser.parse_args()
    if args.cpus:
        available = sorted(os.sched_getaffinity(0))
        if not 0 < args.cpus <= len(available):
            parser.error(f"--cpus {args.cpus}: this machine offers 1..{len(available)}")
        os.sched_setaffinity(0, available[: args.cpus])  # inherited by the processes started from here
    real_stdout = sys.stdout
    # What the handlers print (their CloudWatch Logs) goes to stderr with --verbose, else nowhere.
    with Path(os.devnull).open("w") as sink, contextlib.redirect_stdout(sys.stderr if args.verbose else sink):
        result = run(args)
    if args.json:
        print(json.dumps(result, sort_keys=True), file=real_stdout)
    else:
        for key, value in sorted(result.items()):
            print(f"{key:32} {value}", file=real_stdout)


if __name__ == "__main__":
    main()
