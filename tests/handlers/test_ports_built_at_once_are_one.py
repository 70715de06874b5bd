"""A container's ports are built once, even when two threads ask at once (a scheduled pass and the catalogue
warm-up it starts): both get the same cloud provider, so the warm-up fills the caches the pass reads and the
garbage collection cadence, tied to the provider, is kept."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from nodesmith.adapters.aws import provider
from nodesmith.handlers import wiring
from nodesmith.handlers.settings import Settings

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pytest


class SlowProvider:
    """Stands in for ``Ec2CloudProvider``: slow to build, so two builders would overlap."""

    built = 0

    def __init__(self, **_: Any) -> None:
        SlowProvider.built += 1
        time.sleep(0.3)


def _build_at_once(count: int) -> Iterator[object]:
    settings = Settings(cluster_name="demo", cluster_endpoint="https://example.invalid", kube_auth="none")
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(wiring.build_cloud(settings))) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    yield from got


def test_threads_building_the_cloud_provider_at_once_share_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(provider, "Ec2CloudProvider", SlowProvider)
    SlowProvider.built = 0
    wiring.reset()
    try:
        clouds = list(_build_at_once(3))
    finally:
        wiring.reset()
    assert len(clouds) == 3 and all(c is clouds[0] for c in clouds)
    assert SlowProvider.built == 1
