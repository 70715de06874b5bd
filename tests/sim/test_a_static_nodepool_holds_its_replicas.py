"""A static NodePool (``spec.replicas``, feature gate ``StaticCapacity``) end to end, through the real reconcile and
termination handlers on the embedded AWS and Kubernetes: with no pod at all it reaches exactly its replicas; a pod
with no dynamic NodePool to provision for it runs on one of its nodes; scaled down, the empty nodes go first
(drained through the termination queue, their instances terminated) and the node running the pod stays. With the
gate off the same NodePool gets nothing."""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from embedded_world import app_pods, running, state, until

from nodesmith.cli.world import MANIFESTS, EmbeddedWorld
from nodesmith.core.model import instance_id_of
from nodesmith.core.termination import TERMINATION_REASON_ANNOTATION

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("embedded-world")]

POOL = "static"
NODECLAIMS = "nodeclaims.karpenter.sh"


def static_pool(replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": POOL},
        "spec": {
            "replicas": replicas,
            "limits": {"nodes": "4"},
            "template": {
                "spec": {
                    "requirements": [
                        {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m"]},
                        {"key": "karpenter.k8s.aws/instance-size", "operator": "In", "values": ["large"]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    ],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                }
            },
        },
    }


@contextmanager
def start(gates: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[EmbeddedWorld]:
    """The embedded world with ``gates`` as the reconcile function's feature gates, the demo's EC2NodeClass (no
    dynamic NodePool) and the ``inflate`` Deployment at 0."""
    monkeypatch.setenv("NODESMITH_FEATURE_GATES", gates)
    with EmbeddedWorld() as world:
        for doc in yaml.safe_load_all((MANIFESTS / "nodepool.yaml").read_text()):
            if doc and doc["kind"] == "EC2NodeClass":  # the node class only: no dynamic NodePool
                world.store.apply(doc)
        world.apply_file(MANIFESTS / "inflate.yaml")
        yield world


def live_claims(world: EmbeddedWorld) -> list[dict[str, Any]]:
    return [
        c
        for c in world.store.objects(NODECLAIMS)
        if c["metadata"]["labels"].get("karpenter.sh/nodepool") == POOL and not c["metadata"].get("deletionTimestamp")
    ]


def ready_nodes(world: EmbeddedWorld) -> list[str]:
    out = []
    for node in world.store.objects("nodes"):
        if node["metadata"]["labels"].get("karpenter.sh/nodepool") != POOL or node["metadata"].get("deletionTimestamp"):
            continue
        if any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions") or []):
            out.append(node["metadata"]["name"])
    return sorted(out)


def test_a_static_pool_reaches_its_replicas_with_no_pods_and_scales_down_empty_nodes_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with start("StaticCapacity=true", monkeypatch) as world:
        world.store.apply(static_pool(3))
        assert until(world, lambda: len(ready_nodes(world)) == 3, timeout=300), "the static pool never reached 3 nodes"
        for _ in range(3):
            world.reconcile()
        assert len(live_claims(world)) == 3, "a pool at its replicas launches nothing more"
        assert not app_pods(world)

        world.scale(deployment="inflate", replicas=1)
        assert until(world, lambda: running(world) == 1, timeout=60), "the pod never ran on the static capacity"
        busy = app_pods(world)[0]["spec"]["nodeName"]
        assert busy in ready_nodes(world)
        assert len(live_claims(world)) == 3, "a pending pod never grows a static pool"

        claims_before = {c["metadata"]["name"]: c for c in live_claims(world)}
        world.store.mutate("nodepools.karpenter.sh", POOL, lambda np: np["spec"].update(replicas=1))
        world.reconcile()
        deleting = [c for c in world.store.objects(NODECLAIMS) if c["metadata"].get("deletionTimestamp")]
        assert len(deleting) == 2 and len(live_claims(world)) == 1, "one pass removes the whole excess, no budget"
        assert {c["metadata"]["annotations"][TERMINATION_REASON_ANNOTATION] for c in deleting} == {"Overprovisioned"}
        assert busy not in {c["status"].get("nodeName") for c in deleting}, "the empty nodes go first"
        told = {
            e["involvedObject"]["name"]
            for e in world.store.objects("events")
            if e["reason"] == "DisruptionTerminating" and 'static NodePool "static"' in e["message"]
        }
        assert told == {c["status"]["nodeName"] for c in deleting}
        assert until(world, lambda: ready_nodes(world) == [busy] and len(live_claims(world)) == 1, timeout=120), (
            ready_nodes(world)
        )
        assert running(world) == 1 and app_pods(world)[0]["spec"]["nodeName"] == busy
        [kept] = live_claims(world)
        assert kept["status"]["nodeName"] == busy
        for name, claim in claims_before.items():
            if name == kept["metadata"]["name"]:
                continue
            instance = instance_id_of(claim["status"]["providerID"])
            assert instance is not None
            assert until(world, lambda i=instance: state(world, i) in {"shutting-down", "terminated"}, timeout=60)


def test_with_the_gate_off_a_static_pool_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    with start("", monkeypatch) as world:
        world.store.apply(static_pool(2))
        for _ in range(3):
            world.reconcile()
        assert not live_claims(world)
