"""The emit side of the metrics contract: the handlers run in-process over scenarios that take every path, their
EMF output captured (:func:`run_scenarios`), and the static fallback that reads the handlers' source for metric
calls (:func:`static_emissions`).

Scenarios: a reconcile pass that launches, one whose spot offerings are all out of capacity, a pass after the
node registered, a pass that fails, the disruption pass asking for an empty node's termination and the
termination function removing it, node repair; an interruption batch with a spot warning for our node, a
malformed body, an event from another account and one about a managed node group's instance; termination rounds
blocked by a PodDisruptionBudget, then evicting, then terminating; a spot warning received past its notice, whose
pod is force-deleted; malformed and unbacked termination requests. The interruption and termination scenarios run
on ``interruption_world.World``; the reconcile ones on the service tests' ``reconcile_fakes``.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interruption_world import CLAIM, CLUSTER, MANAGED, OURS, World, spot_warning, sqs_record

from infra.metric_names import NAMESPACE, MetricName

if TYPE_CHECKING:
    from collections.abc import Callable

    from nodesmith.core.model import Pod, Taint

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
HANDLERS = REPO / "lambdas" / "nodesmith" / "handlers"
SERVICE = "service"  # Powertools' default dimension; the stack sets POWERTOOLS_SERVICE_NAME per function
DISRUPTION_METRICS = {MetricName.DISRUPTION_DECISIONS, MetricName.DISRUPTION_SAVINGS_USD_PER_HOUR}

Dims = frozenset[str]


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
    """Run ``run`` with stdout captured into ``emitted``; returns what it raised, if anything."""
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

    # 3. the pass itself fails -> ReconcileErrors = 1, and the handler answers it failed
    broken = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])

    def unavailable() -> list[Any]:
        raise KubernetesError("apiserver unavailable", status=503)

    broken.list_nodes = unavailable
    assert invoke(broken, FakeCloud()) is None
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
    from nodesmith.services.reconciler.container import WarmContainer

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
        records = [sqs_record(r.body(), f"empty-{n}", queue="termination") for n, r in enumerate(queue.sent)]
        _captured(lambda: termination.handler({"Records": records}, Context("nodesmith-termination")), emitted)
    finally:
        reconcile_handler._CONTAINER = WarmContainer()
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
    from nodesmith.services.reconciler.container import WarmContainer

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
        records = [sqs_record(r.body(), f"sick-{n}", queue="termination") for n, r in enumerate(queue.sent)]
        _captured(lambda: termination.handler({"Records": records}, Context("nodesmith-termination")), emitted)
    finally:
        reconcile_handler._CONTAINER = WarmContainer()
        wiring.reset()


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
            sqs_record(spot_warning(OURS, "ours"), "ours", queue="interruption", sent=now - 2),
            sqs_record("{not json", "broken", queue="interruption", sent=now - 2),
            sqs_record(spot_warning(OURS, "foreign", account="210987654321"), "foreign", queue="interruption"),
            sqs_record(spot_warning(MANAGED, "managed"), "managed", queue="interruption"),
        ])  # fmt: skip
        assert [r.nodeclaim for r in world.sent] == [CLAIM], "the spot warning was not handed to the termination queue"
        request = world.sent[0].body()

        # 2. its termination: a PodDisruptionBudget refuses the first eviction, the next round evicts, the third
        #    finds the node empty and terminates it; beside it a malformed and an unbacked (forged) request
        forged = json.dumps({"nodeclaim": "ghost", "instanceId": MANAGED, "reason": "SpotInterrupted"})
        first = terminate([
            sqs_record(request, "round-1", queue="termination"),
            sqs_record("[]", "junk", queue="termination"),
            sqs_record(forged, "forged", queue="termination"),
        ])  # fmt: skip
        assert [f["itemIdentifier"] for f in first["batchItemFailures"]] == ["round-1"]
        terminate([sqs_record(request, "round-2", queue="termination", receives=2)])
        terminate([sqs_record(request, "round-3", queue="termination", receives=3)])
        assert world.instances[OURS].state == "shutting-down" and CLAIM not in world.claims

        # 3. a warning our queue received past its two-minute notice: the pod is deleted, the deadline was missed
        now = time.time()
        world = World(now=now)
        use(world)
        interrupt([sqs_record(spot_warning(OURS, "late"), "late", queue="interruption", sent=now - 200)])
        terminate([sqs_record(world.sent[0].body(), "late-round", queue="termination")])
        assert world.instances[OURS].state == "shutting-down"
    finally:
        wiring.reset()


@dataclass
class EmitSide:
    """What the scenarios emitted, and whether the disruption pass ran (the reconcile handler may not wire it)."""

    emitted: Emitted
    disruption_exercised: bool


# --- the static fallback ------------------------------------------------------------------------------


def static_emissions() -> dict[str, set[Dims]]:
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


def run_scenarios() -> EmitSide:
    """Run every scenario (reconcile, disruption, interruption and termination) and collect what they emitted."""
    emitted = Emitted()
    _reconcile_scenarios(emitted)
    exercised = _disruption_scenario(emitted)
    _interruption_scenarios(emitted)
    return EmitSide(emitted=emitted, disruption_exercised=exercised)
