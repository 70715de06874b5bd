"""The Lambda side of ``bench/interruptions.py``, in processes of its own (real invocations have their own CPUs):
:func:`invocations_process` runs its share of the interruption and termination functions' SQS event sources,
:func:`reconcile_process` the reconcile function. Hooks and wrappers that call the real code unchanged report:

* ``("records", function, [(message id, body, SQS attributes)])`` per invocation of an event source;
* ``("drain", node, ApproximateReceiveCount)`` per drain round begun, ``("round", NodeClaim, status, detail)`` per
  round ended, ``("forced", pod, node)`` per pod deleted directly (``KubeCluster.delete_pod``), ``("killed",
  node)`` per crash injected (``--crash-every``: a target node's first round is killed right after its first
  eviction, as Lambda ends a crashed runtime: nothing more of the invocation reaches AWS or the cluster);
* ``("reconcile", wake or tick, status)`` when a reconcile invocation begins and ends; ``("stats", function,
  Stats)`` per event source at the end.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infra.config import NodesmithConfig

if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterator

INTERRUPTION, TERMINATION, RECONCILE = "nodesmith-interruption", "nodesmith-termination", "nodesmith-reconcile"
TIMEOUT_SECONDS = {INTERRUPTION: float(NodesmithConfig.interruption_timeout_seconds),
                   TERMINATION: float(NodesmithConfig.termination_timeout_seconds),
                   RECONCILE: float(NodesmithConfig.reconcile_timeout_seconds)}  # fmt: skip
"""The functions' timeouts: the stack's defaults."""


@dataclass(frozen=True)
class Spec:
    """What a child process needs (picklable): the command line, the queue URLs, the crash targets (node names)
    and its share ``(k, n)`` of the pollers."""

    args: argparse.Namespace
    urls: dict[str, str]
    crash_targets: frozenset[str]
    share: tuple[int, int] = (0, 1)


def _instrument(spec: Spec, report: Any) -> None:
    """Wrap the termination path's round, drain and direct deletes to report them (and inject the crashes)."""
    from nodesmith.adapters.kube.cluster import KubeCluster
    from nodesmith.handlers import termination
    from nodesmith.services.termination import service
    from nodesmith.services.termination.drain import drain_round
    from nodesmith.services.termination.service import run_round
    from nodesmith.sim.lambda_runtime import kill_invocation

    local, lock, armed = threading.local(), threading.Lock(), set[str]()  # armed: targets in their first round
    evict, delete_pod = KubeCluster.evict, KubeCluster.delete_pod

    def counted_round(**kwargs: Any) -> Any:
        local.attempt = kwargs["attempt"]
        outcome = run_round(**kwargs)
        report.put(("round", kwargs["request"].nodeclaim, str(outcome.status), outcome.detail))
        return outcome

    def counted_drain(**kwargs: Any) -> Any:
        node = kwargs["node"].name
        report.put(("drain", node, local.attempt))
        if node in spec.crash_targets and local.attempt == 1:
            armed.add(node)
        try:
            return drain_round(**kwargs)
        finally:
            armed.discard(node)

    def crashing_evict(self: Any, **kwargs: Any) -> Any:
        answer = evict(self, **kwargs)
        with lock:
            crash = kwargs["pod"].node_name in armed
            armed.discard(kwargs["pod"].node_name)
        if crash:  # the invocation dies; the round's other evictions still in flight are its last calls
            report.put(("killed", kwargs["pod"].node_name))
            kill_invocation("crash injected after the round's first eviction")
        return answer

    def counted_delete(self: Any, **kwargs: Any) -> None:
        delete_pod(self, **kwargs)
        report.put(("forced", kwargs["pod"].key, kwargs["pod"].node_name))

    termination.run_round = counted_round  # type: ignore[attr-defined]
    service.drain_round = counted_drain  # type: ignore[attr-defined]
    KubeCluster.evict, KubeCluster.delete_pod = crashing_evict, counted_delete  # type: ignore[method-assign]


@contextlib.contextmanager
def _warm(spec: Spec) -> Iterator[None]:
    """A warm container: function timeouts enforced, handlers imported, clients built, the instance-type catalogue
    cached; the handlers' log lines (their CloudWatch Logs) go to stderr with ``--verbose``, else nowhere (the
    handlers are imported after the redirection: powertools' logger keeps the stdout it finds at import)."""
    import warnings

    warnings.filterwarnings("ignore", message="No application metrics to publish")
    with Path(os.devnull).open("w") as sink, contextlib.redirect_stdout(sys.stderr if spec.args.verbose else sink):
        import nodesmith.handlers.interruption
        import nodesmith.handlers.reconcile
        import nodesmith.handlers.termination  # noqa: F401
        from nodesmith.handlers import wiring
        from nodesmith.sim.lambda_runtime import install_function_timeouts

        install_function_timeouts()
        ports = wiring.ports(wiring.get_settings())
        for nodeclass in ports.cluster.list_ec2nodeclasses():
            ports.cloud.instance_types(nodeclass=nodeclass)
        yield


def _source(spec: Spec, function: str, handler: Any, report: Any) -> Any:
    """The event source of ``function`` (the stack's 1 s batching window for interruptions, none for terminations)."""
    import boto3

    from nodesmith.sim.lambda_runtime import EventSourceOptions, SqsEventSource

    args, interruptions = spec.args, function == INTERRUPTION
    options = EventSourceOptions(batch_size=args.batch_size, batching_window=1.0 if interruptions else 0.0,
                                 duplicate_every=args.duplicate_every if interruptions else 0,
                                 function_timeout=TIMEOUT_SECONDS[function],
                                 on_invoke=lambda records, *_: report.put(("records", function, [
                                     (r["messageId"], r["body"], r["attributes"]) for r in records])))  # fmt: skip
    sqs = boto3.client("sqs", region_name=os.environ.get("AWS_DEFAULT_REGION"))
    return SqsEventSource(sqs=sqs, queue_url=spec.urls[function], handler=handler, function_name=function,
                          options=options)  # fmt: skip


def invocations_process(spec: Spec, channels: tuple[Any, Any, Any, Any, Any]) -> None:
    """One process of concurrent invocations (a ``multiprocessing`` target): warm up, say so on ``ready``, wait for
    ``go``, run the pollers k, k + n, ... of both event sources until ``stop``, then report their stats. The
    interruption function's asynchronous Invoke of the reconcile function goes on ``wakes``."""
    go, stop, ready, report, wakes = channels
    with _warm(spec):
        from nodesmith.adapters.aws import clients
        from nodesmith.handlers import interruption, termination, wiring
        from nodesmith.sim.lambda_runtime import Scaling, route_async_invokes

        _instrument(spec, report)
        route_async_invokes(clients.client("lambda", region=wiring.region()), function_name=RECONCILE, events=wakes)
        sources = [_source(spec, INTERRUPTION, interruption.handler, report),
                   _source(spec, TERMINATION, termination.handler, report)]  # fmt: skip
        ready.put(os.getpid())
        go.wait()
        most = {INTERRUPTION: spec.args.concurrency, TERMINATION: spec.args.termination_concurrency}
        pollers = [threading.Thread(target=s.run, args=(stop,), kwargs={
            "scaling": Scaling(most=most[s.function_name]), "share": spec.share}) for s in sources]  # fmt: skip
        for poller in pollers:
            poller.start()
        for poller in pollers:
            poller.join()
        for source in sources:
            report.put(("stats", source.function_name, source.stats))


def reconcile_process(spec: Spec, channels: tuple[Any, Any, Any, Any, Any]) -> None:
    """The reconcile function (a ``multiprocessing`` target): one scheduled pass before the clock starts (the
    container the 1-minute schedule keeps warm has run one, with its garbage collection), then the wakes and the
    schedule's ticks queued on ``wakes``, one at a time, until ``stop``."""
    go, stop, ready, report, wakes = channels
    with _warm(spec):
        from nodesmith.handlers.reconcile import handler
        from nodesmith.sim.lambda_runtime import AsyncInvocations, LambdaContext

        def reconcile(event: dict[str, Any], context: Any) -> Any:
            kind, status = "wake" if event else "tick", "failed"
            report.put(("reconcile", kind, "began"))
            try:
                out = handler(event, context)
                status = str(out.get("status") or "ran").split(":")[0]
                return out
            finally:
                report.put(("reconcile", kind, status))

        with contextlib.suppress(Exception):  # a failed pass still leaves a warm container
            handler({}, LambdaContext(RECONCILE, timeout_seconds=TIMEOUT_SECONDS[RECONCILE]))
        function = AsyncInvocations(handler=reconcile, function_name=RECONCILE, events=wakes,
                                    timeout_seconds=TIMEOUT_SECONDS[RECONCILE],
                                    max_event_age=60.0)  # the stack's (infra/constructs/reconcile.py)  # fmt: skip
        ready.put(os.getpid())
        go.wait()
        function.serve(stop)
