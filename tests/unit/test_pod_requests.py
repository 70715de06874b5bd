"""A pod's effective requests follow Kubernetes' PodRequests rule.

``k8s.io/component-helpers/resource/helpers.go``: app containers and restartable init containers
(sidecars) are summed; each regular init container needs its own requests plus the sidecars
started before it; the pod needs the max of the two, plus ``spec.overhead``. We add ``pods: 1``.
Worked examples follow the Kubernetes sidecar documentation ("Resource sharing within containers").
"""

from __future__ import annotations

from typing import Any

import pytest

from nodesmith.core.objects import ObjectParseError, pod_from_dict, pod_requests

GI = 2**30
MI = 2**20


def container(name: str, cpu: str | None = None, memory: str | None = None, **extra: Any) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    return {"name": name, "image": "busybox", "resources": {"requests": requests}, **extra}


def sidecar(name: str, cpu: str | None = None, memory: str | None = None) -> dict[str, Any]:
    return container(name, cpu, memory, restartPolicy="Always")


def test_app_containers_are_summed() -> None:
    spec = {"containers": [container("a", "250m", "64Mi"), container("b", "1", "1Gi")]}

    assert pod_requests(spec) == {"cpu": 1250, "memory": GI + 64 * MI, "pods": 1}


def test_largest_init_container_wins_when_bigger_than_app_containers() -> None:
    spec = {
        "initContainers": [container("migrate", "2", "256Mi"), container("warm", "500m", "3Gi")],
        "containers": [container("app", "1", "1Gi")],
    }

    # cpu: max(1, 2, 0.5) = 2; memory: max(1Gi, 256Mi, 3Gi) = 3Gi, per resource.
    assert pod_requests(spec) == {"cpu": 2000, "memory": 3 * GI, "pods": 1}


def test_sidecar_runs_alongside_app_containers() -> None:
    spec = {
        "initContainers": [sidecar("proxy", "100m", "50Mi")],
        "containers": [container("app", "500m", "100Mi")],
    }

    assert pod_requests(spec) == {"cpu": 600, "memory": 150 * MI, "pods": 1}


def test_init_container_after_a_sidecar_needs_room_for_both() -> None:
    spec = {
        "initContainers": [sidecar("proxy", "100m"), container("migrate", "1")],
        "containers": [container("app", "500m")],
    }

    # migrate runs while proxy runs: 1 + 0.1 = 1.1 > app phase 0.5 + 0.1
    assert pod_requests(spec)["cpu"] == 1100


def test_init_container_before_a_sidecar_does_not_count_it() -> None:
    spec = {
        "initContainers": [container("migrate", "1"), sidecar("proxy", "100m")],
        "containers": [container("app", "500m")],
    }

    # migrate finishes before proxy starts: max(1, 0.5 + 0.1) = 1
    assert pod_requests(spec)["cpu"] == 1000


def test_overhead_is_added_after_the_max() -> None:
    spec = {
        "initContainers": [container("init", "2")],
        "containers": [container("app", "1", "1Gi")],
        "overhead": {"cpu": "250m", "memory": "120Mi"},
    }

    assert pod_requests(spec) == {"cpu": 2250, "memory": GI + 120 * MI, "pods": 1}


def test_limits_default_missing_requests() -> None:
    spec = {
        "containers": [
            {"name": "a", "resources": {"limits": {"cpu": "2", "memory": "1Gi"}, "requests": {"cpu": "500m"}}},
            {"name": "b", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
        ]
    }

    assert pod_requests(spec) == {"cpu": 500, "memory": GI, "nvidia.com/gpu": 1, "pods": 1}


def test_pod_level_resources_replace_container_totals() -> None:
    spec = {
        "resources": {"requests": {"cpu": "3", "memory": "2Gi"}},
        "containers": [container("a", "1", "1Gi")],
    }

    assert pod_requests(spec) == {"cpu": 3000, "memory": 2 * GI, "pods": 1}


def test_pod_without_requests_still_takes_a_pod_slot() -> None:
    assert pod_requests({"containers": [{"name": "a", "image": "x"}]}) == {"pods": 1}


def test_bad_quantity_names_the_container_field() -> None:
    spec = {"containers": [container("a", "1")], "initContainers": [container("b", memory="lots")]}

    with pytest.raises(ObjectParseError) as exc:
        pod_from_dict({"metadata": {"name": "p"}, "spec": spec})

    assert exc.value.field == "spec.initContainers[0].resources.requests.memory"
    assert "'lots' is not a valid quantity" in str(exc.value)


def test_pod_from_dict_carries_requests() -> None:
    pod = pod_from_dict(
        {
            "metadata": {"name": "p", "namespace": "shop"},
            "spec": {"initContainers": [sidecar("s", "100m")], "containers": [container("a", "400m", "1Gi")]},
        }
    )

    assert pod.requests == {"cpu": 500, "memory": GI, "pods": 1}
