"""The JSON line ``bench/interruptions.py`` prints: :func:`report` turns what one run recorded (:class:`Run`)
into its figures, and :func:`calibrate` times a fixed CPU loop, so that runs made while the shared machine was
slower can be told apart from slower code (``bench/README.md`` has what each figure means)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from interruptions_counters import Counters, fresh_runs
from interruptions_lambda import FUNCTION_TIMEOUT_SECONDS
from interruptions_world import EMULATOR_SHORTCUTS, NOTICE_SECONDS, POD_GRACE_SECONDS

if TYPE_CHECKING:
    import argparse

    from interruptions_monitor import Monitor

CALIBRATION_ADDITIONS = 10_000_000
"""Integer additions in one :func:`calibrate` loop. On this 2-core machine the loop took 0.50, 0.67 and 0.91 s
in three runs back to back (stop 27): the CPU it gets varies from second to second, with the thread's own CPU
time varying as much as the wall clock. Read the figure as a rough indicator of the machine's speed."""


def calibrate() -> float:
    """Seconds (wall clock) one thread takes for :data:`CALIBRATION_ADDITIONS` additions in a pure-Python loop:
    roughly how much CPU the machine gives one thread right now."""
    began = time.perf_counter()
    total = 0
    for i in range(CALIBRATION_ADDITIONS):
        total += i
    return round(time.perf_counter() - began, 3)


def invocations_by_batch(counters: Counters, t0: float, last_cordon: float | None) -> dict[str, Any]:
    """Per batch kind (:func:`interruptions_lambda.batch_kind`): the :func:`spread` of its invocations' lengths
    (``count``, ``min``, ``p50``, ``max``; seconds) and ``seconds_before_last_cordon``, the invocation-seconds they
    held between ``t0`` and the last node's cordon (``last_cordon``, seconds from ``t0``): of the event source's
    concurrency, how much went to new warnings and how much to drains while nodes still waited to be cordoned."""
    kinds: dict[str, list[tuple[float, float]]] = {}
    for kind, began, ended in counters.batch_spans:
        kinds.setdefault(kind, []).append((began - t0, ended - t0))
    out: dict[str, Any] = {}
    for kind, spans in sorted(kinds.items()):
        held = 0.0 if last_cordon is None else sum(max(0.0, min(b, last_cordon) - max(a, 0.0)) for a, b in spans)
        out[kind] = {**(spread([b - a for a, b in spans]) or {}), "seconds_before_last_cordon": round(held, 1)}
    return out


SLOW_CALLS_LISTED = 20
"""How many slow calls of the invocations ended at the function timeout the report lists (the earliest)."""


def slow_calls(counters: Counters, t0: float) -> dict[str, Any]:
    """``{by_call: {call: {count, max}}, retries: {call: n}, in_timed_out: [{call, at, seconds}]}`` of
    :attr:`Counters.slow_calls` (seconds; ``at`` from ``t0``, monotonic): the first :data:`SLOW_CALLS_LISTED` slow
    calls of the invocations ended at the function timeout."""
    by_call: dict[str, dict[str, float | int]] = {}
    for _, took, call, _ in counters.slow_calls:
        entry = by_call.setdefault(call, {"count": 0, "max": 0.0})
        entry["count"] += 1
        entry["max"] = round(max(float(entry["max"]), took), 2)
    return {
        "by_call": dict(sorted(by_call.items(), key=lambda kv: -kv[1]["count"])),
        "retries": dict(counters.call_retries.most_common()),
        "in_timed_out": [
            {"call": call, "at": round(began - t0, 2), "seconds": round(took, 2)}
            for began, took, call, invocation in sorted(counters.slow_calls)
            if invocation in counters.ended_at_timeout
        ][:SLOW_CALLS_LISTED],
    }


def spread(values: list[float]) -> dict[str, float | int] | None:
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


def per_second(values: list[float]) -> list[int]:
    """How many of ``values`` (seconds from the start) fall in each whole second: ``[in [0, 1), in [1, 2), ...]``
    up to the last one; empty when there are none."""
    if not values:
        return []
    counts = [0] * (int(max(values)) + 1)
    for v in values:
        counts[int(max(0.0, v))] += 1
    return counts


@dataclass(slots=True)
class Run:
    """What one timed run recorded. Times are monotonic seconds (``t0``: the clock's start; ``end``: seconds from
    ``t0`` to the run's end); CPU figures are CPU seconds over the run: ``cpu`` this (world) process's,
    ``invocations_cpu`` its finished children's (the invocation and reconcile processes), ``moto_cpu`` the moto
    process's. ``names`` are the interrupted nodes, ``budgeted`` app -> replicas behind a PodDisruptionBudget,
    ``reclaimed`` the pods EC2 took back with their instance at its deadline. ``killed``/``duplicated``: invocations
    the crash injection killed, and the event ids delivered twice. ``calibration``: :func:`calibrate` before
    ``t0`` and after the run."""

    args: argparse.Namespace
    counters: Counters
    monitor: Monitor
    names: set[str]
    total_pods: int
    budgeted: dict[str, int]
    reclaimed: set[str]
    t0: float
    end: float
    cpu: float
    invocations_cpu: float
    moto_cpu: float
    events_put: float
    ticks_sent: list[float]
    killed: int
    duplicated: set[str]
    setup_seconds: float
    done: bool
    calibration: dict[str, float]


def _cpu_to_last_cordon(monitor: Monitor, cordoned: float | None) -> dict[str, float] | None:
    """CPU seconds each part of the bench used from the clock's start to the last node's cordon, their ``total``,
    and ``machine_share``: the total over the cores' seconds in that time (1.0: every core busy throughout).
    None when not every node was cordoned (or the probe did not run)."""
    start, end = monitor.cpu_at_start, monitor.cpu_at_last_cordon
    if cordoned is None or not start or not end:
        return None
    used = {part: round(end[part] - start[part], 2) for part in end}
    total = sum(end[part] - start[part] for part in end)
    cores = len(os.sched_getaffinity(0))
    return {**used, "total": round(total, 2), "machine_share": round(total / max(cordoned, 1e-9) / cores, 2)}


def report(run: Run) -> dict[str, Any]:
    """The figures of ``run`` as one JSON object (seconds from ``t0``, counts, CPU shares)."""
    from nodesmith.handlers.interruption import SAFETY_MARGIN_SECONDS

    drain_budget_end = FUNCTION_TIMEOUT_SECONDS - SAFETY_MARGIN_SECONDS  # seconds into an invocation
    counters = run.counters
    with run.monitor.lock:
        # Ready pods deleted after their node was: the pod garbage collector removed them, never evicted.
        with_node = {key for key, _, gone in run.monitor.deleted_while_ready if gone}
        reclaimed = run.reclaimed
        last_cordon = max(run.monitor.cordoned.values(), default=None)  # every node's, or the latest so far
        cordoned = last_cordon if len(run.monitor.cordoned) == len(run.names) else None
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
            "nodes": run.args.nodes,
            "pods": run.total_pods,
            "pods_behind_pdbs": sum(run.budgeted.values()),
            "concurrency": run.args.concurrency,
            "cpus": len(os.sched_getaffinity(0)),
            "batch_size": run.args.batch_size,
            "cordoned_seconds": None if cordoned is None else round(cordoned, 2),
            "nodes_cordoned": len(run.monitor.cordoned),
            "cordons_seconds": spread(list(run.monitor.cordoned.values())),
            # nodes cordoned in each second: a ramp bounded by the pollers, or a flat rate bounded by the CPUs
            "cordons_per_second": per_second(list(run.monitor.cordoned.values())),
            "replacements_launched_seconds": round(max(run.monitor.launched.values()), 2)
            if run.monitor.launched
            else None,
            "replacement_nodeclaims": len(run.monitor.launched),
            # each replacement NodeClaim's launch: the woken pass's, then any for pods left unschedulable
            "replacement_launches_seconds": spread(list(run.monitor.launched.values())),
            "pods_running_again_seconds": None
            if run.monitor.all_running_at is None
            else round(run.monitor.all_running_at, 2),
            "pods_lost": len(reclaimed | with_node) + counters.force_deleted,
            "pods_lost_to_reclaim": len(reclaimed),
            "pods_lost_with_their_node": len(with_node - reclaimed),
            "pods_lost_with_their_node_examples": sorted(
                f"{key} on {node}" for key, node, gone in run.monitor.deleted_while_ready if gone
            )[:5],
            "pods_force_deleted": counters.force_deleted,
            "pods_force_deleted_behind_pdbs": sum(
                n for app, n in counters.force_deleted_apps.items() if app in run.budgeted
            ),
            "pdb_violations": run.monitor.violations,
            # before the deadline's force-deletions (a pod's 30 s grace period before the 2-minute notice ends)
            "budget_chains_seconds": {
                k: spread(v) for k, v in run.monitor.budget_chains(NOTICE_SECONDS - POD_GRACE_SECONDS - 2).items()
            },
            "drains_per_event": {
                "min": min(first_attempts, default=0),
                "max": max(first_attempts, default=0),
                # runs that did not resume one ended at the function timeout: a second of these is a double drain
                "max_fresh": max(fresh, default=0),
                "resumed_after_timeout": sum(first_attempts) - sum(fresh),
                "events": len(first_attempts),
                "duplicated_deliveries": len(run.duplicated),
            },
            "crash_resume": None
            if not run.args.crash_every
            else {
                "targets": len(counters.crash_targets),
                "invocations_killed": run.killed,
                "drains_killed": len(counters.crashed),
                "resumed_from_stored_progress": len(counters.resumed_from_progress),
                "pods_evicted_before_crash_by_resumed_drains": sum(counters.resumed_from_progress.values()),
                "drains_per_crashed_event": {
                    "min": min(crashed_attempts, default=0),
                    "max": max(crashed_attempts, default=0),
                },
                "visibility_timeout_seconds": run.args.visibility_timeout,
            },
            "events_put_seconds": round(run.events_put, 2),
            "events_delivered_via": run.args.deliver,
            "events_preloaded": run.args.preload,
            "process_cpu_seconds": round(run.cpu, 1),
            "process_cpu_share": round(run.cpu / run.end / (os.cpu_count() or 1), 2),
            "invocation_processes": run.args.processes,
            "invocation_processes_cpu_seconds": round(run.invocations_cpu, 1),
            "moto_process_cpu_seconds": round(run.moto_cpu, 1),
            "machine_cpu_share": round(
                (run.cpu + run.invocations_cpu + run.moto_cpu) / run.end / (os.cpu_count() or 1), 2
            ),
            "cpu_seconds_to_last_cordon": _cpu_to_last_cordon(run.monitor, cordoned),
            "emulator_shortcuts": EMULATOR_SHORTCUTS,
            "pdb_violation_details": run.monitor.details[:5],
            "continuations": counters.continuations - counters.handed_off - counters.deferred,
            "drains_handed_off": counters.handed_off,
            "continuations_sent_back": counters.deferred,
            "invocations": counters.invocations,
            # every AWS and Kubernetes call the interruption invocations (and the wakes they ran) made after run.t0;
            # state-table calls by record (drain, lease, idempotency, offering)
            "api_calls": dict(sorted(counters.calls.items(), key=lambda kv: -kv[1])),
            "api_calls_per_node": round(sum(counters.calls.values()) / max(1, run.args.nodes), 1),
            # the items of the BatchWriteItem calls above (drain progress the drains of an invocation share)
            "batch_written_items": counters.batch_written,
            "records_failed": counters.failed_records,
            # the schedule's ticks: how many were sent; of those the reconcile function took up (the others
            # still waited behind a woken invocation when the run ended), when each was sent and began
            # (seconds from run.t0), how long it ran and what it did
            "reconcile_ticks": {
                "sent": len(run.ticks_sent),
                "taken_up": [
                    {
                        "sent_at": round(sent - run.t0, 1),
                        "began_at": round(began - run.t0, 1),
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
            "drains_started_seconds": spread([at - run.t0 for at in counters.drain_started.values()]),
            "invocation_seconds": spread(counters.invocation_seconds()),
            "invocations_by_batch": invocations_by_batch(counters, run.t0, last_cordon),
            # seconds from an invocation's start to each drain it began (the drain phase follows cordon and
            # replacement); "late": begun once the drain budget was spent (the timeout minus the safety margin)
            "drain_began_after_seconds": {
                **(spread(counters.drain_offsets) or {}),
                "late": sum(1 for s in counters.drain_offsets if s > drain_budget_end),
            },
            # ended at the function timeout as Lambda ends them: their AWS and Kubernetes calls fail from then
            # on (interruptions_timeouts.install_timeouts), nothing of theirs is acknowledged, SQS delivers again
            "invocations_timed_out": counters.timed_out,
            # the innermost nodesmith functions of each one's first call after its timeout (most common first)
            "timed_out_in": dict(counters.cut_off_in.most_common(8)),
            "function_timeout_enforced": not run.args.no_function_timeout,
            # calls of the handlers (and their pollers) that took SLOW_CALL_SECONDS or more, by call: how many, the
            # longest, and botocore's retries (with backoff) inside the calls that answered; then those made by the
            # invocations ended at the function timeout, to say where they waited
            "slow_calls": slow_calls(counters, run.t0),
            "invocations_past_timeout": sum(1 for s in counters.invocation_seconds() if s > FUNCTION_TIMEOUT_SECONDS),
            "reconcile_wakes": {
                "enabled": not run.args.no_reconcile_wake,
                "sent": counters.wakes_sent,
                "skipped": counters.wakes_skipped,
                # a woken invocation's passes: its first, the burst watch's (pods left unschedulable) and reruns
                "passes": len(counters.wake_passes),
                "invocations_ended": len(counters.wakes_ended),  # the others still watched when the run ended
                "nodeclaims_launched": sum(n for _, _, n in counters.wake_passes),
                "pass_seconds": spread([took for _, took, _ in counters.wake_passes]),
                "ended_at": spread([at - run.t0 for at, _, _ in counters.wake_passes]),
            },
            "replacement_pass_seconds": {
                "took": spread([took for _, took in counters.replacement_times]),
                "ended_at": spread([at - run.t0 for at, _ in counters.replacement_times]),
            },
            "nodes_removed": len(run.names & run.monitor.removed_nodes),
            "run_seconds": round(run.end, 2),
            "setup_seconds": round(run.setup_seconds, 2),
            "timed_out": not run.done,
            # how fast the machine was: a fixed pure-Python loop, just before t0 and after the run
            "calibration_loop_seconds": run.calibration,
            "note": f"the invocations run as threads of {run.args.processes} process(es) of their own, the woken "
            "reconcile function in one more; the world "
            "(moto: EC2, SQS, EventBridge, DynamoDB; the Kubernetes API emulator; the simulated "
            f"scheduler/kubelet/controllers) is one more process; all share {os.cpu_count()} cores; real "
            "invocations each have their own CPU, and so have the cluster's control plane and AWS",
        }
