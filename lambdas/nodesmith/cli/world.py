"""The embedded world: moto + the Kubernetes emulator + simulated cluster components + our Lambdas.

:class:`EmbeddedWorld` starts the embedded AWS (``nodesmith.sim.aws``: EC2, SQS, EventBridge, SSM
on loopback), seeds it like an EKS cluster's VPC, creates the interruption queue and its four
EventBridge rules, starts the Kubernetes API emulator (``nodesmith.sim.kube``) and the simulated
kubelet, kube-scheduler and ReplicaSet/Deployment controllers in background threads, and points the
Lambda handlers at all of it through the same environment variables the CDK stack sets. The
handlers then run unchanged: :meth:`reconcile` invokes the reconcile handler the way the
EventBridge schedule would, and :meth:`deliver_interruptions` / :meth:`deliver_terminations` do what the
Lambda SQS event source mappings do (:class:`~nodesmith.sim.lambda_runtime.SqsEventSource`: receive, invoke
with an SQS batch, delete what was not reported as failed).

It lives in ``cli`` because it wires handlers and the simulation together; neither may import the
other.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import yaml

from nodesmith.sim.lambda_runtime import EventSourceOptions, LambdaContext, SqsEventSource

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    from nodesmith.sim.aws import EmbeddedAws
    from nodesmith.sim.kube import KubeEmulator
    from nodesmith.sim.kube.store import Store
    from nodesmith.sim.runner import Runner, Steppable

__all__ = ["MANIFESTS", "EmbeddedWorld", "LambdaContext"]

MANIFESTS = Path(__file__).resolve().parents[1] / "sim" / "manifests"
"""The demo's NodePool/EC2NodeClass and ``inflate`` Deployment."""

CLUSTER = "demo"  # the demo EC2NodeClass selects subnets/SGs tagged karpenter.sh/discovery=demo


class EmbeddedWorld:
    """A running embedded environment (context manager). See the module docstring.

    ``ready_delay`` is how long (seconds) a simulated node takes from registration to Ready.
    """

    def __init__(
        self, *, cluster_name: str = CLUSTER, ready_delay: float = 1.0, price_table: Path | None = None
    ) -> None:
        self.cluster_name = cluster_name
        self.ready_delay = ready_delay
        self.price_table = price_table
        self.aws: EmbeddedAws | None = None
        self.kube: KubeEmulator | None = None
        self.queue_url = ""
        self.termination_queue_url = ""
        self._sources: dict[str, SqsEventSource] = {}
        self._runners: list[Runner] = []
        self._saved_env: dict[str, str | None] = {}
        self._tmp = tempfile.TemporaryDirectory(prefix="nodesmith-demo-")
        self.lambda_log = Path(self._tmp.name) / "lambda.log"
        """Where the handlers' stdout (powertools JSON logs and EMF metric lines) goes."""

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> EmbeddedWorld:
        """Start AWS, Kubernetes and the simulated components; set the handlers' environment."""
        from nodesmith.sim import aws as embedded_aws
        from nodesmith.sim.kube import KubeEmulator

        self.aws = self._start_aws()
        queues = embedded_aws.create_queues(cluster_name=self.cluster_name)
        self.queue_url, self.termination_queue_url = queues.interruption_url, queues.termination_url
        prices = self.price_table or embedded_aws.write_price_table(path=Path(self._tmp.name) / "prices.json")
        self.kube = KubeEmulator()
        endpoint = self.kube.start()
        self._set_env(
            {
                "NODESMITH_CLUSTER_NAME": self.cluster_name,
                "NODESMITH_CLUSTER_ENDPOINT": endpoint,
                "NODESMITH_KUBE_AUTH": "none",
                "NODESMITH_PRICE_TABLE": str(prices),
                "NODESMITH_TERMINATION_QUEUE_URL": self.termination_queue_url,
                # the demo shortens Karpenter's 15 s command validation delay
                "NODESMITH_DISRUPTION_VALIDATION_DELAY_SECONDS": "2",
                "POWERTOOLS_METRICS_NAMESPACE": "Nodesmith",
                "POWERTOOLS_SERVICE_NAME": "nodesmith",
                "POWERTOOLS_TRACE_DISABLED": "true",
                "POWERTOOLS_LOG_LEVEL": os.environ.get("POWERTOOLS_LOG_LEVEL", "WARNING"),
            }
        )
        from nodesmith.handlers import wiring

        wiring.reset()
        self._start_components()
        return self

    def stop(self) -> None:
        """Stop everything and restore the environment (idempotent)."""
        for runner in self._runners:
            runner.stop()
        self._runners.clear()
        from nodesmith.handlers import wiring

        wiring.reset()
        if self.kube is not None:
            self.kube.stop()
            self.kube = None
        if self.aws is not None:
            self.aws.stop()
            self.aws = None
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved_env.clear()
        self._tmp.cleanup()

    def __enter__(self) -> EmbeddedWorld:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _start_aws(self) -> EmbeddedAws:
        """Start moto in this process, empty, and seed it for the cluster (subclasses may host it elsewhere);
        the returned world's environment points boto3 at it. moto's backends are the process's: a world
        started after another in the same process would otherwise find the first one's resources."""
        from nodesmith.sim import aws as embedded_aws

        embedded = embedded_aws.start()
        embedded.reset()
        embedded_aws.seed(cluster_name=self.cluster_name)
        return embedded

    def _set_env(self, values: Mapping[str, str]) -> None:
        for key, value in values.items():
            self._saved_env.setdefault(key, os.environ.get(key))
            os.environ[key] = value

    def _start_components(self) -> None:
        from nodesmith.handlers import wiring
        from nodesmith.sim.controllers import SimControllers
        from nodesmith.sim.kube_scheduler import SimScheduler
        from nodesmith.sim.kubelet import SimKubelet
        from nodesmith.sim.runner import Runner

        cloud = wiring.build_cloud(wiring.get_settings())
        components = (
            SimControllers(store=self.store),
            SimScheduler(store=self.store),
            SimKubelet(store=self.store, instances=cloud.list_instances, ready_delay=self.ready_delay),
        )
        self._runners = [Runner(cast("Steppable", c), interval=0.25).start() for c in components]

    # -- accessors ---------------------------------------------------------------------------------

    @property
    def store(self) -> Store:
        """The emulator's in-process store (the same objects the API serves)."""
        if self.kube is None:
            raise RuntimeError("the embedded world is not started")
        return self.kube.store

    def client(self, service: str) -> Any:
        """A boto3 client on the embedded AWS."""
        if self.aws is None:
            raise RuntimeError("the embedded world is not started")
        return self.aws.client(service)

    def apply_file(self, path: Path) -> list[dict[str, Any]]:
        """Apply every document of a YAML file to the emulator (create or update)."""
        applied = []
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc:
                applied.append(self.store.apply(doc))
        return applied

    def scale(self, *, deployment: str, replicas: int, namespace: str = "default") -> None:
        """Set ``spec.replicas`` of a Deployment (what ``kubectl scale`` does)."""
        self.store.mutate(
            "deployments.apps", deployment, lambda d: d["spec"].update(replicas=replicas), namespace=namespace
        )

    def register_ami(self, *, name: str, arch: str = "x86_64") -> str:
        """Register another EKS-style AMI in the embedded EC2 (for drift); returns its id."""
        from nodesmith.sim import aws as embedded_aws

        if self.aws is None:
            raise RuntimeError("the embedded world is not started")
        return embedded_aws.register_ami(name=name, arch=arch)

    def wait_for(self, predicate: Callable[[], bool], *, timeout: float, every: float = 0.1) -> bool:
        """Poll ``predicate`` until it holds or ``timeout`` seconds pass; True when it held."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            time.sleep(every)
        return predicate()

    # -- our Lambdas ---------------------------------------------------------------------------------

    def reconcile(self) -> dict[str, Any]:
        """Invoke the reconcile handler as the EventBridge schedule does; returns its summary."""
        from nodesmith.handlers.reconcile import handler

        event = {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": "Scheduled Event",
            "source": "aws.events",
            "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": "us-east-1",
            "resources": [],
            "detail": {},
        }
        with self._lambda_stdout():
            result: dict[str, Any] = handler(event, LambdaContext(function_name="nodesmith-reconcile"))
        return result

    @contextlib.contextmanager
    def _lambda_stdout(self) -> Iterator[None]:
        """Send what a handler prints (its CloudWatch Logs stream in Lambda) to :attr:`lambda_log`.

        The powertools Logger holds the stdout it saw at import, so its handler is pointed at the
        file too, and back afterwards.
        """
        from nodesmith.handlers.observability import logger

        handler = logger.registered_handler
        stream_handler = handler if isinstance(handler, logging.StreamHandler) else None
        with self.lambda_log.open("a", encoding="utf-8") as log, contextlib.redirect_stdout(log):
            previous = None
            if stream_handler is not None:
                previous = stream_handler.stream
                stream_handler.stream = log  # not setStream: it flushes the old stream, which may be closed
            try:
                yield
            finally:
                if stream_handler is not None:
                    open_before = previous is not None and not getattr(previous, "closed", False)
                    stream_handler.stream = previous if open_before else sys.stdout

    def put_spot_interruption(self, *, instance_id: str, zone: str) -> str:
        """Put a real-format ``EC2 Spot Instance Interruption Warning`` on the default event bus.

        The shape is the one in the EC2 documentation (``spot-instance-termination-notices``);
        EventBridge routes it through the rule to the interruption queue. Returns the entry id.
        """
        from nodesmith.sim.interruptions import put_spot_interruption

        return put_spot_interruption(self.client("events"), instance_id=instance_id, zone=zone)

    def _source(self, queue_url: str, handler: Any, function_name: str) -> SqsEventSource:
        if function_name not in self._sources:
            self._sources[function_name] = SqsEventSource(
                sqs=self.client("sqs"),
                queue_url=queue_url,
                handler=handler,
                function_name=function_name,
                options=EventSourceOptions(batching_window=0.0, function_timeout=60.0),
            )
        return self._sources[function_name]

    def deliver_interruptions(self, *, wait_seconds: int = 1) -> Iterator[dict[str, Any]]:
        """Do what the Lambda SQS event source mapping does, once per received batch, until the queue is empty:
        invoke the interruption handler and delete what it did not report in ``batchItemFailures``; yields
        ``{"records": n, "failures": m}`` per batch."""
        from nodesmith.handlers.interruption import handler

        source = self._source(self.queue_url, handler, "nodesmith-interruption")
        while True:
            before = source.stats.failed
            with self._lambda_stdout():
                records = source.poll_once(wait=wait_seconds)
            if not records:
                return
            yield {"records": records, "failures": source.stats.failed - before}

    def deliver_terminations(self, *, wait_seconds: int = 0) -> int:
        """Hand the termination queue's visible requests to the termination handler, as its event source mapping
        does, until none is visible (a node still draining comes back after its backoff); returns how many."""
        from nodesmith.handlers.termination import handler

        source = self._source(self.termination_queue_url, handler, "nodesmith-termination")
        with self._lambda_stdout():
            return source.drain(wait=wait_seconds)
