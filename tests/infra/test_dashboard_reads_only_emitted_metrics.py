"""Every metric the dashboard and the alarms read is one the code emits, with the same dimensions.

The read side comes from the synthesized template: the dashboard body's ``SEARCH`` expressions
(free-text ``Namespace="Nodesmith" MetricName="X"`` matches any dimensions, the schema form
``{Nodesmith,NodePool,Resource,service} MetricName="X"`` exactly those) and the alarms' Metrics
Insights queries (``SELECT SUM(X) FROM Nodesmith`` any dimensions, ``FROM SCHEMA(...)`` exact).

The emit side comes from running the handlers in-process against fakes with stdout captured, over
scenarios that take every path: a reconcile pass that launches, one whose spot offerings are all out
of capacity, a pass after the node registered, a pass that fails, the disruption pass asking for an
empty node's termination and the termination function removing it; an interruption batch with a
spot warning for our node, a malformed body, an event from another account and one about a managed
node group's instance; termination rounds blocked by a PodDisruptionBudget, then evicting, then
terminating; a spot warning received past its notice, whose pod is force-deleted; malformed and
unbacked termination requests. Each EMF document must put its points under exactly one dimension
set, with the unit ``infra/metric_names.py`` gives the name.

The interruption and termination scenarios use the small fakes below (the Cluster and CloudProvider
ports of ``nodesmith.core.ports``, just what the two handlers call); the reconcile ones the service
tests' ``reconcile_fakes``. Only where a path cannot be exercised (the disruption pass, when the
reconcile handler has none) does the test fall back to reading the handlers' source for
``add_metric`` / ``count_by`` / ``emit`` calls, and it marks just those metrics xfail when even that
finds nothing.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import re
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from infra.metric_names import BREAKDOWNS, NAMESPACE, UNITS, Dimension, MetricName

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from nodesmith.core.model import Pod, Taint

pytestmark = pytest.mark.xdist_group("infra-synth")

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
HANDLERS = REPO / "lambdas" / "nodesmith" / "handlers"
SERVICE = "service"  # Powertools' default dimension; the stack sets POWERTOOLS_SERVICE_NAME per function
DISRUPTION_METRICS = {MetricName.DISRUPTION_DECISIONS, MetricName.DISRUPTION_SAVINGS_USD_PER_HOUR}

Dims = frozenset[str]


@dataclass(frozen=True)
class Read:
    """One metric read by a widget or an alarm: ``dims`` None means "any dimension set"."""

    name: str
    dims: Dims | None
    where: str
    filters: frozenset[tuple[str, str]] = frozenset()


@dataclass
class Emitted:
    """What the scenarios emitted: (name -> dimension sets, units) and how many dimension sets per document."""

    dims: dict[str, set[Dims]] = field(default_factory=dict)
    units: dict[str, set[str]] = field(default_factory=dict)
    multi_set_documents: list[str] = field(default_factory=list)
    values: dict[str, set[str]] = field(default_factory=dict)  # name -> its Reason values
    dim_values: dict[tuple[str, str], set[str]] = field(default_factory=dict)  # (name, dimension) -> values

    def add_stdout(self, out: str) -> None:
        for line in out.splitlines():
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if not isinstance(doc, dict) or "_aws" not in doc:
                continue
            for directive in doc["_aws"]["CloudWatchMetrics"]:
                assert directive["Namespace"] == NAMESPACE
                sets = directive["Dimensions"]
                if len(sets) != 1:
                    self.multi_set_documents.append(line)
                for dim_set in sets:
                    dims = frozenset(dim_set) | {SERVICE}
                    for metric in directive["Metrics"]:
                        self.dims.setdefault(metric["Name"], set()).add(dims)
                        self.units.setdefault(metric["Name"], set()).add(metric.get("Unit", ""))
                        if "Reason" in dims:
                            self.values.setdefault(metric["Name"], set()).add(str(doc.get("Reason")))
                        for dim in dims - {SERVICE}:
                            self.dim_values.setdefault((metric["Name"], dim), set()).add(str(doc.get(dim)))


# --- the read side: the synthesized dashboard and alarms ----------------------------------------------

_FREE_SEARCH = re.compile(r"""SEARCH\('Namespace=\\?"(\w+)\\?" MetricName=\\?"(\w+)\\?"'""")
_SCHEMA_SEARCH = re.compile(r"""SEARCH\('\{([\w,]+)\} MetricName=\\?"(\w+)\\?"((?: \w+=\\?"\w+\\?")*)'""")
_FILTER = re.compile(r'(\w+)=\\?"(\w+)\\?"')
_SELECT = re.compile(r"SELECT \w+\((\w+)\) FROM (?:SCHEMA\(([\w, ]+)\)|(\w+))")


def _reads_in(expression: str, where: str) -> list[Read]:
    reads = []
    for namespace, name in _FREE_SEARCH.findall(expression):
        assert namespace == NAMESPACE, expression
        reads.append(Read(name, None, where))
    for schema, name, terms in _SCHEMA_SEARCH.findall(expression):
        namespace, *dims = schema.split(",")
        assert namespace == NAMESPACE, expression
        reads.append(Read(name, frozenset(dims), where, frozenset(_FILTER.findall(terms))))
    for name, schema, plain in _SELECT.findall(expression):
        if schema:
            namespace, *dims = [p.strip() for p in schema.split(",")]
            reads.append(Read(name, frozenset(dims), where))
        else:
            namespace = plain
            reads.append(Read(name, None, where))
        assert namespace == NAMESPACE, expression
    return reads


@pytest.fixture(scope="module")
def reads(template_without_topic: dict[str, Any]) -> list[Read]:
    found: list[Read] = []
    for logical_id, resource in template_without_topic["Resources"].items():
        props = resource.get("Properties", {})
        if resource["Type"] == "AWS::CloudWatch::Dashboard":
            parts = props["DashboardBody"]["Fn::Join"][1]
            body = json.loads("".join(p if isinstance(p, str) else "<token>" for p in parts))
            for widget in body["widgets"]:
                if widget["type"] != "metric":
                    continue
                title = widget["properties"].get("title", "?")
                for line in widget["properties"]["metrics"]:
                    for item in line:
                        if isinstance(item, dict) and "expression" in item:
                            found += _reads_in(item["expression"], f"widget {title!r}")
                    if line and line[0] == NAMESPACE:  # a plain metric line: namespace, name, dim, value, ...
                        dims = frozenset(x for x in line[2:-1:2] if isinstance(x, str))
                        found.append(Read(line[1], dims, f"widget {title!r}"))
        elif resource["Type"] == "AWS::CloudWatch::Alarm":
            for query in props.get("Metrics", []):
                if "Expression" in query:
                    found += _reads_in(query["Expression"], f"alarm {logical_id}")
            if props.get("Namespace") == NAMESPACE:
                dims = frozenset(d["Name"] for d in props.get("Dimensions", []))
                found.append(Read(props["MetricName"], dims, f"alarm {logical_id}"))
    return found


def test_the_read_side_is_parsed_from_every_widget_and_alarm(reads: list[Read]) -> None:
    # Guards the parser: an expression format it no longer recognises would silently read nothing.
    names = {r.name for r in reads}
    assert names == {m.value for m in MetricName}
    assert any(r.dims is not None for r in reads), "the per-NodePool schema search was not found"
    assert any(r.where.startswith("alarm") for r in reads)


POOL_BREAKDOWNS = [name for name, dims in BREAKDOWNS.items() if Dimension.CAPACITY_TYPE in dims]


@pytest.mark.parametrize("name", [m.value for m in POOL_BREAKDOWNS])
def test_a_graph_breaks_down_by_nodepool_and_capacity_type(name: str, reads: list[Read]) -> None:
    # NodeClaims created/launched/registered/initialized/terminated and the cost, per NodePool
    expected = frozenset({*BREAKDOWNS[MetricName(name)], "service"})
    assert any(r.name == name and r.dims == expected for r in reads), [r for r in reads if r.name == name]


def test_every_function_sets_the_service_dimension(template_without_topic: dict[str, Any]) -> None:
    resources = template_without_topic["Resources"]
    functions = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::Lambda::Function"]
    nodesmith = [f for f in functions if str(f.get("Handler", "")).startswith("nodesmith.handlers.")]
    assert len(nodesmith) == 3
    services = set()
    for function in nodesmith:
        env = function["Environment"]["Variables"]
        assert env["POWERTOOLS_SERVICE_NAME"] and env["POWERTOOLS_METRICS_NAMESPACE"] == NAMESPACE
        services.add(env["POWERTOOLS_SERVICE_NAME"])
    assert len(services) == 3


# --- the emit side: the handlers, in-process ----------------------------------------------------------


class Context:
    """The Lambda context attributes Powertools reads."""

    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:nodesmith"
    memory_limit_in_mb = 1024
    aws_request_id = "req-contract"
    log_group_name = "/aws/lambda/nodesmith"
    log_stream_name = "2026/11/22/[$LATEST]contract"

    def __init__(self, function_name: str) -> None:
        self.function_name = function_name

    def get_remaining_time_in_millis(self) -> int:
        return 120_000


def _captured(run: Callable[[], Any], emitted: Emitted) -> Exception | None:
    """Run ``run`` with stdout captured into ``emitted``; returns what it raised (a failing pass re-raises)."""
    out = io.StringIO()
    raised: Exception | None = None
    with contextlib.redirect_stdout(out):
        try:
            run()
        except Exception as exc:
            raised = exc
    emitted.add_stdout(out.getvalue())
    return raised


def _reconcile_scenarios(emitted: Emitted) -> None:
    sys.path.insert(0, str(TESTS / "services"))
    from reconcile_fakes import FakeCloud, FakeCluster, make_nodeclass, make_nodepool, make_pod, node_for

    from nodesmith.core.errors import KubernetesError
    from nodesmith.handlers import reconcile as reconcile_handler
    from nodesmith.handlers import wiring
    from nodesmith.handlers.settings import Settings

    settings = Settings(cluster_name="test", cluster_endpoint="http://kube")

    def invoke(cluster: Any, cloud: Any) -> Exception | None:
        wiring.reset()
        wiring.set_ports(cluster=cluster, cloud=cloud, settings=settings)
        return _captured(lambda: reconcile_handler.handler({}, Context("nodesmith-reconcile")), emitted)

    # 1. pending pods -> a NodeClaim is created and launched; then its node registers and initializes
    # (stamped with the wall clock the handler uses, so the disruption pass finds nothing expired)
    now = time.time()
    cluster = FakeCluster(now=now, nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])
    cluster.pods = [make_pod(f"inflate-{i}", created=now - 30) for i in range(3)]
    cloud = FakeCloud(now=now)
    assert invoke(cluster, cloud) is None
    for claim in cluster.nodeclaims.values():
        instance = next(i for i in cloud.instances.values() if i.provider_id == claim.status.provider_id)
        cluster.nodes.append(node_for(instance, claim, ready=True))
    assert invoke(cluster, cloud) is None
    assert all(nc.is_true("Initialized") for nc in cluster.nodeclaims.values())

    # 2. every spot offering out of capacity -> launch failures, offerings marked unavailable
    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])
    cluster.pods = [make_pod("inflate-0")]
    cloud = FakeCloud()
    cloud.ice = {(it.name, o.zone, "spot") for it in cloud.types for o in it.offerings}
    invoke(cluster, cloud)

    # 3. the pass itself fails -> ReconcileErrors = 1, and the handler re-raises
    broken = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])

    def unavailable() -> list[Any]:
        raise KubernetesError("apiserver unavailable", status=503)

    broken.list_nodes = unavailable
    assert isinstance(invoke(broken, FakeCloud()), KubernetesError)
    wiring.reset()


def _disruption_scenario(emitted: Emitted) -> bool:
    """Remove an empty node: the reconcile handler's disruption pass asks for its termination, the termination
    handler removes it; False when the reconcile handler has no disruption pass."""
    sys.path.insert(0, str(TESTS / "services"))
    from reconcile_fakes import FakeCloud, FakeCluster, FakeQueue, make_nodeclass, make_nodepool, make_pod, node_for

    from nodesmith.handlers import reconcile as reconcile_handler
    from nodesmith.handlers import termination, wiring
    from nodesmith.handlers.observability import metrics
    from nodesmith.handlers.settings import Settings

    run_disruption = getattr(reconcile_handler, "run_disruption", None)
    if run_disruption is None:
        return False

    @dataclass
    class DrainableCluster(FakeCluster):  # type: ignore[misc]
        def taint_and_cordon(self, *, node_name: str, taint: Taint) -> bool:
            self.nodes = [
                replace(n, taints=(*n.taints, taint), unschedulable=True) if n.name == node_name else n
                for n in self.nodes
            ]
            return any(n.name == node_name for n in self.nodes)

        def evict(self, *, pod: Pod, grace_period_seconds: int | None = None) -> str:
            self.pods = [p for p in self.pods if p.key != pod.key]
            return "evicted"

        def delete_pod(self, *, pod: Pod, grace_period_seconds: int | None = None) -> None:
            self.pods = [p for p in self.pods if p.key != pod.key]

    cluster = DrainableCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])
    cluster.pods = [make_pod("inflate-0")]
    cloud, queue = FakeCloud(), FakeQueue()
    wiring.reset()
    wiring.set_ports(
        cluster=cluster, cloud=cloud, queue=queue, settings=Settings(cluster_name="test", cluster_endpoint="http://k")
    )
    try:
        reconcile_handler.run_pass(now=1000.0)
        for claim in cluster.nodeclaims.values():
            instance = next(i for i in cloud.instances.values() if i.provider_id == claim.status.provider_id)
            cluster.nodes.append(node_for(instance, claim, ready=True))
        cluster.now = cloud.now = 1001.0
        reconcile_handler.run_pass(now=1001.0)
        cluster.pods = []  # scaled to zero: the node is empty
        for now in (1100.0, 1116.0):  # found, then found again after the 15 s validation delay
            cluster.now = cloud.now = now
            _captured(lambda now=now: run_disruption(now=now), emitted)  # type: ignore[misc]
            _captured(metrics.flush_metrics, emitted)
        records = [_sqs_record(r.body(), f"empty-{n}", queue="termination") for n, r in enumerate(queue.sent)]
        _captured(lambda: termination.handler({"Records": records}, Context("nodesmith-termination")), emitted)
    finally:
        for state in ("_PENDING", "_RECENT_EVENTS"):
            with contextlib.suppress(AttributeError):
                getattr(reconcile_handler, state).clear()
        wiring.reset()
    _repair_scenario(emitted, DrainableCluster)
    return True


def _repair_scenario(emitted: Emitted, cluster_type: type[Any]) -> None:
    """Node repair (``NodeRepair=true``): a node NotReady for 31 minutes is repaired (its pods fit elsewhere: a
    delete-only command) and the termination handler removes it, counted terminated for reason Unhealthy."""
    from reconcile_fakes import FakeCloud, FakeQueue, make_nodeclass, make_nodepool, make_pod, node_for

    from nodesmith.core.api.nodepool import Budget
    from nodesmith.core.model import NodeCondition
    from nodesmith.handlers import reconcile as reconcile_handler
    from nodesmith.handlers import termination, wiring
    from nodesmith.handlers.observability import metrics
    from nodesmith.handlers.settings import Settings

    pool = make_nodepool()
    budgets = pool.spec.disruption.model_copy(update={"budgets": [Budget(nodes="5")]})
    pool = pool.model_copy(update={"spec": pool.spec.model_copy(update={"disruption": budgets})})
    cluster = cluster_type(nodepools=[pool], nodeclasses=[make_nodeclass()])
    cluster.pods = [make_pod("inflate-0")]
    cloud, queue = FakeCloud(), FakeQueue()
    settings = Settings(cluster_name="test", cluster_endpoint="http://k", feature_gates="NodeRepair=true")
    wiring.reset()
    wiring.set_ports(cluster=cluster, cloud=cloud, queue=queue, settings=settings)
    try:
        reconcile_handler.run_pass(now=1000.0)
        for claim in cluster.nodeclaims.values():
            instance = next(i for i in cloud.instances.values() if i.provider_id == claim.status.provider_id)
            cluster.nodes.append(node_for(instance, claim, ready=True))
        cluster.now = cloud.now = 1001.0
        reconcile_handler.run_pass(now=1001.0)
        cluster.pods = []
        sick = NodeCondition("Ready", "Unknown", 1001.0)
        cluster.nodes = [replace(n, ready=False, conditions=(sick,)) for n in cluster.nodes]
        for now in (1001.0 + 31 * 60, 1001.0 + 31 * 60 + 16):  # found, then found again after the validation delay
            cluster.now = cloud.now = now
            _captured(lambda now=now: reconcile_handler.run_disruption(now=now), emitted)  # type: ignore[misc]
            _captured(metrics.flush_metrics, emitted)
        assert [r.reason for r in queue.sent] == ["Unhealthy"], queue.sent
        records = [_sqs_record(r.body(), f"sick-{n}", queue="termination") for n, r in enumerate(queue.sent)]
        _captured(lambda: termination.handler({"Records": records}, Context("nodesmith-termination")), emitted)
    finally:
        for state in ("_PENDING", "_RECENT_EVENTS"):
            with contextlib.suppress(AttributeError):
                getattr(reconcile_handler, state).clear()
        wiring.reset()


# --- interruption and termination: the world as the two handlers see it ------------------------------

ACCOUNT, REGION, CLUSTER = "123456789012", "us-west-2", "demo"
OURS, MANAGED = "i-0123456789abcdef0", "i-0fedcba9876543210"  # ours; a managed node group's (no NodePool tag)
NODE, CLAIM = "ip-10-0-0-1.us-west-2.compute.internal", "default-abcde"


@dataclass
class World:
    """One spot node of ours with one pod, and a managed node group's instance: the Cluster and CloudProvider
    ports, as far as the interruption and termination handlers call them. ``blocks`` is how many evictions of
    the pod a PodDisruptionBudget refuses (HTTP 429) before one is accepted."""

    now: float
    pod_grace: int = 30
    blocks: int = 0
    claims: dict[str, Any] = field(default_factory=dict)
    nodes: dict[str, Any] = field(default_factory=dict)
    pods: list[Any] = field(default_factory=list)
    instances: dict[str, Any] = field(default_factory=dict)
    sent: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        from nodesmith.core.api.nodeclaim import NodeClaim
        from nodesmith.core.model import Node, Pod
        from nodesmith.core.ports import Instance
        from nodesmith.core.termination import TERMINATION_FINALIZER

        zone, provider = f"{REGION}a", f"aws:///{REGION}a/{OURS}"
        self.claims[CLAIM] = NodeClaim.model_validate(
            {
                "metadata": {"name": CLAIM, "uid": "uid-claim", "labels": {"karpenter.sh/nodepool": "default"},
                             "finalizers": [TERMINATION_FINALIZER]},
                "spec": {"requirements": [],
                         "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
                "status": {"providerID": provider, "nodeName": NODE},
            }
        )  # fmt: skip
        self.nodes[NODE] = Node(name=NODE, provider_id=provider, ready=True)
        self.pods.append(
            Pod(namespace="default", name="web-1", uid="uid-web-1", node_name=NODE, phase="Running",
                owner_kind="ReplicaSet", owner_name="web-abc", termination_grace_period_seconds=self.pod_grace)
        )  # fmt: skip
        owned = {f"kubernetes.io/cluster/{CLUSTER}": "owned"}
        self.instances[OURS] = Instance(
            instance_id=OURS, instance_type="m5.large", zone=zone, capacity_type="spot", state="running",
            launch_time=self.now - 3600, private_dns_name=NODE,
            tags={**owned, "karpenter.sh/nodepool": "default", "karpenter.sh/nodeclaim": CLAIM},
        )  # fmt: skip
        self.instances[MANAGED] = Instance(
            instance_id=MANAGED, instance_type="m5.large", zone=zone, capacity_type="spot", state="running",
            launch_time=self.now - 3600, tags={**owned, "eks:nodegroup-name": "system"},
        )  # fmt: skip

    # Cluster
    def get_nodeclaim(self, *, name: str) -> Any:
        claim = self.claims.get(name)
        return None if claim is None else claim.model_copy(deep=True)

    def annotate_nodeclaim(self, *, name: str, annotations: Any, resource_version: str | None = None) -> None:
        from nodesmith.core.errors import NotFoundError

        if name not in self.claims:
            raise NotFoundError(f"nodeclaim {name} not found", status=404)
        self.claims[name].metadata.annotations.update(annotations)

    def delete_nodeclaim(self, *, name: str) -> None:
        from nodesmith.core.timestamps import to_rfc3339

        claim = self.claims.get(name)
        if claim is not None and claim.metadata.finalizers:
            claim.metadata.deletion_timestamp = claim.metadata.deletion_timestamp or to_rfc3339(self.now)
        elif claim is not None:
            del self.claims[name]

    def remove_nodeclaim_finalizer(self, *, name: str, finalizer: str) -> None:
        claim = self.claims.get(name)
        if claim is not None:
            claim.metadata.finalizers = [f for f in claim.metadata.finalizers if f != finalizer]
            if claim.metadata.deletion_timestamp is not None and not claim.metadata.finalizers:
                del self.claims[name]

    def get_node(self, *, name: str) -> Any:
        return self.nodes.get(name)

    def taint_and_cordon(self, *, node_name: str, taint: Any) -> bool:
        node = self.nodes.get(node_name)
        if node is not None and taint not in node.taints:
            self.nodes[node_name] = replace(node, taints=(*node.taints, taint), unschedulable=True)
        return node is not None

    def delete_node(self, *, name: str) -> None:
        self.nodes.pop(name, None)

    def remove_node_finalizer(self, *, name: str, finalizer: str) -> None:
        return None

    def list_pods(self, *, node_name: str | None = None) -> list[Any]:
        return [p for p in self.pods if node_name is None or p.node_name == node_name]

    def evict(self, *, pod: Any, grace_period_seconds: int | None = None) -> str:
        if self.blocks > 0:
            self.blocks -= 1
            return "blocked"
        self.pods = [p for p in self.pods if p.key != pod.key]
        return "evicted"

    def delete_pod(self, *, pod: Any, grace_period_seconds: int | None = None) -> None:
        self.pods = [p for p in self.pods if p.key != pod.key]

    def record_event(self, *, ref: Any, reason: str, message: str, type_: str = "Normal") -> None:
        return None

    # CloudProvider
    def get_instance(self, *, instance_id: str) -> Any:
        return self.instances.get(instance_id)

    def get_instances(self, *, instance_ids: Any) -> dict[str, Any]:
        return {i: self.instances[i] for i in instance_ids if i in self.instances}

    def terminate(self, *, instance_ids: Any) -> None:
        for iid in instance_ids:
            self.instances[iid] = replace(self.instances[iid], state="shutting-down")

    def mark_unavailable(self, *, offerings: Any) -> None:
        return None

    # TerminationQueue
    def send(self, *, requests: Any) -> list[str]:
        self.sent.extend(requests)
        return []


def _sqs_record(
    body: str, message_id: str, *, queue: str, sent: float | None = None, receives: int = 1
) -> dict[str, Any]:
    sent = time.time() if sent is None else sent
    return {
        "messageId": message_id,
        "receiptHandle": f"rh-{message_id}",
        "body": body,
        "attributes": {"ApproximateReceiveCount": str(receives), "SentTimestamp": str(int(sent * 1000))},
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": f"arn:aws:sqs:{REGION}:{ACCOUNT}:nodesmith-{queue}",
        "awsRegion": REGION,
    }


def _warning(instance_id: str, tag: str, *, account: str = ACCOUNT) -> str:
    body = json.loads((TESTS / "events" / "spot_interruption_warning.json").read_text())
    body |= {"id": f"evt-{tag}", "account": account, "region": REGION,
             "resources": [f"arn:aws:ec2:{REGION}:{account}:instance/{instance_id}"]}  # fmt: skip
    body["detail"]["instance-id"] = instance_id
    return json.dumps(body)


def _interruption_scenarios(emitted: Emitted) -> None:
    from nodesmith.handlers import interruption, termination, wiring
    from nodesmith.handlers.settings import Settings

    settings = Settings(cluster_name=CLUSTER, cluster_endpoint="https://example.invalid")

    def use(world: World) -> None:
        wiring.reset()
        wiring.set_ports(cluster=world, cloud=world, queue=world, settings=settings)  # type: ignore[arg-type]

    def interrupt(records: list[dict[str, Any]]) -> None:
        _captured(lambda: interruption.handler({"Records": records}, Context("nodesmith-interruption")), emitted)

    def terminate(records: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}

        def run() -> None:
            out.update(termination.handler({"Records": records}, Context("nodesmith-termination")))

        _captured(run, emitted)
        return out

    try:
        # 1. a spot warning for our node (cordoned, handed to the termination queue), a malformed body, one from
        #    another account, one about a managed node group's instance
        now = time.time()
        world = World(now=now, blocks=1)
        use(world)
        interrupt([
            _sqs_record(_warning(OURS, "ours"), "ours", queue="interruption", sent=now - 2),
            _sqs_record("{not json", "broken", queue="interruption", sent=now - 2),
            _sqs_record(_warning(OURS, "foreign", account="210987654321"), "foreign", queue="interruption"),
            _sqs_record(_warning(MANAGED, "managed"), "managed", queue="interruption"),
        ])  # fmt: skip
        assert [r.nodeclaim for r in world.sent] == [CLAIM], "the spot warning was not handed to the termination queue"
        request = world.sent[0].body()

        # 2. its termination: a PodDisruptionBudget refuses the first eviction, the next round evicts, the third
        #    finds the node empty and terminates it; beside it a malformed and an unbacked (forged) request
        forged = json.dumps({"nodeclaim": "ghost", "instanceId": MANAGED, "reason": "SpotInterrupted"})
        first = terminate([
            _sqs_record(request, "round-1", queue="termination"),
            _sqs_record("[]", "junk", queue="termination"),
            _sqs_record(forged, "forged", queue="termination"),
        ])  # fmt: skip
        assert [f["itemIdentifier"] for f in first["batchItemFailures"]] == ["round-1"]
        terminate([_sqs_record(request, "round-2", queue="termination", receives=2)])
        terminate([_sqs_record(request, "round-3", queue="termination", receives=3)])
        assert world.instances[OURS].state == "shutting-down" and CLAIM not in world.claims

        # 3. a warning our queue received past its two-minute notice: the pod is deleted, the deadline was missed
        now = time.time()
        world = World(now=now)
        use(world)
        interrupt([_sqs_record(_warning(OURS, "late"), "late", queue="interruption", sent=now - 200)])
        terminate([_sqs_record(world.sent[0].body(), "late-round", queue="termination")])
        assert world.instances[OURS].state == "shutting-down"
    finally:
        wiring.reset()


@dataclass
class EmitSide:
    emitted: Emitted
    disruption_exercised: bool


@pytest.fixture(scope="module")
def emit_side() -> Iterator[EmitSide]:
    emitted = Emitted()
    _reconcile_scenarios(emitted)
    exercised = _disruption_scenario(emitted)
    _interruption_scenarios(emitted)
    yield EmitSide(emitted=emitted, disruption_exercised=exercised)


# --- the static fallback ------------------------------------------------------------------------------


def _static_emissions() -> dict[str, set[Dims]]:
    """(name -> dimension sets) of the literal metric calls in the handlers' source."""
    found: dict[str, set[Dims]] = {}
    for path in sorted(HANDLERS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            kwargs = {k.arg: k.value for k in node.keywords}
            first = node.args[0] if node.args else None
            name_node = kwargs.get("name") if func == "add_metric" else first
            if func not in {"add_metric", "count_by", "emit"} or not isinstance(name_node, ast.Constant):
                continue
            dims: set[str] = {SERVICE}
            dimension = kwargs.get("dimension")
            if func == "count_by" and isinstance(dimension, ast.Constant):
                dims.add(str(dimension.value))
            mapping = kwargs.get("dimensions")
            if func == "emit" and isinstance(mapping, ast.Dict):
                dims |= {str(k.value) for k in mapping.keys if isinstance(k, ast.Constant)}
            found.setdefault(str(name_node.value), set()).add(frozenset(dims))
    return found


# --- the contract -------------------------------------------------------------------------------------


def _matches(read: Read, emitted_sets: set[Dims]) -> bool:
    return bool(emitted_sets) and (read.dims is None or read.dims in emitted_sets)


@pytest.mark.parametrize("name", [m.value for m in MetricName])
def test_the_dashboard_reads_only_what_the_code_emits(name: str, reads: list[Read], emit_side: EmitSide) -> None:
    read_here = [r for r in reads if r.name == name]
    emitted_sets = emit_side.emitted.dims.get(name, set())
    missing = [r for r in read_here if not _matches(r, emitted_sets)]
    if missing and name in DISRUPTION_METRICS and not emit_side.disruption_exercised:
        static = _static_emissions().get(name, set())
        missing = [r for r in missing if not _matches(r, static)]
        if missing:
            pytest.xfail("disruption is not wired into a handler yet: nothing emits " + name)
    where = [f"{r.where} with dimensions {sorted(r.dims) if r.dims else 'any'}" for r in missing]
    emitted_with = sorted(sorted(d) for d in emitted_sets) or "nothing"
    assert not missing, f"{name} is read by {where} but the handlers emitted it with {emitted_with}"


def test_every_emitted_metric_is_a_named_one_with_its_unit(emit_side: EmitSide) -> None:
    emitted = emit_side.emitted
    assert set(emitted.dims) <= {m.value for m in MetricName}, "emitted but neither named nor read"
    wrong = {n: u for n, u in emitted.units.items() if u != {UNITS[MetricName(n)]}}
    assert wrong == {}, f"units differ from infra/metric_names.UNITS: {wrong}"


def test_each_data_point_is_under_exactly_one_dimension_set(emit_side: EmitSide) -> None:
    # The dashboard sums across dimension sets: a point emitted under two sets would count twice.
    assert emit_side.emitted.multi_set_documents == []


def test_the_scenarios_took_the_paths_they_are_meant_to(emit_side: EmitSide) -> None:
    dims = emit_side.emitted.dims
    taken = (
        "LaunchFailures",
        "OfferingsMarkedUnavailable",
        "NodeClaimsRegistered",
        "NodesCordoned",
        "PodsBlockedByPDB",
        "PodsEvicted",
        "PodsForceDeleted",
        "DrainsMissedDeadline",
        "InterruptionMessagesMalformed",
        "TerminationRequestsMalformed",
        "ReconcileErrors",
    )
    assert [name for name in taken if name not in dims] == []
    assert frozenset({SERVICE, "ErrorCode"}) in dims["LaunchFailures"]
    assert frozenset({SERVICE, "NodePool", "Resource"}) in dims["NodePoolUtilizationPercent"]
    assert {frozenset({SERVICE, "Reason", "NodePool", "CapacityType"})} == dims["NodeClaimsTerminated"]
    if emit_side.disruption_exercised:
        assert frozenset({SERVICE, "Method"}) in dims["DisruptionDecisions"]
    # the reasons the forged and foreign messages were refused for
    values = emit_side.emitted.values
    assert {"foreign_account", "no_nodepool_tag"} <= values[MetricName.INTERRUPTION_MESSAGES_IGNORED.value]
    assert values[MetricName.TERMINATION_REQUESTS_IGNORED.value] == {"nodeclaim_gone"}


@pytest.mark.parametrize("name", [m.value for m in BREAKDOWNS])
def test_a_broken_down_metric_is_emitted_under_its_breakdown_only(name: str, emit_side: EmitSide) -> None:
    # One dimension set per metric: a point without the breakdown would be missing from the per-NodePool
    # graphs, and the totals would still add up, hiding it.
    emitted = emit_side.emitted.dims.get(name, set())
    if not emitted and MetricName(name) in DISRUPTION_METRICS and not emit_side.disruption_exercised:
        pytest.xfail("disruption is not wired into a handler yet")
    assert emitted == {frozenset({*BREAKDOWNS[MetricName(name)], SERVICE})}


def test_a_filtered_graph_reads_values_the_code_emits(reads: list[Read], emit_side: EmitSide) -> None:
    # A graph limited to Reason="Unhealthy" (node repair) stays empty if no code path emits that value.
    filtered = [r for r in reads if r.filters]
    assert filtered, "the node repair graph's filtered searches were not found"
    values = emit_side.emitted.dim_values
    missing = [(r.name, d, v, r.where) for r in filtered for d, v in r.filters if v not in values.get((r.name, d), ())]
    assert missing == []


def test_terminations_carry_the_real_reason(emit_side: EmitSide) -> None:
    # The termination function removes the node the disruption pass found empty (Empty) and the one a spot warning
    # named (SpotInterrupted).
    reasons = emit_side.emitted.values.get(MetricName.NODECLAIMS_TERMINATED.value, set())
    assert {"Empty", "SpotInterrupted", "Unhealthy"} <= reasons
    assert "GarbageCollected" not in reasons  # nothing in the scenarios lost its instance
