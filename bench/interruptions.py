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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lambdas"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from interruptions_counters import Counters, fresh_runs, merge
from interruptions_lambda import (
    BATCH_SIZE,
    ESM_INITIAL_POLLERS,
    ESM_POLLERS_PER_SECOND,
    FUNCTION_TIMEOUT_SECONDS,
    MAX_CONCURRENCY,
    TICK,
    VISIBILITY_TIMEOUT_SECONDS,
    _warm_up,
    invocations_process,
    reconcile_process,
)
from interruptions_monitor import Monitor
from interruptions_world import (
    EMULATOR_SHORTCUTS,
    KUBELET_INSTANCE_CACHE_SECONDS,
    NOTICE_SECONDS,
    POD_GRACE_SECONDS,
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


def _spread(values: list[float]) -> dict[str, float | int] | None:
    """``{count, min, p50, max}`` of ``values`` (seconds, rounded), or None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return {
        "count": len(ordered),
        "min": round(ordered[0], 2),
        "p50": round(ordered[len(ordered) // 2], 2),
        "max": round(ordered[-1], 2),
    }


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
        threading.Thread(target=_note_terminations, args=(terminated, stop), name="terminated", daemon=True).start()
        deliver = _send_events if args.deliver == "sqs" else _put_events
        if args.preload:  # every warning waits in the queue before the clock starts (deadlines run already)
            put_started = time.monotonic()
            deadlines = deliver(world, launched)
            events_put = time.monotonic() - put_started
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
        from nodesmith.handlers.interruption import SAFETY_MARGIN_SECONDS

        drain_budget_end = FUNCTION_TIMEOUT_SECONDS - SAFETY_MARGIN_SECONDS  # seconds into an invocation
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
        with monitor.lock:
            reclaimed = lost_box[0] if lost_box else set()
            # Ready pods deleted after their node was: the pod garbage collector removed them, never evicted.
            with_node = {key for key, _, gone in monitor.deleted_while_ready if gone}
            cordoned = max(monitor.cordoned.values()) if len(monitor.cordoned) == len(names) else None
            first_attempts = [
                n for (_, iid, attempt), n in counters.drains.items() if attempt == 0 and iid not in counters.crashed
            ]
            fresh = [
                fresh_runs(runs, counters.ended_at_timeout)
                for (_, iid, attempt), runs in counters.drain_runs.items()
                if attempt == 0 and iid not in counters.crashed
            ]
            crashed_attempts = [
                n for (_, iid, attempt), n in counters.drains.items() if attempt == 0 and iid in counters.crashed
            ]
            return {
                "nodes": args.nodes,
                "pods": total_pods,
                "pods_behind_pdbs": sum(budgeted.values()),
                "concurrency": args.concurrency,
                "cpus": len(os.sched_getaffinity(0)),
                "batch_size": args.batch_size,
                "cordoned_seconds": None if cordoned is None else round(cordoned, 2),
                "nodes_cordoned": len(monitor.cordoned),
                "cordons_seconds": _spread(list(monitor.cordoned.values())),
                "replacements_launched_seconds": round(max(monitor.launched.values()), 2) if monitor.launched else None,
                "replacement_nodeclaims": len(monitor.launched),
                # each replacement NodeClaim's launch: the woken pass's, then any for pods left unschedulable
                "replacement_launches_seconds": _spread(list(monitor.launched.values())),
                "pods_running_again_seconds": None
                if monitor.all_running_at is None
                else round(monitor.all_running_at, 2),
                "pods_lost": len(reclaimed | with_node) + counters.force_deleted,
                "pods_lost_to_reclaim": len(reclaimed),
                "pods_lost_with_their_node": len(with_node - reclaimed),
                "pods_lost_with_their_node_examples": sorted(
                    f"{key} on {node}" for key, node, gone in monitor.deleted_while_ready if gone
                )[:5],
                "pods_force_deleted": counters.force_deleted,
                "pods_force_deleted_behind_pdbs": sum(
                    n for app, n in counters.force_deleted_apps.items() if app in budgeted
                ),
                "pdb_violations": monitor.violations,
                # before the deadline's force-deletions (a pod's 30 s grace period before the 2-minute notice ends)
                "budget_chains_seconds": {
                    k: _spread(v) for k, v in monitor.budget_chains(NOTICE_SECONDS - POD_GRACE_SECONDS - 2).items()
                },
                "drains_per_event": {
                    "min": min(first_attempts, default=0),
                    "max": max(first_attempts, default=0),
                    # runs that did not resume one ended at the function timeout: a second of these is a double drain
                    "max_fresh": max(fresh, default=0),
                    "resumed_after_timeout": sum(first_attempts) - sum(fresh),
                    "events": len(first_attempts),
                    "duplicated_deliveries": len(duplicated),
                },
                "crash_resume": None
                if not args.crash_every
                else {
                    "targets": len(counters.crash_targets),
                    "invocations_killed": killed,
                    "drains_killed": len(counters.crashed),
                    "resumed_from_stored_progress": len(counters.resumed_from_progress),
                    "pods_evicted_before_crash_by_resumed_drains": sum(counters.resumed_from_progress.values()),
                    "drains_per_crashed_event": {
                        "min": min(crashed_attempts, default=0),
                        "max": max(crashed_attempts, default=0),
                    },
                    "visibility_timeout_seconds": args.visibility_timeout,
                },
                "events_put_seconds": round(events_put, 2),
                "events_delivered_via": args.deliver,
                "events_preloaded": args.preload,
                "process_cpu_seconds": round(cpu, 1),
                "process_cpu_share": round(cpu / end / (os.cpu_count() or 1), 2),
                "invocation_processes": args.processes,
                "invocation_processes_cpu_seconds": round(invocations_cpu, 1),
                "moto_process_cpu_seconds": round(moto_cpu, 1),
                "machine_cpu_share": round((cpu + invocations_cpu + moto_cpu) / end / (os.cpu_count() or 1), 2),
                "emulator_shortcuts": EMULATOR_SHORTCUTS,
                "pdb_violation_details": monitor.details[:5],
                "continuations": counters.continuations - counters.handed_off,
                "drains_handed_off": counters.handed_off,
                "invocations": counters.invocations,
                # every AWS and Kubernetes call the interruption invocations (and the wakes they ran) made after t0;
                # state-table calls by record (drain, lease, idempotency, offering)
                "api_calls": dict(sorted(counters.calls.items(), key=lambda kv: -kv[1])),
                "api_calls_per_node": round(sum(counters.calls.values()) / max(1, args.nodes), 1),
                # the items of the BatchWriteItem calls above (drain progress the drains of an invocation share)
                "batch_written_items": counters.batch_written,
                "records_failed": counters.failed_records,
                # the schedule's ticks: how many were sent; of those the reconcile function took up (the others
                # still waited behind a woken invocation when the run ended), when each was sent and began
                # (seconds from t0), how long it ran and what it did
                "reconcile_ticks": {
                    "sent": len(ticks_sent),
                    "taken_up": [
                        {
                            "sent_at": round(sent - t0, 1),
                            "began_at": round(began - t0, 1),
                            "seconds": round(took, 1),
                            "status": status,
                        }
                        for sent, began, took, status in sorted(counters.ticks)
                    ],
                },
                "replacement_passes": {
                    "ran": sum(1 for r in counters.replacements if r.ran),
                    "skipped_lease_held": sum(1 for r in counters.replacements if r.skipped),
                    "failed": sum(1 for r in counters.replacements if r.errors and not r.ran),
                    "nodeclaims_launched": sum(r.nodeclaims_launched for r in counters.replacements),
                },
                "drains_started_seconds": _spread([at - t0 for at in counters.drain_started.values()]),
                "invocation_seconds": _spread(counters.invocation_seconds),
                # seconds from an invocation's start to each drain it began (the drain phase follows cordon and
                # replacement); "late": begun once the drain budget was spent (the timeout minus the safety margin)
                "drain_began_after_seconds": {
                    **(_spread(counters.drain_offsets) or {}),
                    "late": sum(1 for s in counters.drain_offsets if s > drain_budget_end),
                },
                # ended at the function timeout as Lambda ends them: their AWS and Kubernetes calls fail from then
                # on (interruptions_timeouts.install_timeouts), nothing of theirs is acknowledged, SQS delivers again
                "invocations_timed_out": counters.timed_out,
                # the innermost nodesmith functions of each one's first call after its timeout (most common first)
                "timed_out_in": dict(counters.cut_off_in.most_common(8)),
                "function_timeout_enforced": not args.no_function_timeout,
                "invocations_past_timeout": sum(1 for s in counters.invocation_seconds if s > FUNCTION_TIMEOUT_SECONDS),
                "reconcile_wakes": {
                    "enabled": not args.no_reconcile_wake,
                    "sent": counters.wakes_sent,
                    "skipped": counters.wakes_skipped,
                    # a woken invocation's passes: its first, the burst watch's (pods left unschedulable) and reruns
                    "passes": len(counters.wake_passes),
                    "invocations_ended": len(counters.wakes_ended),  # the others still watched when the run ended
                    "nodeclaims_launched": sum(n for _, _, n in counters.wake_passes),
                    "pass_seconds": _spread([took for _, took, _ in counters.wake_passes]),
                    "ended_at": _spread([at - t0 for at, _, _ in counters.wake_passes]),
                },
                "replacement_pass_seconds": {
                    "took": _spread([took for _, took in counters.replacement_times]),
                    "ended_at": _spread([at - t0 for at, _ in counters.replacement_times]),
                },
                "nodes_removed": len(names & monitor.removed_nodes),
                "run_seconds": round(end, 2),
                "setup_seconds": round(setup_seconds, 2),
                "timed_out": not done,
                "note": f"the invocations run as threads of {args.processes} process(es) of their own, the woken "
                "reconcile function in one more; the world "
                "(moto: EC2, SQS, EventBridge, DynamoDB; the Kubernetes API emulator; the simulated "
                f"scheduler/kubelet/controllers) is one more process; all share {os.cpu_count()} cores; real "
                "invocations each have their own CPU, and so have the cluster's control plane and AWS",
            }
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
        "initial": -(-ESM_INITIAL_POLLERS // n),
        "per_second": -(-ESM_POLLERS_PER_SECOND // n),
        "most": max(1, args.concurrency // n),
    }
    channels = (go, stop, results, terminated, ready, wakes)
    targets = [invocations_process] * n + [reconcile_process]
    processes = [ctx.Process(target=target, args=(spec, channels), daemon=True) for target in targets]
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
    parser.add_argument("--processes", type=int, default=2, help="processes the concurrent invocations run in")
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
