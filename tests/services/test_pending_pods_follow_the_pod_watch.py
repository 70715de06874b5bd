"""Watch mode learns about pending pods from the Kubernetes watch API, not by listing: one list, then
watch events from its resourceVersion; a stream that ends is resumed from the last version; 410 Gone
lists again; a failed stream is retried from the same version. A pod the watch reports pending wakes
the batcher, which provisions for it without a single pod LIST."""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from reconcile_fakes import FakeCloud, FakeCluster, make_nodeclass, make_pod

from nodesmith.core.errors import KubernetesError
from nodesmith.core.ports import PodEvent
from nodesmith.core.scheduling import instancetypes
from nodesmith.services.provisioning.pod_watch import PendingPodWatch
from nodesmith.services.reconciler.watching import WatchPasses, run_watch, warm_scheduler

if TYPE_CHECKING:
    from collections.abc import Iterator

    from nodesmith.core.api.ec2nodeclass import EC2NodeClass
    from nodesmith.core.model import InstanceType, Pod


def waiting(name: str) -> Pod:
    """An unbound pod the kube-scheduler has not judged yet (not pending for us)."""
    return make_pod(name, unschedulable=False)


@dataclass
class ScriptedCluster:
    """``watch_pods`` plays one scripted step per call (a list of events or an error); lists are counted."""

    steps: list[list[PodEvent] | Exception]
    tracker: PendingPodWatch | None = None
    versions: list[str] = field(default_factory=list)
    listed: int = 0

    def watch_pods(
        self, *, resource_version: str = "", unscheduled_only: bool = True, timeout_seconds: int = 60
    ) -> Iterator[PodEvent]:
        assert unscheduled_only
        self.versions.append(resource_version)
        if not self.steps:
            assert self.tracker is not None
            self.tracker.stop()
            return
        step = self.steps.pop(0)
        if isinstance(step, Exception):
            raise step
        yield from step

    def list_pods(self, *, node_name: str | None = None) -> list[Pod]:
        self.listed += 1
        return []


def run(cluster: ScriptedCluster) -> tuple[PendingPodWatch, list[int]]:
    woken: list[int] = []
    tracker = PendingPodWatch(cluster=cluster, on_change=lambda: woken.append(1), retry_seconds=0)  # type: ignore[arg-type]
    cluster.tracker = tracker
    tracker.run()  # inline: returns once the script is exhausted
    return tracker, woken


def test_a_pod_marked_unschedulable_is_learnt_from_a_watch_event_resumed_after_the_list() -> None:
    cluster = ScriptedCluster(
        steps=[
            [PodEvent(type="SYNCED", pods=(waiting("a"),), resource_version="5")],  # list, then its stream ends
            [PodEvent(type="MODIFIED", pods=(make_pod("a"),), resource_version="6")],  # scheduler gave up on it
        ]
    )
    tracker, woken = run(cluster)
    assert tracker.pending() == {"default/a"}
    assert cluster.versions == ["", "5", "6"]  # one list, then resumed from each last version
    assert tracker.relists == 1 and tracker.resumes == 2
    assert len(woken) == 2  # the list, and the pod becoming pending
    assert cluster.listed == 0


def test_a_bound_or_deleted_pod_leaves_the_pending_set_without_waking_the_batcher() -> None:
    a, b = make_pod("a"), make_pod("b")
    cluster = ScriptedCluster(
        steps=[
            [
                PodEvent(type="SYNCED", pods=(a, b), resource_version="5"),
                PodEvent(type="DELETED", pods=(replace(a, node_name="n1"),), resource_version="6"),  # bound
                PodEvent(type="MODIFIED", pods=(replace(b, deletion_timestamp=1.0),), resource_version="7"),
            ]
        ]
    )
    tracker, woken = run(cluster)
    assert tracker.pending() == set()
    assert len(woken) == 1  # only the list


def test_410_gone_lists_again_and_the_list_replaces_what_was_known() -> None:
    cluster = ScriptedCluster(
        steps=[
            [PodEvent(type="SYNCED", pods=(make_pod("old"),), resource_version="5")],
            KubernetesError("watch pods: HTTP 410: too old resource version", status=410),
            [PodEvent(type="SYNCED", pods=(make_pod("new"),), resource_version="90")],
        ]
    )
    tracker, _ = run(cluster)
    assert cluster.versions == ["", "5", "", "90"]  # relisted after the 410, resumed from the new list
    assert tracker.pending() == {"default/new"}
    assert tracker.expired == 1 and tracker.relists == 2


def test_a_lost_connection_resumes_from_the_same_version_without_a_list() -> None:
    cluster = ScriptedCluster(
        steps=[
            [PodEvent(type="SYNCED", pods=(), resource_version="5")],
            KubernetesError("watch pods: connection lost", status=0),
            [PodEvent(type="ADDED", pods=(make_pod("a"),), resource_version="7")],
        ]
    )
    tracker, _ = run(cluster)
    assert cluster.versions == ["", "5", "5", "7"]
    assert tracker.errors == 1 and tracker.relists == 1
    assert tracker.pending() == {"default/a"}


@dataclass
class FeedCluster:
    """A cluster whose pod watch is fed by the test through ``feed``; listing pods fails the test."""

    feed: queue.Queue[PodEvent] = field(default_factory=queue.Queue)
    listed: int = 0
    cordoned: set[str] = field(default_factory=set)

    def watch_pods(
        self, *, resource_version: str = "", unscheduled_only: bool = True, timeout_seconds: int = 60
    ) -> Iterator[PodEvent]:
        if not resource_version:
            yield PodEvent(type="SYNCED", pods=(), resource_version="1")
        while True:
            try:
                yield self.feed.get(timeout=0.2)
            except queue.Empty:
                return

    def list_pods(self, *, node_name: str | None = None) -> list[Pod]:
        self.listed += 1
        raise AssertionError("watch mode listed pods")

    def cordoned_node_names(self) -> set[str]:
        return set(self.cordoned)


def test_watch_mode_provisions_for_a_pod_the_watch_reports_pending_without_listing_pods() -> None:
    cluster = FeedCluster()
    passes: list[str] = []
    started = threading.Event()

    def full() -> str:
        passes.append("full")
        started.set()
        return "full"

    def batch() -> str:
        passes.append("batch")
        return "batch"

    def arrive() -> None:
        started.wait(30)
        cluster.feed.put(PodEvent(type="MODIFIED", pods=(make_pod("a"),), resource_version="2"))

    threading.Thread(target=arrive, daemon=True).start()
    out = run_watch(
        passes=WatchPasses(provision=batch, full=full, warm=lambda: passes.append("warm")),
        cluster=cluster,  # type: ignore[arg-type]
        remaining_seconds=36.0,  # watches for 6 s: the 30 s exit margin is kept
        request_id="req-1",
    )
    # warm-up while listing, catch-up pass (then warm-up), the batch the watched pod opened
    assert passes == ["warm", "full", "warm", "batch"]
    assert out.batches == (1,)
    assert cluster.listed == 0


@dataclass
class PrefetchingCloud:
    types: list[InstanceType]
    prefetched: list[str] = field(default_factory=list)

    def prefetch(self, *, nodeclass: EC2NodeClass) -> list[InstanceType]:
        self.prefetched.append(nodeclass.name)
        return self.types

    def instance_types(self, *, nodeclass: EC2NodeClass | None = None) -> list[InstanceType]:
        raise AssertionError("prefetch refreshes caches; instance_types alone would not")


def test_warming_prefetches_each_nodeclass_catalogue_and_builds_the_scheduler_data() -> None:
    cloud = PrefetchingCloud(types=FakeCloud().instance_types())
    cluster = FakeCluster(nodeclasses=[make_nodeclass()])
    ready = warm_scheduler(cluster=cluster, cloud=cloud)  # type: ignore[arg-type]
    assert cloud.prefetched == [cluster.nodeclasses[0].name]
    assert ready == len(cloud.types)
    assert all(instancetypes._INFO_CACHE[id(it)].it is it for it in cloud.types)


def test_each_pod_is_stamped_when_it_first_became_pending_and_a_relist_keeps_the_stamp() -> None:
    t = [10.0]
    cluster = ScriptedCluster(steps=[])
    tracker = PendingPodWatch(cluster=cluster, clock=lambda: t[0])  # type: ignore[arg-type]
    tracker.apply(PodEvent(type="SYNCED", pods=(make_pod("a"),), resource_version="5"))
    t[0] = 12.0
    tracker.apply(PodEvent(type="MODIFIED", pods=(make_pod("b"),), resource_version="6"))
    t[0] = 13.0
    tracker.apply(PodEvent(type="MODIFIED", pods=(make_pod("b"),), resource_version="7"))  # still pending
    assert tracker.arrived_at({"default/a", "default/b"}) == (10.0, 12.0)
    t[0] = 20.0
    tracker.apply(PodEvent(type="SYNCED", pods=(make_pod("a"), make_pod("c")), resource_version="9"))
    assert tracker.arrived_at({"default/a"}) == (10.0, 10.0)
    assert tracker.arrived_at({"default/c"}) == (20.0, 20.0)
    assert tracker.arrived_at({"default/b"}) is None  # gone from the list


def test_a_refused_watch_lists_again_after_backing_off() -> None:
    cluster = ScriptedCluster(
        steps=[
            [PodEvent(type="SYNCED", pods=(), resource_version="5")],
            KubernetesError("watch pods: HTTP 403: forbidden", status=403),
            [PodEvent(type="SYNCED", pods=(make_pod("a"),), resource_version="8")],
        ]
    )
    tracker, _ = run(cluster)
    assert cluster.versions == ["", "5", "", "8"]  # a list keeps the pending set current without the watch
    assert tracker.pending() == {"default/a"} and tracker.errors == 1
