"""The embedded AWS: a moto server in this process, seeded like an EKS cluster's VPC for Karpenter.

``start()`` runs ``moto.server.ThreadedMotoServer`` on 127.0.0.1 (a free port), behind the fault layer of
:mod:`nodesmith.sim.aws_fault_server` (off until a plan is set: :func:`nodesmith.sim.aws_faults.set_faults`), and
points boto3 at it through ``AWS_ENDPOINT_URL`` with fake credentials; the real ``~/.aws`` files are never read
(``AWS_CONFIG_FILE`` / ``AWS_SHARED_CREDENTIALS_FILE`` point to an empty file). The adapters need no
special code path: they simply talk to that endpoint. :func:`start_process` does the same with moto in a
process of its own, so its CPU is not taken from the caller's threads (a benchmark's invocations).

``seed()`` creates what an EC2NodeClass with ``karpenter.sh/discovery: <cluster>`` selectors resolves against,
and :func:`write_price_table` the price table spot prices come from (:mod:`nodesmith.sim.aws_seed`, re-exported here).

:func:`create_queues` and :func:`create_state_table` create the queues, rules and table the stack would.

:func:`fix_moto` makes moto behave as AWS does where our handlers depend on it: an EventBridge event delivered to an
SQS target without an input transformer is the event itself, ``account`` included
(:mod:`nodesmith.sim.aws_moto_fixes`); a DynamoDB conditional write checks and writes atomically, and a Query or
Scan reads under the same lock (moto's server threads could otherwise both pass the condition of one lease, or
change a table while a Query iterates it: a 500), and a subnet hands out private IPs under that lock too (two
instances launched at once could both draw from its one generator: another 500); an SQS receive copies the in-flight
FIFO messages before reading their groups (another 500 when a thread changed the set mid-iteration); and whether an
SQS message is visible or delayed is read from the clock directly: moto scans every message of a queue for each
message sent or received (its approximate counts) and converted the time through ``datetime`` at every look, so a
send or receive cost grew with the queue's depth at a rate that made a burst's backlog, not the code under test, the
measure. A CreateFleet repeated with its ``ClientToken`` answers the first call's instances
(:mod:`nodesmith.sim.aws_idempotency`). Capacity reservations (``CreateCapacityReservation``,
``DescribeCapacityReservations``, CreateFleet into a reservation) are
:mod:`nodesmith.sim.aws_capacity_reservations`'s. An EC2 resource's tags are read from moto's tag store by the
resource's id, an instance is found by its id without copying every reservation (launching N instances was
quadratic), and a FIFO queue drops a repeated deduplication id for SQS's five minutes even once the first message
was deleted (:mod:`nodesmith.sim.aws_moto_fixes`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodesmith.sim.aws_seed import (
    DEFAULT_PRICE_TABLE,
    DEFAULT_SEED_CLUSTER,
    SeedCluster,
    SeededAws,
    register_ami,
    seed,
    write_price_table,
)

__all__ = [
    "DEFAULT_PRICE_TABLE",
    "DEFAULT_SEED_CLUSTER",
    "EmbeddedAws",
    "Queues",
    "SeedCluster",
    "SeededAws",
    "create_queues",
    "create_state_table",
    "fix_moto",
    "register_ami",
    "seed",
    "start",
    "start_process",
    "write_price_table",
]

LOG = logging.getLogger(__name__)

_ENV_KEYS = (
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_PROFILE",
    "AWS_EC2_METADATA_DISABLED",
    "AWS_ENDPOINT_URL_PRICING",
    "MOTO_EC2_LOAD_DEFAULT_AMIS",
)

# (source, detail-type) of the interruption rules, as Karpenter's CloudFormation has them
INTERRUPTION_RULES = (
    ("SpotInterruption", "aws.ec2", "EC2 Spot Instance Interruption Warning"),
    ("Rebalance", "aws.ec2", "EC2 Instance Rebalance Recommendation"),
    ("InstanceStateChange", "aws.ec2", "EC2 Instance State-change Notification"),
    ("ScheduledChange", "aws.health", "AWS Health Event"),
    ("CapacityReservationInterruption", "aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning"),
)


@dataclass
class EmbeddedAws:
    """A running embedded AWS: ``endpoint_url``, ``region``, the environment it set, and ``pid``, the process
    moto runs in when not this one (:func:`start_process`)."""

    endpoint_url: str
    region: str
    environ: dict[str, str]
    pid: int | None = None
    _server: Any = field(repr=False, default=None)
    _saved: dict[str, str | None] = field(repr=False, default_factory=dict)
    _empty_file: str = field(repr=False, default="")

    def client(self, service: str) -> Any:
        """A boto3 client for ``service`` against this endpoint (fake credentials), retrying as the adapters' do
        (``clients.DEFAULT_CONFIG``): Lambda's SQS event source rides out a fault plan's throttles and 5xx too."""
        import boto3
        from botocore.config import Config

        from nodesmith.adapters.aws.clients import DEFAULT_CONFIG

        return boto3.client(
            service,
            region_name=self.region,
            endpoint_url=self.endpoint_url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            config=Config(**DEFAULT_CONFIG),
        )

    def reset(self) -> None:
        """Wipe every moto backend (POST /moto-api/reset)."""
        import urllib.request

        req = urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST")
        with urllib.request.urlopen(req, timeout=10):
            pass

    def stop(self) -> None:
        """Stop the server and restore the environment variables ``start`` changed."""
        if self._server is not None:
            self._server.stop()
            self._server = None
        for key, value in self._saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved = {}
        if self._empty_file:
            Path(self._empty_file).unlink(missing_ok=True)
            self._empty_file = ""
        _reset_adapter_clients()

    def __enter__(self) -> EmbeddedAws:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def _reset_adapter_clients() -> None:
    from nodesmith.adapters.aws.clients import reset_clients

    reset_clients()


_FIXED: list[bool] = []


def fix_moto() -> None:
    """Apply the fixes of the module docstring to moto in this process (once; the server runs in it)."""
    if _FIXED:
        return
    import threading

    # moto's EC2 models list regions through a boto3 Session at import, which fails on an AWS_PROFILE that
    # names a profile this machine does not have (the embedded AWS never reads profiles).
    profile = os.environ.pop("AWS_PROFILE", None)
    try:
        import moto.ec2  # noqa: F401
    finally:
        if profile is not None:
            os.environ["AWS_PROFILE"] = profile
    from moto.dynamodb.models import DynamoDBBackend
    from moto.ec2.models.subnets import Subnet
    from moto.events.utils import EventTemplateParser
    from moto.sqs.models import Message, Queue

    from nodesmith.sim.aws_idempotency import honour_client_tokens
    from nodesmith.sim.aws_moto_fixes import (
        deliver_events_whole,
        fifo_deduplication_outlives_deletion,
        fleet_security_groups_from_template,
        instances_by_id,
        tags_by_resource_id,
    )

    deliver_events_whole(EventTemplateParser)
    lock = threading.RLock()

    def atomic(call: Any) -> Any:
        def locked(self: Any, *args: Any, **kwargs: Any) -> Any:
            with lock:
                return call(self, *args, **kwargs)

        return locked

    for name in ("put_item", "update_item", "delete_item", "transact_write_items", "query", "scan"):
        setattr(DynamoDBBackend, name, atomic(getattr(DynamoDBBackend, name)))
    for name in ("get_available_subnet_ip", "request_ip", "del_subnet_ip"):
        setattr(Subnet, name, atomic(getattr(Subnet, name)))

    def pending_groups(self: Any) -> set[str]:
        return {m.group_id for m in list(self._pending_messages) if m.group_id is not None}

    Queue.pending_message_groups = property(pending_groups)  # type: ignore[assignment]

    honour_client_tokens()  # with the capacity reservations it checks inside
    tags_by_resource_id()
    instances_by_id()
    fifo_deduplication_outlives_deletion(Queue)
    fleet_security_groups_from_template()
    Message.visible = property(lambda m: time.time() * 1000 > m.visible_at)  # type: ignore[method-assign,assignment]
    Message.delayed = property(lambda m: time.time() * 1000 < m.delayed_until)  # type: ignore[method-assign,assignment]
    _FIXED.append(True)


def start(*, region: str = "us-east-1", set_environ: bool = True) -> EmbeddedAws:
    """Start moto on 127.0.0.1 at a free port; with ``set_environ`` point boto3 at it (fake credentials).

    Takes well under 2 s (moto import + server thread). Call ``stop()`` (or use ``with``) to end it
    and restore the environment.
    """
    from nodesmith.sim.aws_fault_server import FaultyMotoServer

    fix_moto()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one access-log line per AWS call otherwise
    server = FaultyMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    fd, empty = tempfile.mkstemp(prefix="nodesmith-aws-", suffix=".ini")
    os.close(fd)
    environ = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": region,
        "AWS_REGION": region,
        "AWS_CONFIG_FILE": empty,
        "AWS_SHARED_CREDENTIALS_FILE": empty,
        "AWS_EC2_METADATA_DISABLED": "true",
        # moto has no Pricing API: a closed port fails fast, and the adapter falls back to its
        # price table instead of moto logging a 500 per call.
        "AWS_ENDPOINT_URL_PRICING": "http://127.0.0.1:9",
        # seed() registers its own AMIs; skipping moto's ~thousands of public ones halves EC2 start-up.
        "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
    }
    embedded = EmbeddedAws(endpoint_url=endpoint, region=region, environ=environ, _server=server, _empty_file=empty)
    if set_environ:
        _point_boto3_at(embedded)
    LOG.info("embedded AWS listening on %s", endpoint)
    return embedded


def _point_boto3_at(embedded: EmbeddedAws) -> None:
    embedded._saved = {key: os.environ.get(key) for key in _ENV_KEYS}
    os.environ.pop("AWS_PROFILE", None)
    os.environ.update(embedded.environ)
    _reset_adapter_clients()


@dataclass
class _MotoProcess:
    """The process :func:`start_process` started, and the pipe that tells it to stop."""

    process: Any
    conn: Any

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.send("stop")
        self.process.join(timeout=10)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout=10)


def _serve(cluster_name: str | None, region: str, conn: Any) -> None:
    """:func:`start_process`'s child: moto started, reset and seeded; its address sent; serving until told to stop
    (or until the parent's end of the pipe closes)."""
    embedded = start(region=region)
    embedded.reset()
    if cluster_name:
        seed(cluster_name=cluster_name, region=region)
    conn.send((embedded.endpoint_url, embedded.environ))
    with contextlib.suppress(EOFError, OSError):
        conn.recv()
    embedded.stop()


def start_process(
    *, cluster_name: str | None = None, region: str = "us-east-1", set_environ: bool = True, timeout: float = 180.0
) -> EmbeddedAws:
    """:func:`start` in a process of its own (``multiprocessing`` spawn), with :func:`fix_moto` applied there, so
    moto's CPU is not taken from this process's threads; empty, and :func:`seed`-ed for ``cluster_name`` when
    given (``seed`` writes into moto's memory, so it runs in that process). The returned world's ``pid`` is the
    moto process's; ``stop()`` ends it. Raises ``RuntimeError`` when moto does not answer within ``timeout`` s.
    """
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe()
    process = ctx.Process(target=_serve, args=(cluster_name, region, there), name="moto", daemon=True)
    process.start()
    if not here.poll(timeout):
        process.terminate()
        raise RuntimeError(f"the moto process did not start within {timeout:g} s")
    endpoint, environ = here.recv()
    fd, empty = tempfile.mkstemp(prefix="nodesmith-aws-", suffix=".ini")
    os.close(fd)
    environ = {**environ, "AWS_CONFIG_FILE": empty, "AWS_SHARED_CREDENTIALS_FILE": empty}
    embedded = EmbeddedAws(endpoint_url=endpoint, region=region, environ=environ, pid=process.pid,
                           _server=_MotoProcess(process, here), _empty_file=empty)  # fmt: skip
    if set_environ:
        _point_boto3_at(embedded)
    return embedded


def create_state_table(
    *, name: str = "nodesmith-state", region: str = "us-east-1", endpoint_url: str | None = None
) -> str:
    """Create the state table as the stack does (string keys ``pk``/``sk``, on demand;
    ``infra/constructs/reconcile.py``, read by ``nodesmith.adapters.aws.state``); returns its name.
    ``endpoint_url`` defaults to ``AWS_ENDPOINT_URL``."""
    import boto3

    dynamodb = boto3.client(
        "dynamodb", region_name=region, endpoint_url=endpoint_url or os.environ.get("AWS_ENDPOINT_URL")
    )
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": k, "AttributeType": "S"} for k in ("pk", "sk")],
        BillingMode="PAY_PER_REQUEST",
    )
    return name


@dataclass(frozen=True)
class Queues:
    """The URLs of the interruption queue (fed by the EventBridge rules) and the termination queue."""

    interruption_url: str
    termination_url: str


def create_queues(*, cluster_name: str, endpoint_url: str | None = None, region: str = "us-east-1") -> Queues:
    """Create the interruption queue with the EventBridge rules that feed it, and the termination queue.

    The interruption queue is named after the cluster, keeps messages 300 s, SQS-managed encryption, a policy
    allowing ``events.amazonaws.com`` to send; one rule per (source, detail-type) of
    :data:`INTERRUPTION_RULES` on the default bus, each targeting the queue (Karpenter's ``cloudformation.yaml``).
    The termination queue is ``<cluster>-termination.fifo``, FIFO with high throughput (deduplication and
    throughput per message group), as the stack makes it. Both keep SQS's default 30 s visibility timeout, which
    is what the stack gives them for its default function timeouts (20 s each, plus 10 s).
    """
    import boto3

    url = endpoint_url or os.environ.get("AWS_ENDPOINT_URL")
    sqs = boto3.client("sqs", region_name=region, endpoint_url=url)
    events = boto3.client("events", region_name=region, endpoint_url=url)
    queue_url = sqs.create_queue(
        QueueName=cluster_name,
        Attributes={"MessageRetentionPeriod": "300", "SqsManagedSseEnabled": "true"},
    )["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": ["events.amazonaws.com"]},
                "Action": "sqs:SendMessage",
                "Resource": queue_arn,
            }
        ],
    }
    sqs.set_queue_attributes(QueueUrl=queue_url, Attributes={"Policy": json.dumps(policy)})
    for name, source, detail_type in INTERRUPTION_RULES:
        rule = f"{cluster_name}-{name}"
        events.put_rule(Name=rule, EventPattern=json.dumps({"source": [source], "detail-type": [detail_type]}))
        events.put_targets(Rule=rule, Targets=[{"Id": "interruption-queue", "Arn": queue_arn}])
    termination_url = sqs.create_queue(
        QueueName=f"{cluster_name}-termination.fifo",
        Attributes={
            "SqsManagedSseEnabled": "true",
            "FifoQueue": "true",
            "DeduplicationScope": "messageGroup",
            "FifoThroughputLimit": "perMessageGroupId",
        },
    )["QueueUrl"]
    return Queues(interruption_url=str(queue_url), termination_url=str(termination_url))
