"""The embedded AWS and Kubernetes API emulator with the simulated components stepped by hand, for the tests that
meet faults through the real reconcile handler and termination service (:func:`stepped_sim`)."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from nodesmith.handlers import reconcile as reconcile_handler
from nodesmith.handlers import wiring
from nodesmith.sim import aws as embedded_aws
from nodesmith.sim.cluster_faults import ClusterFaults
from nodesmith.sim.controllers import SimControllers
from nodesmith.sim.kube import KubeEmulator
from nodesmith.sim.kube_scheduler import SimScheduler
from nodesmith.sim.kubelet import SimKubelet
from nodesmith.sim.lambda_runtime import AsyncInvocations

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pytest

CLUSTER = "demo"
MANIFESTS = Path(__file__).resolve().parents[2] / "lambdas" / "nodesmith" / "sim" / "manifests"
NODECLAIMS = "nodeclaims.karpenter.sh"
SCHEDULED = {"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}
"""The event of the reconcile function's EventBridge schedule."""


def reconcile_function() -> AsyncInvocations:
    """The reconcile function as Lambda runs its scheduled invocations: asynchronous, ended at a 120 s timeout."""
    return AsyncInvocations(handler=reconcile_handler.handler, function_name="nodesmith-reconcile",
                            timeout_seconds=120.0)  # fmt: skip


def invoke_scheduled(function: AsyncInvocations) -> Any:
    """One scheduled invocation of ``function``; returns its outcome (a summary or the exception that ended it)."""
    outcomes: list[Any] = []
    function.on_invoke = lambda _e, outcome, _s, _t: outcomes.append(outcome)
    function.invoke(SCHEDULED)
    assert function.run_next(wait=1.0)
    return outcomes[-1]


class Sim:
    """The emulator, the embedded AWS and the simulated components, stepped by hand."""

    def __init__(self, emulator: KubeEmulator, aws: embedded_aws.EmbeddedAws, faults: ClusterFaults) -> None:
        self.store, self.aws, self.faults = emulator.store, aws, faults
        cloud = wiring.build_cloud(wiring.get_settings())
        self.controllers = SimControllers(store=self.store)
        self.scheduler = SimScheduler(store=self.store)
        self.kubelet = SimKubelet(store=self.store, instances=cloud.list_instances, ready_delay=0.0, faults=faults)

    def scale(self, replicas: int) -> None:
        self.store.mutate(
            "deployments.apps", "inflate", lambda d: d["spec"].update(replicas=replicas), namespace="default"
        )

    def step(self, now: float | None = None) -> None:
        for component in (self.controllers, self.scheduler, self.kubelet, self.kubelet, self.scheduler):
            component.step(time.time() if now is None else now)

    def reconcile(self, now: float | None = None) -> Any:
        out = reconcile_handler.run_pass(now=now)
        assert not out.errors, out.errors
        return out

    def live_instances(self) -> set[str]:
        reservations = self.aws.client("ec2").describe_instances(
            Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
        )["Reservations"]
        return {i["InstanceId"] for r in reservations for i in r["Instances"]}

    def pods(self) -> list[dict[str, Any]]:
        return [p for p in self.store.objects("pods") if (p["metadata"].get("labels") or {}).get("app") == "inflate"]

    def running(self) -> int:
        return sum(1 for p in self.pods() if p["status"].get("phase") == "Running")


@contextlib.contextmanager
def stepped_sim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sim]:
    """The demo's NodePool, EC2NodeClass and ``inflate`` Deployment on a fresh embedded AWS and emulator, the
    handlers' environment pointing at them (disruption off), the components not started."""
    aws = embedded_aws.start()
    aws.reset()
    emulator = KubeEmulator()
    try:
        embedded_aws.seed(cluster_name=CLUSTER)
        endpoint = emulator.start()
        monkeypatch.setenv("NODESMITH_CLUSTER_NAME", CLUSTER)
        monkeypatch.setenv("NODESMITH_CLUSTER_ENDPOINT", endpoint)
        monkeypatch.setenv("NODESMITH_KUBE_AUTH", "none")
        monkeypatch.setenv("NODESMITH_PRICE_TABLE", str(embedded_aws.write_price_table(path=tmp_path / "p.json")))
        monkeypatch.setenv("NODESMITH_DISRUPTION", "false")
        wiring.reset()
        for path in ("nodepool.yaml", "inflate.yaml"):
            for doc in yaml.safe_load_all((MANIFESTS / path).read_text()):
                if doc:
                    emulator.store.apply(doc)
        yield Sim(emulator, aws, ClusterFaults(seed=3))
    finally:
        wiring.reset()
        emulator.stop()
        aws.stop()
