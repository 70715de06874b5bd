"""The emulator store's pod indexes follow every write: ``pods_on`` (by ``spec.nodeName``) and
``pods_controlled_by`` (by the controller ownerReference's uid), which the simulated controllers read
instead of scanning every pod each step."""

from __future__ import annotations

from typing import Any

from nodesmith.sim.kube import Store


def _pod(name: str, owner_uid: str | None, *, namespace: str = "default") -> dict[str, Any]:
    refs = [] if owner_uid is None else [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": owner_uid, "controller": True}
    ]  # fmt: skip
    return {
        "metadata": {"name": name, "namespace": namespace, "ownerReferences": refs},
        "spec": {"containers": [{"name": "c", "image": "pause"}]},
    }


def _names(pods: list[dict[str, Any]]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def test_the_owner_index_follows_creates_owner_changes_and_deletes() -> None:
    store = Store(seed=1)
    for name, owner in (("a", "rs-1"), ("b", "rs-1"), ("c", "rs-2"), ("d", None)):
        store.create("pods", _pod(name, owner))
    store.create("pods", _pod("e", "rs-1", namespace="other"))
    assert _names(store.pods_controlled_by("default", "rs-1")) == ["a", "b"]
    assert _names(store.pods_controlled_by("other", "rs-1")) == ["e"]

    def adopt(pod: dict[str, Any]) -> None:
        pod["metadata"]["ownerReferences"][0]["uid"] = "rs-2"

    store.mutate("pods", "b", adopt, namespace="default")
    store.delete("pods", "a", namespace="default", grace_period_seconds=0)

    assert _names(store.pods_controlled_by("default", "rs-1")) == []
    assert _names(store.pods_controlled_by("default", "rs-2")) == ["b", "c"]
    assert _names(store.pods_controlled_by("default", "")) == ["d"]  # no controller


def test_the_node_index_follows_binds_and_deletes() -> None:
    store = Store(seed=1)
    for name in ("a", "b", "c"):
        store.create("pods", _pod(name, "rs-1"))
    store.bind("a", namespace="default", node_name="n1")
    store.bind("b", namespace="default", node_name="n1")
    store.bind("c", namespace="default", node_name="n2")
    store.delete("pods", "b", namespace="default", grace_period_seconds=0)

    assert _names(store.pods_on("n1")) == ["a"]
    assert _names(store.pods_on("n2")) == ["c"]
    assert store.pods_on("n3") == []
    assert store.pods_on("n1")[0] is store.snapshot("pods", "a", namespace="default")  # shared, not copied
