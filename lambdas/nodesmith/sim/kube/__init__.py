"""An in-process Kubernetes API emulator for the embedded default, tests and benchmarks.

:class:`KubeEmulator` serves the REST API over HTTP on 127.0.0.1 so the official ``kubernetes``
client (and therefore :mod:`nodesmith.adapters.kube`) works against it unchanged;
:class:`Store` is the same data in-process (``emulator.store``) with ``subscribe`` for fast
simulated controllers (kubelet, kube-scheduler, ReplicaSets).
"""

from nodesmith.sim.kube.emulator import KubeEmulator
from nodesmith.sim.kube.errors import ApiError
from nodesmith.sim.kube.faults import KubeFaults
from nodesmith.sim.kube.registry import DEFAULT_RESOURCES, Registry, ResourceType
from nodesmith.sim.kube.store import ListResult, Store, Subscription, WatchEvent

__all__ = [
    "DEFAULT_RESOURCES",
    "ApiError",
    "KubeEmulator",
    "KubeFaults",
    "ListResult",
    "Registry",
    "ResourceType",
    "Store",
    "Subscription",
    "WatchEvent",
]
