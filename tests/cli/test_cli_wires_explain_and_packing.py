"""The `nodesmith` command line exposes explain and simulate --packing (typer wiring, end to end)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from nodesmith.cli.main import app

NODEPOOL = Path(__file__).resolve().parents[1] / "manifests" / "default-nodepool.yaml"

HUGE_POD = """\
apiVersion: v1
kind: Pod
metadata: {name: huge, namespace: default}
spec:
  containers: [{name: app, image: pause, resources: {requests: {cpu: "1000"}}}]
"""


def test_explain_names_the_nodepool_and_why_a_1000_cpu_pod_fits_nowhere(tmp_path: Path) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text(HUGE_POD)

    result = CliRunner().invoke(app, ["explain", "huge", "-f", str(NODEPOOL), "-f", str(pod)])

    assert result.exit_code == 0, result.output
    assert "default" in result.stdout
    assert "cpu" in result.stdout


def test_simulate_accepts_both_packing_policies_and_rejects_others(tmp_path: Path) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text(HUGE_POD.replace('"1000"', '"1"'))
    for policy in ("karpenter", "nodesmith"):
        result = CliRunner().invoke(
            app, ["simulate", "-f", str(NODEPOOL), "-f", str(pod), "-o", "json", "--packing", policy]
        )
        assert result.exit_code == 0, result.output
        assert [nc["pods"] for nc in json.loads(result.stdout)["nodeclaims"]] == [["default/huge"]]

    bad = CliRunner().invoke(app, ["simulate", "-f", str(NODEPOOL), "-f", str(pod), "--packing", "random"])
    assert bad.exit_code == 2


def test_simulate_reads_capacity_reservations_and_rejects_a_file_of_another_shape(tmp_path: Path) -> None:
    scenario = Path(__file__).resolve().parents[1] / "scenarios" / "reserved-chosen-first"
    args = ["simulate", "-o", "json", "-f", str(scenario / "nodepool.yaml"), "-f", str(scenario / "workload.yaml")]

    result = CliRunner().invoke(app, [*args, "--capacity-reservations", str(scenario / "capacity-reservations.json")])

    assert result.exit_code == 0, result.output
    (claim,) = json.loads(result.stdout)["nodeclaims"]
    assert claim["capacity_type"] == "reserved" and claim["instance_types"][0] == "m5.xlarge"
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"Reservations": []}))
    bad = CliRunner().invoke(app, [*args, "--capacity-reservations", str(other)])
    assert bad.exit_code == 2
    assert "describe-capacity-reservations" in bad.output
