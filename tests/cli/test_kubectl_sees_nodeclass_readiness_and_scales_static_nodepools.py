"""The real ``kubectl`` against the embedded world: ``kubectl get ec2nodeclass`` shows READY as the reconcile handler
wrote it (True for a class that resolves, False for one whose subnet selector matches nothing), and
``kubectl scale nodepool`` goes through the NodePool's scale subresource (``autoscaling/v1 Scale`` on
``spec.replicas`` / ``status.nodes``, as Karpenter's CRD declares), refused for a dynamic NodePool.

Needs ``kubectl`` (v1.30 or newer) on PATH; skipped otherwise.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from nodesmith.cli.playground import kubeconfig
from nodesmith.cli.world import MANIFESTS, EmbeddedWorld

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

KUBECTL = shutil.which("kubectl")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("embedded-world"),
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH (install kubectl v1.30+)"),
]

NODEPOOLS = "nodepools.karpenter.sh"


def manifests() -> dict[str, dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all((MANIFESTS / "nodepool.yaml").read_text()) if d]
    return {d["kind"]: d for d in docs}


def static_pool(name: str, replicas: int) -> dict[str, Any]:
    pool = copy.deepcopy(manifests()["NodePool"])
    pool["metadata"]["name"] = name
    pool["spec"]["replicas"] = replicas
    pool["spec"]["limits"] = {"nodes": "10"}
    return pool


class Kubectl:
    """``kubectl`` bound to the world's emulator through a kubeconfig and a discovery cache of its own."""

    def __init__(self, kubeconfig_path: Path, cache: Path) -> None:
        assert KUBECTL is not None
        self.base = [KUBECTL, f"--kubeconfig={kubeconfig_path}", f"--cache-dir={cache}"]

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([*self.base, *args], capture_output=True, text=True, timeout=120, check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({done.returncode}): {done.stderr}{done.stdout}")
        return done


@pytest.fixture(scope="module")
def world() -> Iterator[EmbeddedWorld]:
    with EmbeddedWorld(ready_delay=0.0) as w:
        w.apply_file(MANIFESTS / "nodepool.yaml")
        broken = copy.deepcopy(manifests()["EC2NodeClass"])
        broken["metadata"]["name"] = "broken"
        broken["spec"]["subnetSelectorTerms"] = [{"tags": {"karpenter.sh/discovery": "no-such-cluster"}}]
        w.store.apply(broken)
        w.store.apply(static_pool("static", 1))
        unlimited = copy.deepcopy(manifests()["NodePool"])
        unlimited["metadata"]["name"] = "unlimited"
        del unlimited["spec"]["limits"]
        w.store.apply(unlimited)
        yield w


@pytest.fixture(scope="module")
def kubectl(world: EmbeddedWorld, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    assert world.kube is not None
    home = tmp_path_factory.mktemp("kubectl")
    path = home / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig(cluster_name="demo", endpoint=world.kube.endpoint)))
    return Kubectl(path, home / "cache")


def test_get_ec2nodeclass_shows_ready_as_the_reconcile_pass_wrote_it(world: EmbeddedWorld, kubectl: Kubectl) -> None:
    world.reconcile()

    table = kubectl("get", "ec2nodeclass").stdout.splitlines()

    assert table[0].split() == ["NAME", "READY", "AGE"]
    rows = {line.split()[0]: line.split()[1] for line in table[1:]}
    assert rows == {"broken": "False", "default": "True"}
    broken = json.loads(kubectl("get", "ec2nodeclass", "broken", "-o", "json").stdout)
    subnets = next(c for c in broken["status"]["conditions"] if c["type"] == "SubnetsReady")
    assert (subnets["status"], subnets["reason"]) == ("False", "SubnetsNotFound")
    assert "subnets" not in broken["status"]


def test_get_ec2nodeclass_yaml_shows_the_resolved_parts_and_explain_describes_them(
    world: EmbeddedWorld, kubectl: Kubectl
) -> None:
    world.reconcile()

    status = yaml.safe_load(kubectl("get", "ec2nodeclass", "default", "-o", "yaml").stdout)["status"]

    ec2 = world.client("ec2")
    assert {s["id"] for s in status["subnets"]} == {
        s["SubnetId"]
        for s in ec2.describe_subnets(Filters=[{"Name": "tag:karpenter.sh/discovery", "Values": [world.cluster_name]}])[
            "Subnets"
        ]
    }
    assert all(s["zoneID"] for s in status["subnets"])
    assert [g["name"] for g in status["securityGroups"]]
    assert {r["key"] for a in status["amis"] for r in a["requirements"]} == {
        "kubernetes.io/arch",
        "karpenter.k8s.aws/instance-gpu-count",
        "karpenter.k8s.aws/instance-accelerator-count",
    }
    assert status["instanceProfile"]
    explained = kubectl("explain", "ec2nodeclass.status.amis.requirements").stdout
    assert "operator" in explained
    assert "values" in explained


def test_scale_nodepool_sets_the_replicas_of_a_static_nodepool(world: EmbeddedWorld, kubectl: Kubectl) -> None:
    done = kubectl("scale", "nodepool", "static", "--replicas", "3")

    assert "nodepool.karpenter.sh/static scaled" in done.stdout
    assert world.store.get(NODEPOOLS, "static")["spec"]["replicas"] == 3
    scale = json.loads(kubectl("get", "--raw", "/apis/karpenter.sh/v1/nodepools/static/scale").stdout)
    assert (scale["apiVersion"], scale["kind"]) == ("autoscaling/v1", "Scale")
    assert scale["spec"] == {"replicas": 3}
    assert scale["status"] == {"replicas": world.store.get(NODEPOOLS, "static").get("status", {}).get("nodes", 0)}


def test_scale_with_a_current_replicas_precondition_is_checked(kubectl: Kubectl) -> None:
    stale = kubectl("scale", "nodepool", "static", "--current-replicas", "7", "--replicas", "2", check=False)

    assert stale.returncode != 0
    assert "Expected replicas to be 7, was 3" in stale.stderr or "precondition" in stale.stderr.lower()
    kubectl("scale", "nodepool", "static", "--current-replicas", "3", "--replicas", "2")
    assert json.loads(kubectl("get", "nodepool", "static", "-o", "json").stdout)["spec"]["replicas"] == 2


def test_scale_of_a_dynamic_nodepool_is_refused_and_changes_nothing(world: EmbeddedWorld, kubectl: Kubectl) -> None:
    before = {name: world.store.get(NODEPOOLS, name) for name in ("unlimited", "default")}

    dynamic = kubectl("scale", "nodepool", "unlimited", "--replicas", "2", check=False)
    with_cpu_limit = kubectl("scale", "nodepool", "default", "--replicas", "2", check=False)

    assert dynamic.returncode != 0
    assert "spec.replicas cannot be added to or removed from an existing NodePool" in dynamic.stderr
    assert with_cpu_limit.returncode != 0
    assert 'NodePool.karpenter.sh "default" is invalid' in with_cpu_limit.stderr
    assert {name: world.store.get(NODEPOOLS, name) for name in before} == before
