"""A reconcile pass on a large cluster: what one scheduled invocation costs, by phase, and the handler's memory.

The world: moto in a process of its own (``nodesmith.sim.aws.start_process``) and the Kubernetes API emulator in
this one, the simulated kubelet, kube-scheduler and controllers stopped so nothing else reads or writes while a
pass runs. The cluster is built before any pass: the demo's NodePool (no CPU limit) and EC2NodeClass, ``--nodes``
m5.large spot instances with their NodeClaims (``nodesmith.sim.fleet.launch_fleet``) and Ready Nodes, ``--pods``
Running pods spread evenly and sized so the nodes are full, and ``--pending`` unschedulable pods of ``--pending-cpu``
(``nodesmith.sim.full_cluster``).

The reconcile handler runs in a process of its own, as a Lambda container would: it is invoked ``--passes`` times
(default 2) with a scheduled event, the first on a cold container (``first_pass_seconds``: its imports done, its
clients, catalogue and caches empty), the others warm (``warm_pass_seconds``: the last). Nothing changes in the
cluster between passes but what the passes do themselves (the first launches NodeClaims for the pending pods;
without a kubelet they stay launched, so the warm pass solves the same pods against them).

``--mode`` says which invocations: ``poll`` (the default) the scheduled ones, the first listing the cluster and the
others reading what changed since (the container's kept cache); ``watch``
the full passes of one watching invocation (``NODESMITH_RECONCILE_MODE=watch``): before the first, the function's
cluster lists pods, Nodes, NodeClaims and NodePools once and follows their watches
(``KubeCluster.follow``, ``informer_sync_seconds``, part of the first pass's seconds), so every pass reads them from
memory; the scheduler is warmed as the watching invocation warms it: while that first listing runs (part of the
first pass's seconds), and after each pass (``warm_scheduler_seconds``, not part of the pass); after the passes the
invocation stops following and the container's next one follows again (``next_invocation_sync_seconds``: until its
cache serves, caught up from what the informers held). In poll mode, once the passes end, one more scheduled
invocation runs in a new process: a cold container's first pass on the cluster the earlier passes left, whose
NodeClaims already carry the pod-set records a first pass ever writes (``new_container_pass_seconds``; its report is
``new_container_pass``), what a container started later pays. The JSON's ``mode`` says which ran. Per pass:

- ``seconds``: the invocation's wall time; ``phases``: seconds listing (HTTP and JSON) and decoding (into the core's
  types) by the stage that read (``provisioning`` or ``disruption``), the provisioning solve (the scheduler), the
  launches (NodeClaim creates and CreateFleet calls, run in parallel: wall time), and the disruption pass without
  its reads, and within it ``disruption/snapshot`` (the node views, with the pod-set writes) and
  ``disruption/decide`` (the decision, with the consolidation simulations); in poll mode ``kept_cache_catch_up``,
  the wall time bringing the container's kept cache of pods, Nodes, NodeClaims and NodePools to the present
  (``KubeCluster.catch_up``: on a cold container their lists and decoding, counted in the list and decode phases
  too; on a warm one a watch each, to the API server's bookmark);
- ``kube_requests`` by method (``GET (watch)``: the catch-up and informer watches), ``kube_bytes_read`` (response
  bodies, watches not included), ``kube_lists`` (list calls by collection: how often a pass lists pods),
  ``ec2_calls`` by operation and ``aws_seconds``, the seconds spent in them (calls made in parallel add up);
- ``first_createfleet_seconds``: from the invocation's start to its first CreateFleet call (None: it launched
  nothing), what the pending pods waited for;
- ``gc_seconds``: the cyclic collector's pauses, by where the pass was (``catch-up``, ``provisioning``,
  ``disruption``) and generation, including ``heap_settle_seconds``, the full collections between passes;
- ``rss_mib``: the process's peak resident memory after the pass (``VmHWM``; as Lambda reports "Max Memory
  Used"), ``handler_peak_rss_mib`` the peak over every pass.

``--profile DIR`` writes a ``cProfile`` of each pass (``pass-1.pstats``, ...; profiling slows the passes).
Everything shares the machine's cores, the API emulator and moto included. Results go to ``bench/results/``.

    python bench/scale.py --nodes 1000 --pods 10000 --pending 500 --json
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import multiprocessing
import os
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lambdas"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nodesmith.cli.world import EmbeddedWorld
from nodesmith.sim import aws as sim_aws
from nodesmith.sim import full_cluster

TARGETS = {
    "5000/50000/2000": {"first_pass_seconds": 5.0, "warm_pass_seconds": 1.5, "handler_peak_rss_mib": 1024},
    "20000/200000/5000": {"warm_pass_seconds": 5.0, "handler_peak_rss_mib": 3072},
}


class ScaleWorld(EmbeddedWorld):
    """The demo's world with moto in a process of its own and no simulated kubelet, kube-scheduler or controllers."""

    def _start_aws(self) -> sim_aws.EmbeddedAws:
        return sim_aws.start_process(cluster_name=self.cluster_name)

    def _start_components(self) -> None:
        return None


def build(world: ScaleWorld, args: argparse.Namespace) -> dict[str, Any]:
    """Fill ``world`` with the cluster of the command line; returns what was built."""
    shape = full_cluster.FullCluster(
        nodes=args.nodes, pods=args.pods, pending=args.pending, pending_cpu=args.pending_cpu
    )
    return full_cluster.fill(store=world.store, ec2=world.client("ec2"), cluster_name=world.cluster_name, shape=shape)


# -- the handler's process ----------------------------------------------------------------------------------------


class Meter:
    """Counters and timers the handler's adapters and services are wrapped with (see :func:`instrument`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stage = "provisioning"
        self.catching_up = False
        self.reset()

    def reset(self) -> None:
        """Start a new pass."""
        self.stage = "provisioning"
        self.seconds: dict[str, float] = {}
        self.requests: Counter[str] = Counter()
        self.lists: Counter[str] = Counter()
        self.ec2: Counter[str] = Counter()
        self.bytes_read = 0
        self.first_launch: float | None = None

    def add(self, key: str, seconds: float) -> None:
        """Add ``seconds`` to ``key``."""
        with self.lock:
            self.seconds[key] = self.seconds.get(key, 0.0) + seconds


def _timed(meter: Meter, key: Any, fn: Any) -> Any:
    """``fn`` wrapped to add its seconds to ``key`` (a string, or a callable giving one at call time)."""

    def wrapper(*a: Any, **kw: Any) -> Any:
        began = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            meter.add(key() if callable(key) else key, time.perf_counter() - began)

    return wrapper


def instrument(meter: Meter) -> None:
    """Wrap the Kubernetes REST calls, list and parse helpers, the launches, the disruption pass and boto3 calls."""
    import botocore.client

    from nodesmith.adapters.aws.provider import Ec2CloudProvider
    from nodesmith.adapters.kube.calls import KubeRest
    from nodesmith.adapters.kube.cluster import KubeCluster
    from nodesmith.adapters.kube.informer import Informer
    from nodesmith.adapters.kube.karpenter_objects import KarpenterObjects
    from nodesmith.handlers import reconcile as handler_module
    from nodesmith.services.provisioning.creation import NodeClaimCreator

    send = KubeRest._send

    def counted_send(self: KubeRest, call: Any) -> Any:
        answer = send(self, call)
        with meter.lock:
            meter.requests[call.method] += 1
            meter.bytes_read += len(answer[1])
        return answer

    rest_list = KubeRest.list_versioned  # every list (KubeRest.list and the informers' lists) goes through it

    def counted_list(self: KubeRest, url_path: str, **kw: Any) -> Any:
        with meter.lock:
            meter.lists[url_path + (f"?{kw['fieldSelector']}" if kw.get("fieldSelector") else "")] += 1
        return rest_list(self, url_path, **kw)

    open_watch = Informer._open

    def counted_watch(self: Informer[Any], seconds: int, stopping: threading.Event | None = None) -> Any:
        with meter.lock:
            meter.requests["GET (watch)"] += 1
        return open_watch(self, seconds, stopping)

    Informer._open = counted_watch  # type: ignore[method-assign]
    catch_up = _timed(meter, "kept_cache_catch_up", KubeCluster.catch_up)

    def marked_catch_up(self: KubeCluster) -> Any:
        meter.catching_up = True
        try:
            return catch_up(self)
        finally:
            meter.catching_up = False

    KubeCluster.catch_up = marked_catch_up  # type: ignore[method-assign]
    KubeRest._send = counted_send  # type: ignore[method-assign]
    KubeRest.list_versioned = _timed(meter, lambda: f"list/{meter.stage}", counted_list)  # type: ignore[method-assign]
    KarpenterObjects._parse = staticmethod(  # type: ignore[method-assign]
        _timed(meter, lambda: f"decode/{meter.stage}", KarpenterObjects._parse)
    )
    NodeClaimCreator.launch_all = _timed(meter, "launch", NodeClaimCreator.launch_all)  # type: ignore[method-assign]
    create = _timed(meter, "create_fleet_calls", Ec2CloudProvider.create)

    def first_create(self: Ec2CloudProvider, **kw: Any) -> Any:
        with meter.lock:
            meter.first_launch = meter.first_launch or time.perf_counter()
        return create(self, **kw)

    Ec2CloudProvider.create = first_create  # type: ignore[method-assign]
    disruption = handler_module.run_disruption

    def staged_disruption(**kw: Any) -> Any:
        meter.stage = "disruption"
        try:
            return _timed(meter, "disruption_total", disruption)(**kw)
        finally:
            meter.stage = "provisioning"

    handler_module.run_disruption = staged_disruption
    from nodesmith.services.disruption import run as disruption_run
    from nodesmith.services.disruption import service as disruption_service

    decide = disruption_service.decide  # type: ignore[attr-defined]
    disruption_service.decide = _timed(meter, "disruption_decide", decide)  # type: ignore[attr-defined]
    disruption_run.DisruptionPass.snapshot = _timed(  # type: ignore[method-assign]
        meter, "disruption_snapshot", disruption_run.DisruptionPass.snapshot
    )
    make_call = botocore.client.BaseClient._make_api_call

    def counted_call(self: Any, operation: str, params: Any) -> Any:
        with meter.lock:
            meter.ec2[operation] += 1
        return _timed(meter, f"aws/{operation}", make_call)(self, operation, params)

    botocore.client.BaseClient._make_api_call = counted_call
    collecting: dict[int, float] = {}

    def timed_collection(phase: str, info: dict[str, Any]) -> None:  # the cyclic collector's pauses, by generation
        if phase == "start":
            collecting[threading.get_ident()] = time.perf_counter()
        elif (began := collecting.pop(threading.get_ident(), None)) is not None:
            where = "catch-up" if meter.catching_up else meter.stage
            meter.add(f"gc/{where}/generation {info['generation']}", time.perf_counter() - began)

    gc.callbacks.append(timed_collection)
    from nodesmith.handlers import heap

    heap.settle = _timed(meter, "heap_settle", heap.settle)  # its full collections are counted in gc_seconds too


def _rss_mib() -> float:
    """This process's peak resident memory (MiB): ``VmHWM`` of ``/proc/self/status``, which starts afresh at
    ``exec`` (``ru_maxrss`` keeps the high-water mark of the bench process the handler's was forked from)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024.0, 1)
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)


def _pass_report(meter: Meter, seconds: float, summary: dict[str, Any]) -> dict[str, Any]:
    s = meter.seconds
    reads = sum(v for k, v in s.items() if k.startswith(("list/", "decode/")) and k.endswith("/disruption"))
    phases = {k: round(v, 3) for k, v in sorted(s.items()) if k.startswith(("list/", "decode/"))}
    if "kept_cache_catch_up" in s:
        phases["kept_cache_catch_up"] = round(s["kept_cache_catch_up"], 3)
    aws = {k.removeprefix("aws/"): round(v, 3) for k, v in sorted(s.items()) if k.startswith("aws/")}
    collections = {k.removeprefix("gc/"): round(v, 3) for k, v in sorted(s.items()) if k.startswith("gc/")}
    phases["provisioning_solve"] = round(float(summary.get("scheduling_duration_seconds", 0.0)), 3)
    phases["launch"] = round(s.get("launch", 0.0), 3)
    phases["disruption"] = round(max(0.0, s.get("disruption_total", 0.0) - reads), 3)
    for part in ("snapshot", "decide"):  # within it: the views (with the pod-set writes), the decision (simulations)
        phases[f"disruption/{part}"] = round(s.get(f"disruption_{part}", 0.0), 3)
    return {
        "seconds": round(seconds, 3),
        "phases": phases,
        "kube_requests": dict(meter.requests),
        "kube_bytes_read": meter.bytes_read,
        "kube_lists": dict(sorted(meter.lists.items())),
        "ec2_calls": dict(sorted(meter.ec2.items())),
        "aws_seconds": aws,
        "gc_seconds": collections,
        "heap_settle_seconds": round(s.get("heap_settle", 0.0), 3),
        "rss_mib": _rss_mib(),
        "pods_pending": summary.get("pods_pending"),
        "pods_awaiting_capacity": summary.get("pods_awaiting_capacity"),
        "pods_scheduled": summary.get("pods_scheduled"),
        "nodeclaims_launched": summary.get("nodeclaims_launched"),
        "errors": list(summary.get("errors") or [])[:5],
        "disruption": summary.get("disruption"),
    }


def _follow(meter: Meter, wait_seconds: float) -> float:
    """Watch mode's cache: the reconcile function's cluster lists pods, Nodes, NodeClaims and NodePools once and
    follows their watches (:meth:`~nodesmith.adapters.kube.cluster.KubeCluster.follow`), as a watching invocation
    does before its first pass, then settles the heap as it does (:func:`~nodesmith.handlers.heap.settle`); returns
    the seconds until every kind was listed."""
    from nodesmith.handlers import heap, wiring

    cluster = wiring.build_cluster(wiring.get_settings())
    meter.stage = "informer"
    began = time.perf_counter()
    try:
        if not cluster.follow(wait_seconds=wait_seconds):  # type: ignore[attr-defined]
            raise RuntimeError(f"the watch cache did not list within {wait_seconds} s")
    finally:
        meter.stage = "provisioning"
    listed = time.perf_counter() - began
    heap.settle()
    return listed


def _follow_again(meter: Meter, wait_seconds: float) -> float:
    """A watching invocation's end (``unfollow``) and the container's next one's start (``follow``): returns the
    seconds until its cache served again (caught up from what the informers held, not listed)."""
    from nodesmith.handlers import wiring

    wiring.build_cluster(wiring.get_settings()).unfollow()  # type: ignore[attr-defined]
    return _follow(meter, wait_seconds)


def _warm_scheduler() -> float:
    """What a watching invocation runs after each full pass
    (:func:`~nodesmith.services.reconciler.watching.warm_scheduler`); returns its seconds."""
    from nodesmith.handlers import wiring
    from nodesmith.services.reconciler.watching import warm_scheduler

    settings = wiring.get_settings()
    began = time.perf_counter()
    warm_scheduler(cluster=wiring.build_cluster(settings), cloud=wiring.build_cloud(settings))
    return time.perf_counter() - began


def handler_process(conn: Any, passes: int, profile: str | None, mode: str, timeout: float) -> None:
    """The reconcile function's container: ``passes`` invocations; sends back one report per pass.

    ``poll``: scheduled invocations (the first lists the cluster, the others catch up its kept cache). ``watch``:
    the full passes of one watching invocation (provisioning, then disruption on the snapshot it left, garbage
    collection's fleet listing kept across them, as ``run_watch`` runs them), its cache filled before the first
    (whose seconds include that sync) and :func:`_warm_scheduler` after each, outside the pass's seconds."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # the handler's log and EMF lines (CloudWatch Logs in Lambda)
    meter = Meter()
    from nodesmith.handlers import heap
    from nodesmith.handlers import reconcile as reconcile_handler
    from nodesmith.handlers.reconcile import handler
    from nodesmith.services.reconciler.watching import warm_alongside
    from nodesmith.sim.lambda_runtime import LambdaContext

    instrument(meter)
    reports: list[dict[str, Any]] = [{"rss_after_import_mib": _rss_mib()}]
    for number in range(1, passes + 1):
        meter.reset()
        event = {"id": str(uuid.uuid4()), "detail-type": "Scheduled Event", "source": "aws.events", "detail": {}}
        context = LambdaContext(function_name="nodesmith-reconcile", timeout_seconds=900)
        profiler = None
        if profile:
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
        began = time.perf_counter()
        sync = None
        if mode == "watch" and number == 1:  # the catalogue is warmed while the cache lists, as run_watch does
            heap.tune()  # as the handler does for every invocation (the passes here are called below it)
            warmed = warm_alongside(_warm_scheduler)
            sync = _follow(meter, timeout)
            warmed()
        if mode == "watch":  # what run_watch runs for a full pass: the fleet listing is kept across passes
            summary = reconcile_handler._report(
                *reconcile_handler._pass_and_disrupt(more_to_come=True), time.monotonic(), mode="watch"
            )
        else:
            summary = handler(event, context)
        seconds = time.perf_counter() - began
        if profiler is not None and profile:
            profiler.disable()
            Path(profile).mkdir(parents=True, exist_ok=True)
            profiler.dump_stats(str(Path(profile) / f"pass-{number}.pstats"))
        report = _pass_report(meter, seconds, summary)
        report["first_createfleet_seconds"] = round(meter.first_launch - began, 3) if meter.first_launch else None
        if sync is not None:
            report["informer_sync_seconds"] = round(sync, 3)
        if mode == "watch":
            report["warm_scheduler_seconds"] = round(_warm_scheduler(), 3)
        reports.append(report)
    if mode == "watch":  # the invocation leaves; the container's next watching invocation follows again
        reports[0]["next_invocation_sync_seconds"] = round(_follow_again(meter, timeout), 3)
    conn.send(reports)
    conn.close()


# -- the run ------------------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Build the cluster, run the handler's passes in their own process, return the JSON-ready result."""
    began = time.monotonic()
    with contextlib.ExitStack() as stack:
        world = ScaleWorld()
        stack.enter_context(world)
        built = build(world, args)
        setup = time.monotonic() - began
        reports = _container(args, passes=args.passes, profile=args.profile)
        later = _container(args, passes=1, profile=None)[1] if args.mode == "poll" else None
    passes = reports[1:]
    shape = f"{args.nodes}/{args.pods}/{args.pending}"
    return {
        "command": "python bench/scale.py " + " ".join(sys.argv[1:]),
        "mode": args.mode,
        "cpus": os.cpu_count(),
        "nodes": args.nodes,
        "pods": args.pods,
        "pending": args.pending,
        "pending_cpu": args.pending_cpu,
        **built,
        "setup_seconds": round(setup, 1),
        "first_pass_seconds": passes[0]["seconds"],
        "warm_pass_seconds": passes[-1]["seconds"],
        "handler_peak_rss_mib": max(p["rss_mib"] for p in passes),
        "handler_rss_after_import_mib": reports[0]["rss_after_import_mib"],
        **(
            {"next_invocation_sync_seconds": reports[0]["next_invocation_sync_seconds"]}
            if "next_invocation_sync_seconds" in reports[0]
            else {}
        ),
        **({"new_container_pass_seconds": later["seconds"], "new_container_pass": later} if later else {}),
        "passes": passes,
        "targets": TARGETS.get(shape),
    }


def _container(args: argparse.Namespace, *, passes: int, profile: str | None) -> list[dict[str, Any]]:
    """``passes`` handler invocations in a process of their own (a Lambda container): its reports."""
    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    process = ctx.Process(target=handler_process, args=(send, passes, profile, args.mode, args.timeout), daemon=True)
    process.start()
    send.close()
    if not receive.poll(args.timeout):
        process.kill()
        raise RuntimeError(f"the handler's passes did not finish in {args.timeout} s")
    reports: list[dict[str, Any]] = receive.recv()
    process.join(timeout=30)
    return reports


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000, help="Ready m5.large nodes (default 1000)")
    parser.add_argument("--pods", type=int, default=10000, help="Running pods spread over them (default 10000)")
    parser.add_argument("--pending", type=int, default=500, help="unschedulable pods (default 500)")
    parser.add_argument("--pending-cpu", default="1", help="CPU request of each pending pod (default 1)")
    parser.add_argument("--passes", type=int, default=2, help="handler invocations, the first cold (default 2)")
    parser.add_argument(
        "--mode",
        choices=("poll", "watch"),
        default="poll",
        help="poll: scheduled invocations; watch: a watching invocation's full passes (default poll)",
    )
    parser.add_argument("--profile", default=None, help="directory for a cProfile of each pass")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds the passes may take (default 1800)")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.pods < 0 or args.pending < 0 or args.passes < 1:
        parser.error("--nodes and --passes must be at least 1, --pods and --pending at least 0")
    with tempfile_stdout():
        out = run(args)
    print(json.dumps(out) if args.json else json.dumps(out, indent=2), flush=True)
    return 0


@contextlib.contextmanager
def tempfile_stdout() -> Any:
    """Keep whatever the world prints off stdout, which carries only the result."""
    import tempfile

    with tempfile.TemporaryFile("w+") as sink, contextlib.redirect_stdout(sink):
        yield


if __name__ == "__main__":
    sys.exit(main())
