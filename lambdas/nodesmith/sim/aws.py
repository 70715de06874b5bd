"""The embedded AWS: a moto server in this process, seeded like an EKS cluster's VPC for Karpenter.

``start()`` runs ``moto.server.ThreadedMotoServer`` on 127.0.0.1 (a free port), behind the fault layer of
:mod:`nodesmith.sim.aws_fault_server` (off until a plan is set: :func:`nodesmith.sim.aws_faults.set_faults`), and
points boto3 at it through ``AWS_ENDPOINT_URL`` with fake credentials; the real ``~/.aws`` files are never read
(``AWS_CONFIG_FILE`` / ``AWS_SHARED_CREDENTIALS_FILE`` point to an empty file). The adapters need no
special code path: they simply talk to that endpoint. :func:`start_process` does the same with moto in a
process of its own, so its CPU is not taken from the caller's threads (a benchmark's invocations).

``seed()`` creates what an EC2NodeClass with ``karpenter.sh/discovery: <cluster>`` selectors and
``alias: al2023@latest`` resolves against: a VPC with one subnet per zone (us-east-1a/b/c), a
security group, AL2023 EKS AMIs for amd64/arm64 (standard, nvidia, neuron) published under the
EKS SSM parameter names (moto has none; they are written into moto's SSM store directly because
the public API refuses ``/aws/`` names), a node role + instance profile, and an EKS cluster record
(version, service CIDR) for DescribeCluster.

:func:`create_queues` and :func:`create_state_table` create the queues, rules and table the stack would.

Spot prices cannot be written into moto (its DescribeSpotPriceHistory answers a 0.00001 placeholder
for everything), so :func:`write_price_table` writes a price table with per-zone ``spot`` overrides
that the pricing adapter prefers (``NODESMITH_PRICE_TABLE``).

:func:`fix_moto` makes moto behave as AWS does where our handlers depend on it: an EventBridge event
delivered to an SQS target without an input transformer is the event itself, ``account`` included
(:mod:`nodesmith.sim.aws_moto_fixes`); a
DynamoDB conditional write checks and writes atomically, and a Query or Scan reads under the same lock
(moto's server threads could otherwise both pass the condition of one lease, or change a table while a
Query iterates it: a 500); an SQS receive copies the in-flight FIFO messages before reading their groups
(another 500 when a thread changed the set mid-iteration); and whether an SQS message is visible or delayed
is read from the clock directly: moto scans every message of a queue for each message sent or received (its
approximate counts) and converted the time through ``datetime`` at every look, so a send or receive cost
grew with the queue's depth at a rate that made a burst's backlog, not the code under test, the measure. A
CreateFleet repeated with its ``ClientToken`` answers the first call's instances
(:mod:`nodesmith.sim.aws_idempotency`). Capacity reservations (``CreateCapacityReservation``,
``DescribeCapacityReservations``, CreateFleet into a reservation) are :mod:`nodesmith.sim.aws_capacity_reservations`'s.
An EC2 resource's tags are read from moto's tag store by the resource's id (:mod:`nodesmith.sim.aws_moto_fixes`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

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

ACCOUNT_ID = "123456789012"  # moto's default account
DEFAULT_ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
DEFAULT_PRICE_TABLE = (
    Path(__file__).resolve().parents[3].parent / "shared" / "data" / "ec2-ondemand-prices-us-east-1.json"
)
"""The reference on-demand table next to the project (``../shared/data``); absent on a user's machine."""

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

# (source, detail-type) of the interruption rules; Karpenter's CloudFormation adds a fifth for
# capacity reservations ("EC2 Capacity Reservation Instance Interruption Warning"), not used here.
INTERRUPTION_RULES = (
    ("SpotInterruption", "aws.ec2", "EC2 Spot Instance Interruption Warning"),
    ("Rebalance", "aws.ec2", "EC2 Instance Rebalance Recommendation"),
    ("InstanceStateChange", "aws.ec2", "EC2 Instance State-change Notification"),
    ("ScheduledChange", "aws.health", "AWS Health Event"),
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
    from moto.events.utils import EventTemplateParser
    from moto.sqs.models import Message, Queue

    from nodesmith.sim.aws_idempotency import honour_client_tokens
    from nodesmith.sim.aws_moto_fixes import deliver_events_whole, tags_by_resource_id

    deliver_events_whole(EventTemplateParser)
    lock = threading.RLock()

    def atomic(call: Any) -> Any:
        def locked(self: Any, *args: Any, **kwargs: Any) -> Any:
            with lock:
                return call(self, *args, **kwargs)

        return locked

    for name in ("put_item", "update_item", "delete_item", "transact_write_items", "query", "scan"):
        setattr(DynamoDBBackend, name, atomic(getattr(DynamoDBBackend, name)))

    def pending_groups(self: Any) -> set[str]:
        return {m.group_id for m in list(self._pending_messages) if m.group_id is not None}

    Queue.pending_message_groups = property(pending_groups)  # type: ignore[assignment]

    honour_client_tokens()  # with the capacity reservations it checks inside
    tags_by_resource_id()
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
class SeededAws:
    """What :func:`seed` created (ids by zone / (arch, variant))."""

    cluster_name: str
    region: str
    vpc_id: str
    subnets: Mapping[str, str]
    security_group_id: str
    images: Mapping[tuple[str, str], str]
    kubernetes_version: str
    cluster_cidr: str
    cluster_endpoint: str
    cluster_ca: str
    node_role_arn: str
    instance_profile: str


def _put_public_parameter(*, region: str, name: str, value: str) -> None:
    """Write an ``/aws/service/...`` SSM parameter into moto's store (its API rejects the prefix)."""
    from moto.ssm.models import Parameter, ssm_backends

    store = ssm_backends[ACCOUNT_ID][region]._parameters
    store[name].append(
        Parameter(  # type: ignore[abstract]  # moto's CloudFormation hooks are unused here
            account_id=ACCOUNT_ID,
            name=name,
            value=value,
            parameter_type="String",
            description=None,
            allowed_pattern=None,
            keyid=None,
            last_modified_date=datetime.now(UTC),
            version=len(store[name]) + 1,
            data_type="aws:ec2:image",
        )
    )


def _register_image(*, region: str, name: str, arch: str) -> str:
    from moto.ec2.models import ec2_backends

    ami = ec2_backends[ACCOUNT_ID][region].register_image(name=name, description=f"EKS AL2023 node ({arch})")
    ami.architecture = arch
    ami.owner_alias = "amazon"
    return str(ami.id)


def register_ami(*, name: str, arch: str = "x86_64", region: str = "us-east-1") -> str:
    """Register one more EKS-style AMI (available, owner ``amazon``) in the embedded EC2; returns its id.

    The demo points its EC2NodeClass at it to show AMI drift.
    """
    return _register_image(region=region, name=name, arch=arch)


@dataclass(frozen=True, kw_only=True)
class SeedCluster:
    """The EKS cluster :func:`seed` creates and the AMIs it publishes for it.

    ``kubernetes_version`` is a minor version (``"1.31"``); ``ami_version`` the EKS AMI release
    (``"v20260101"``); ``cluster_cidr`` the service IPv4 CIDR; ``cluster_endpoint`` the API server URL and
    ``cluster_ca`` its base64 PEM certificate authority, both only recorded in :class:`SeededAws`.
    """

    kubernetes_version: str = "1.31"
    ami_version: str = "v20260101"
    cluster_cidr: str = "172.20.0.0/16"
    cluster_endpoint: str = "https://127.0.0.1:6443"
    cluster_ca: str = ""


DEFAULT_SEED_CLUSTER = SeedCluster()
"""Kubernetes 1.31, AMI release v20260101, service CIDR 172.20.0.0/16, API server at https://127.0.0.1:6443."""


def seed(
    *,
    cluster_name: str,
    region: str = "us-east-1",
    zones: Sequence[str] = DEFAULT_ZONES,
    cluster: SeedCluster = DEFAULT_SEED_CLUSTER,
    endpoint_url: str | None = None,
) -> SeededAws:
    """Create the VPC, one subnet per zone of ``zones``, security group, AMIs + SSM parameters, IAM role/profile
    and the EKS cluster ``cluster`` describes.

    Resources are tagged ``karpenter.sh/discovery=<cluster_name>``. The AMIs are published under
    both ``.../recommended/image_id`` (alias ``al2023@latest``) and the pinned
    ``amazon-eks-node-al2023-<arch>-<variant>-<k8s>-<ami_version>`` name. ``endpoint_url`` defaults
    to ``AWS_ENDPOINT_URL``.
    """
    kubernetes_version, ami_version = cluster.kubernetes_version, cluster.ami_version
    import boto3

    from nodesmith.adapters.aws.nodeclass import ssm_alias_parameter

    def aws(service: str) -> Any:
        return boto3.client(
            service, region_name=region, endpoint_url=endpoint_url or os.environ.get("AWS_ENDPOINT_URL")
        )

    ec2, iam, eks = aws("ec2"), aws("iam"), aws("eks")
    discovery = [{"Key": "karpenter.sh/discovery", "Value": cluster_name}]
    vpc_id = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    ec2.create_tags(Resources=[vpc_id], Tags=[*discovery, {"Key": "Name", "Value": f"{cluster_name}-vpc"}])
    subnets: dict[str, str] = {}
    for index, zone in enumerate(zones):
        subnet = ec2.create_subnet(VpcId=vpc_id, CidrBlock=f"10.0.{index * 64}.0/18", AvailabilityZone=zone)["Subnet"]
        subnets[zone] = subnet["SubnetId"]
        ec2.create_tags(
            Resources=[subnet["SubnetId"]], Tags=[*discovery, {"Key": "Name", "Value": f"{cluster_name}-{zone}"}]
        )
    sg_id = ec2.create_security_group(GroupName=f"{cluster_name}-node", Description="Nodesmith nodes", VpcId=vpc_id)[
        "GroupId"
    ]
    ec2.create_tags(Resources=[sg_id], Tags=discovery)
    images: dict[tuple[str, str], str] = {}
    for arch, variants in (("x86_64", ("standard", "nvidia", "neuron")), ("arm64", ("standard", "nvidia"))):
        for variant in variants:
            name = f"amazon-eks-node-al2023-{arch}-{variant}-{kubernetes_version}-{ami_version}"
            image_id = _register_image(region=region, name=name, arch=arch)
            images[(arch, variant)] = image_id
            for version in ("latest", ami_version):
                parameter = ssm_alias_parameter(
                    k8s_version=kubernetes_version, arch=arch, variant=variant, version=version
                )
                _put_public_parameter(region=region, name=parameter, value=image_id)
    role_name = f"KarpenterNodeRole-{cluster_name}"
    trust = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}],
    }
    role_arn = iam.create_role(RoleName=role_name, AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
    iam.create_instance_profile(InstanceProfileName=role_name)
    iam.add_role_to_instance_profile(InstanceProfileName=role_name, RoleName=role_name)
    cluster_role = iam.create_role(RoleName=f"{cluster_name}-cluster", AssumeRolePolicyDocument=json.dumps(trust))[
        "Role"
    ]["Arn"]
    eks.create_cluster(
        name=cluster_name,
        version=kubernetes_version,
        roleArn=cluster_role,
        resourcesVpcConfig={"subnetIds": list(subnets.values()), "securityGroupIds": [sg_id]},
        kubernetesNetworkConfig={"serviceIpv4Cidr": cluster.cluster_cidr},
    )
    return SeededAws(
        cluster_name=cluster_name,
        region=region,
        vpc_id=vpc_id,
        subnets=subnets,
        security_group_id=sg_id,
        images=images,
        kubernetes_version=kubernetes_version,
        cluster_cidr=cluster.cluster_cidr,
        cluster_endpoint=cluster.cluster_endpoint,
        cluster_ca=cluster.cluster_ca,
        node_role_arn=role_arn,
        instance_profile=role_name,
    )


def write_price_table(
    *,
    path: str | Path,
    source: str | Path | None = DEFAULT_PRICE_TABLE,
    region: str = "us-east-1",
    zones: Sequence[str] = DEFAULT_ZONES,
    spot_ratio: float = 0.35,
) -> Path:
    """Write a price table with on-demand prices from ``source`` and per-zone spot overrides.

    Spot = on-demand x ``spot_ratio`` x a fixed per-zone factor (1.00, 1.04, 0.97, ...) so zones
    differ deterministically; types without an on-demand price get spot = on-demand estimate x
    ``spot_ratio`` (the table's ``spot_ratio``). When ``source`` is missing the table has no prices
    (a warning says so): the adapter then estimates them, labelled as estimates.
    """
    prices: dict[str, float] = {}
    if source is not None and Path(source).is_file():
        prices = {str(k): float(v) for k, v in json.loads(Path(source).read_text(encoding="utf-8"))["prices"].items()}
    else:
        LOG.warning(
            "price table %s not found: on-demand and spot prices will be estimates (set NODESMITH_PRICE_TABLE)", source
        )
    factors = (1.0, 1.04, 0.97, 1.02, 0.99, 1.05)
    spot = {
        name: {zone: round(price * spot_ratio * factors[i % len(factors)], 6) for i, zone in enumerate(zones)}
        for name, price in prices.items()
    }
    out = Path(path)
    out.write_text(
        json.dumps(
            {"currency": "USD", "region": region, "prices": prices, "spot": spot, "spot_ratio": spot_ratio},
            indent=1,
            sort_keys=True,
        ),
        encoding="utf-8",
    )
    return out


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
    throughput per message group), as the stack makes it.
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
