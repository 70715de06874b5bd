"""``nodesmith playground`` driven by the real ``kubectl``: a Karpenter user's first session, scripted.

One playground process for the module (``nodesmith playground --tick 0.5``), reached only through
the kubeconfig it writes and ``nodesmith playground interrupt``. The tests run in file order and
build on each other: apply, scale 0 -> 5, nodes Ready and pods Running, the NodeClaim table,
``kubectl delete nodeclaim``, ``kubectl drain``, a spot interruption, and Ctrl-C last.

Needs ``kubectl`` (v1.30 or newer; the Makefile's ``unit`` target says where to get it) on PATH;
skipped otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from nodesmith.cli.world import MANIFESTS

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

KUBECTL = shutil.which("kubectl")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("playground"),
    pytest.mark.skipif(
        KUBECTL is None,
        reason="kubectl is not on PATH (install kubectl v1.30+: https://kubernetes.io/docs/tasks/tools/)",
    ),
]

CLUSTER = "kubectl-e2e"
NODEPOOL = Path(__file__).resolve().parents[1] / "manifests" / "playground" / "nodepool.yaml"
PLAYGROUND = (sys.executable, "-m", "nodesmith.cli.main", "playground")
COLUMNS = ["NAME", "TYPE", "CAPACITY", "ZONE", "NODE", "READY", "AGE"]
WAIT = 240.0  # seconds allowed for one step to settle on a loaded 2-core machine


class Session:
    """The running playground process and a ``kubectl`` bound to its kubeconfig."""

    def __init__(self, process: subprocess.Popen[str], state_dir: Path, kubeconfig: Path, cache: Path) -> None:
        self.process = process
        self.state_dir = state_dir
        self.kubeconfig = kubeconfig
        self.cache = cache
        self.output: list[str] = []

    def command(self) -> list[str]:
        """``kubectl`` with this playground's kubeconfig and a discovery cache of its own."""
        assert KUBECTL is not None
        return [KUBECTL, f"--kubeconfig={self.kubeconfig}", f"--cache-dir={self.cache}"]

    def kubectl(
        self, *args: str, input_text: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run ``kubectl ARGS`` against the playground; AssertionError with its output when it fails and ``check``."""
        done = subprocess.run(
            [*self.command(), *args], input=input_text, capture_output=True, text=True, timeout=WAIT, check=False
        )
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({done.returncode}): {done.stderr}{done.stdout}")
        return done

    def json(self, *args: str) -> Any:
        """``kubectl get ARGS -o json``, parsed."""
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def until(self, what: str, predicate: Callable[[], bool], timeout: float = WAIT) -> None:
        """Poll ``predicate`` every half second; fail naming ``what`` when it does not hold within ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.5)
        raise AssertionError(f"timed out waiting for {what}; playground output:\n" + "".join(self.output[-30:]))


def _pods(session: Session) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = session.json("pods", "-l", "app=inflate")["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def _running(session: Session) -> list[dict[str, Any]]:
    return [p for p in _pods(session) if p.get("status", {}).get("phase") == "Running" and p["spec"].get("nodeName")]


def _ready_nodes(session: Session) -> list[dict[str, Any]]:
    return [
        n
        for n in session.json("nodes")["items"]
        if any(c["type"] == "Ready" and c["status"] == "True" for c in n.get("status", {}).get("conditions", []))
    ]


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    state_dir = tmp_path_factory.mktemp("playground")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    process = subprocess.Popen(
        [*PLAYGROUND, "--dir", str(state_dir), "--cluster-name", CLUSTER, "--tick", "0.5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    assert process.stdout is not None
    output: list[str] = []
    exported: list[str] = []
    found = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            output.append(line)
            if line.startswith("export KUBECONFIG="):
                exported.append(line.strip().removeprefix("export KUBECONFIG="))
                found.set()
        found.set()

    threading.Thread(target=read, daemon=True).start()
    if not found.wait(timeout=WAIT) or not exported:
        process.kill()
        pytest.fail("the playground did not print its export KUBECONFIG line:\n" + "".join(output))
    live = Session(process, state_dir, Path(exported[0]), tmp_path_factory.mktemp("kubectl-cache"))
    live.output = output
    yield live
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()


def test_the_kubeconfig_names_the_cluster_and_the_state_file_the_endpoints(session: Session) -> None:
    config = session.kubectl("config", "view", "-o", "json")
    view = json.loads(config.stdout)
    assert view["current-context"] == CLUSTER
    assert view["clusters"][0]["name"] == CLUSTER
    state = json.loads((session.state_dir / "playground.json").read_text())
    assert state["cluster_name"] == CLUSTER
    assert view["clusters"][0]["cluster"]["server"] == state["kube_endpoint"]
    version = session.kubectl("version", "-o", "json")
    assert "nodesmith" in json.loads(version.stdout)["serverVersion"]["gitVersion"]


def test_apply_creates_getting_started_manifests_and_reapplying_changes_nothing(session: Session) -> None:
    manifest = NODEPOOL.read_text().replace("${CLUSTER_NAME}", CLUSTER)

    first = session.kubectl("apply", "-f", "-", input_text=manifest)
    session.kubectl("apply", "-f", str(MANIFESTS / "inflate.yaml"))
    again = session.kubectl("apply", "-f", "-", input_text=manifest)

    assert "nodepool.karpenter.sh/default created" in first.stdout
    assert "ec2nodeclass.karpenter.k8s.aws/default created" in first.stdout
    assert "nodepool.karpenter.sh/default unchanged" in again.stdout
    nodepool = session.json("nodepool", "default")
    applied = json.loads(nodepool["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"])
    assert applied["spec"]["disruption"]["consolidateAfter"] == "1m"


def test_apply_of_a_changed_nodepool_patches_it(session: Session) -> None:
    manifest = NODEPOOL.read_text().replace("${CLUSTER_NAME}", CLUSTER).replace("cpu: 1000", "cpu: 900")
    done = session.kubectl("apply", "-f", "-", input_text=manifest)
    assert "nodepool.karpenter.sh/default configured" in done.stdout
    assert str(session.json("nodepool", "default")["spec"]["limits"]["cpu"]) == "900"


def test_server_side_apply_creates_and_prunes_what_it_no_longer_sends(session: Session) -> None:
    config = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: team-settings\n  namespace: default\ndata:\n"

    created = session.kubectl("apply", "--server-side", "-f", "-", input_text=config + "  a: '1'\n  b: '2'\n")
    pruned = session.kubectl("apply", "--server-side", "-f", "-", input_text=config + "  a: '10'\n")

    assert "configmap/team-settings serverside-applied" in created.stdout
    assert "serverside-applied" in pruned.stdout
    assert session.json("configmap", "team-settings")["data"] == {"a": "10"}


def test_apply_of_a_malformed_nodepool_is_refused_naming_the_field(session: Session) -> None:
    manifest = (
        NODEPOOL.read_text().replace("${CLUSTER_NAME}", CLUSTER).replace("name: default\nspec:", "name: typo\nspec:", 1)
    )
    broken = manifest.replace("consolidationPolicy: WhenEmpty", "consolidationPolicy: Sometimes", 1)

    done = session.kubectl("apply", "-f", "-", input_text=broken, check=False)

    assert done.returncode != 0
    assert "spec.disruption.consolidationPolicy" in done.stderr
    assert "typo" not in session.kubectl("get", "nodepools", "-o", "name").stdout


def test_explain_describes_the_nodepool_fields(session: Session) -> None:
    done = session.kubectl("explain", "nodepool.spec.disruption")
    assert "consolidationPolicy" in done.stdout
    assert "budgets" in done.stdout


def test_scale_to_five_launches_nodes_and_runs_every_pod(session: Session) -> None:
    session.kubectl("scale", "deployment", "inflate", "--replicas", "5")

    session.until("5 inflate pods Running", lambda: len(_running(session)) == 5)

    nodes = {p["spec"]["nodeName"] for p in _running(session)}
    ready = {n["metadata"]["name"] for n in _ready_nodes(session)}
    assert nodes <= ready

    def registered() -> set[str]:
        claims = session.json("nodeclaims")["items"]
        return {c["status"]["nodeName"] for c in claims if c.get("status", {}).get("nodeName")}

    # pods run on a Ready node before the next reconcile pass registers its NodeClaim (Karpenter's too)
    session.until("the pods' nodes registered to NodeClaims", lambda: registered() >= nodes)
    session.kubectl("wait", "--for=condition=Ready", "nodes", "--all", "--timeout=60s")


def test_get_nodeclaims_prints_karpenters_printer_columns(session: Session) -> None:
    table = session.kubectl("get", "nodeclaims").stdout.splitlines()
    wide = session.kubectl("get", "nodeclaims", "-o", "wide").stdout.splitlines()

    assert table[0].split() == COLUMNS
    assert wide[0].split() == [*COLUMNS, "IMAGEID", "ID", "NODEPOOL", "NODECLASS", "DRIFTED"]
    claims = {c["metadata"]["name"]: c for c in session.json("nodeclaims")["items"]}
    for line in table[1:]:
        name, instance_type, capacity, zone, node, ready, _age = line.split()
        labels = claims[name]["metadata"]["labels"]
        assert instance_type == labels["node.kubernetes.io/instance-type"]
        assert capacity in ("spot", "on-demand")
        assert zone.startswith("us-east-1")
        assert node == claims[name]["status"]["nodeName"]
        assert ready == "True"
    for line in wide[1:]:
        assert "aws:///" in line
        assert " default " in line


def test_get_nodepools_shows_the_status_nodesmith_fills_in(session: Session) -> None:
    session.until(
        "the NodePool's status to count the nodes",
        lambda: (
            session.json("nodepool", "default").get("status", {}).get("nodes") == len(session.json("nodes")["items"])
        ),
    )
    listed = yaml.safe_load(session.kubectl("get", "nodepools", "-o", "yaml").stdout)
    (pool,) = listed["items"]
    conditions = {c["type"]: c["status"] for c in pool["status"]["conditions"]}
    table = session.kubectl("get", "nodepools").stdout.splitlines()

    assert conditions == {"ValidationSucceeded": "True", "NodeClassReady": "True", "Ready": "True"}
    assert int(pool["status"]["resources"]["nodes"]) == pool["status"]["nodes"] >= 1
    assert table[0].split() == ["NAME", "NODECLASS", "NODES", "READY", "AGE"]
    assert table[1].split()[:4] == ["default", "default", str(pool["status"]["nodes"]), "True"]


def test_get_pods_and_describe_show_the_nominating_event(session: Session) -> None:
    header = session.kubectl("get", "pods").stdout.splitlines()[0].split()
    assert header == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    nominated = {e["involvedObject"]["name"] for e in session.json("events")["items"] if e.get("reason") == "Nominated"}
    pods = sorted(nominated & {p["metadata"]["name"] for p in _pods(session)})
    assert pods, nominated

    described = session.kubectl("describe", "pod", pods[0]).stdout

    assert "Nominated" in described
    assert "Pod should schedule on: nodeclaim/" in described


def test_delete_nodeclaim_drains_its_node_and_the_pods_run_elsewhere(session: Session) -> None:
    claims = [c for c in session.json("nodeclaims")["items"] if c.get("status", {}).get("nodeName")]
    victim = claims[0]
    node = victim["status"]["nodeName"]
    watch = subprocess.Popen(
        [*session.command(), "get", "nodeclaims", "-w", "--output-watch-events"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        session.kubectl("delete", "nodeclaim", victim["metadata"]["name"], "--timeout=200s")

        session.until(
            f"node {node} removed", lambda: node not in {n["metadata"]["name"] for n in session.json("nodes")["items"]}
        )
        session.until("5 inflate pods Running again", lambda: len(_running(session)) == 5)
    finally:
        watch.terminate()
        streamed, _ = watch.communicate(timeout=30)
    assert node not in {p["spec"]["nodeName"] for p in _running(session)}
    deleted = [line for line in streamed.splitlines() if line.startswith("DELETED")]
    assert any(victim["metadata"]["name"] in line for line in deleted), streamed


def test_kubectl_drain_evicts_and_nodesmith_keeps_the_node_cordoned(session: Session) -> None:
    busy = sorted({p["spec"]["nodeName"] for p in _running(session)})
    node = busy[0]

    done = session.kubectl("drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=200s")

    assert "evicting pod" in done.stderr + done.stdout
    assert f"node/{node} drained" in done.stdout
    session.until("5 inflate pods Running off the drained node", lambda: len(_running(session)) == 5)
    assert node not in {p["spec"]["nodeName"] for p in _running(session)}
    nodes = {n["metadata"]["name"]: n for n in session.json("nodes")["items"]}
    if node in nodes:  # an empty node may already be gone (emptiness); if not, it stays cordoned
        assert nodes[node]["spec"].get("unschedulable") is True
        status = session.kubectl("get", "node", node).stdout
        assert "SchedulingDisabled" in status


def test_interrupt_drains_the_node_of_a_spot_warning(session: Session) -> None:
    busy = sorted({p["spec"]["nodeName"] for p in _running(session)})
    node = busy[0]

    done = subprocess.run(
        [*PLAYGROUND, "interrupt", node, "--dir", str(session.state_dir)],
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert "EC2 Spot Instance Interruption Warning" in done.stdout
    session.until(
        f"node {node} removed after the interruption",
        lambda: node not in {n["metadata"]["name"] for n in session.json("nodes")["items"]},
    )
    session.until("5 inflate pods Running after the interruption", lambda: len(_running(session)) == 5)


def test_interrupt_names_an_unknown_node(session: Session) -> None:
    done = subprocess.run(
        [*PLAYGROUND, "interrupt", "no-such-node", "--dir", str(session.state_dir)],
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    assert done.returncode == 1
    assert "no-such-node" in done.stderr


def test_ctrl_c_stops_the_playground_and_removes_its_state(session: Session) -> None:
    session.process.send_signal(signal.SIGINT)
    code = session.process.wait(timeout=120)

    assert code == 0
    assert not (session.state_dir / "playground.json").exists()
    assert any("playground stopped" in line for line in session.output)
