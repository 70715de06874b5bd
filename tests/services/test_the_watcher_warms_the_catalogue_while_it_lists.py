"""A watching invocation reads the catalogue (EC2, SSM, Pricing) while its watch cache lists the cluster, not
after: its first pass needs both, and the two come from different services. The first pass still finds the
catalogue warmed, and a warm-up that fails does not stop the watch. What the cache listed is settled (the
handler keeps it out of the cyclic collector's way) before the first pass."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nodesmith.services.reconciler.watching import WatchPasses, run_watch

if TYPE_CHECKING:
    from collections.abc import Iterator

    from nodesmith.core.model import Pod
    from nodesmith.core.ports import PodEvent

LISTING_SECONDS = 10.0


@dataclass
class ListingCluster:
    """A cluster whose watch cache takes until the catalogue warm-up has begun (at most ``LISTING_SECONDS``) to
    list; no pod ever turns pending."""

    warming: threading.Event = field(default_factory=threading.Event)
    saw_warming: list[bool] = field(default_factory=list)

    def follow(self, *, wait_seconds: float) -> bool:
        self.saw_warming.append(self.warming.wait(LISTING_SECONDS))
        return True

    def unfollow(self) -> None:
        return None

    def watch_pods(
        self, *, resource_version: str = "", unscheduled_only: bool = True, timeout_seconds: int = 60
    ) -> Iterator[PodEvent]:
        return iter(())

    def list_pods(self, *, node_name: str | None = None) -> list[Pod]:
        return []

    def cordoned_node_names(self) -> set[str]:
        return set()


def _run(cluster: ListingCluster, warm: WatchPasses) -> None:
    run_watch(passes=warm, cluster=cluster, remaining_seconds=31.0, request_id="req-1", watch_pods=False)  # type: ignore[arg-type]


def test_the_catalogue_is_warmed_while_the_cluster_is_listed_and_before_the_first_pass() -> None:
    cluster = ListingCluster()
    order: list[str] = []

    def warm() -> None:
        order.append("warm")
        cluster.warming.set()

    def full() -> str:
        order.append("full")
        return "full"

    _run(cluster, WatchPasses(provision=full, full=full, warm=warm))
    assert cluster.saw_warming == [True]  # the listing did not have to end before the warm-up began
    assert order[:2] == ["warm", "full"]  # and the first pass came after it


def test_a_warm_up_that_fails_while_listing_does_not_stop_the_watch() -> None:
    cluster = ListingCluster()
    calls: list[str] = []

    def warm() -> None:
        calls.append("warm")
        if len(calls) == 1:
            cluster.warming.set()
            raise RuntimeError("DescribeInstanceTypes: throttled")

    def full() -> str:
        calls.append("full")
        return "full"

    _run(cluster, WatchPasses(provision=full, full=full, warm=warm))
    assert calls[:3] == ["warm", "full", "warm"]  # the pass ran, and warmed again after it


def test_what_the_watch_cache_listed_is_settled_once_before_the_first_pass() -> None:
    cluster = ListingCluster()
    cluster.warming.set()
    order: list[str] = []

    def full() -> str:
        order.append("full")
        return "full"

    _run(cluster, WatchPasses(provision=full, full=full, settle=lambda: order.append("settle")))
    assert order[:2] == ["settle", "full"] and order.count("settle") == 1
