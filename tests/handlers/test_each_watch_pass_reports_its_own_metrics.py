"""A watch-mode reconcile invocation runs several passes; the NodeClaims each one creates and
launches are counted, not only the last pass's (which would under-count the dashboard's lifecycle)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "services"))

from reconcile_fakes import FakeCloud, FakeCluster, make_nodeclass, make_nodepool, make_pod
from test_reconcile_handler import Context, emitted

from nodesmith.handlers import wiring
from nodesmith.handlers.settings import Settings

if TYPE_CHECKING:
    import pytest


def test_two_passes_of_one_watch_invocation_both_report_their_launches(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from nodesmith.handlers import reconcile
    from nodesmith.services.reconciler import watching as watch_mode

    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])
    cluster.pods = [make_pod("inflate-0")]
    settings = Settings(cluster_name="test", cluster_endpoint="http://kube", reconcile_mode="watch")
    wiring.reset()
    wiring.set_ports(cluster=cluster, cloud=FakeCloud(), settings=settings)

    def two_passes(*, passes: watch_mode.WatchPasses, **_: Any) -> watch_mode.WatchRun:
        passes.full()  # the start-of-invocation pass launches for inflate-0
        cluster.pods = [*cluster.pods, make_pod("big-1", cpu="3")]  # a pod arrives that needs its own node
        return watch_mode.WatchRun(value=passes.provision(), passes=2, stopped="test")

    monkeypatch.setattr(watch_mode, "run_watch", two_passes)
    try:
        summary = reconcile.handler({}, Context())
    finally:
        wiring.reset()

    assert summary["passes"] == 2 and summary["nodeclaims_launched"] == 1  # the summary is the last pass's
    metrics = emitted(capsys.readouterr().out)
    assert sum(value for value, _, _ in metrics["NodeClaimsLaunched"]) == 2
    assert sum(value for value, _, _ in metrics["NodeClaimsCreated"]) == 2
    assert {dims["NodePool"] for _, dims, _ in metrics["NodeClaimsLaunched"]} == {"default"}
