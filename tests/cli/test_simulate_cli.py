"""``nodesmith simulate`` as a user runs it: exit codes, what reaches stdout and stderr, both formats.

Most tests replace the embedded catalogue with a small hand-made one (``fake_catalogue``) so they
run in milliseconds; ``test_json_stdout_is_exactly_one_object_in_a_real_process`` runs the real
command in a subprocess against the embedded AWS.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nodesmith.cli.main import app

NODEPOOL = """\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: kubernetes.io/arch, operator: In, values: [amd64]}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  role: KarpenterNodeRole-test
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: test}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: test}}]
"""

REPO = Path(__file__).resolve().parents[2]
PRICE_TABLE = REPO.parent / "shared" / "data" / "ec2-ondemand-prices-us-east-1.json"

WORKLOAD = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
        - name: web
          image: nginx
          resources: {requests: {cpu: "1", memory: 1Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: huge, namespace: shop}
spec:
  containers:
    - name: app
      image: nginx
      resources: {requests: {cpu: "64"}}
"""

Write = Callable[[str, str], Path]


@pytest.fixture
def pool(write: Write) -> Path:
    """A NodePool (amd64, spot and on-demand) and its EC2NodeClass."""
    return write("nodepool.yaml", NODEPOOL)


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["simulate", *args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


# ------------------------------------------------------------------------------------- bad input


def test_invalid_manifest_exits_2_naming_file_document_and_field(
    write: Write, pool: Path, fake_catalogue: list[object]
) -> None:
    bad = write(
        "workload.yaml",
        """\
        apiVersion: v1
        kind: Pod
        metadata: {name: fine, namespace: default}
        spec:
          containers: [{name: a, image: x, resources: {requests: {cpu: 100m}}}]
        ---
        apiVersion: v1
        kind: Pod
        metadata: {name: broken, namespace: default}
        spec:
          containers: [{name: a, image: x, resources: {requests: {cpu: lots}}}]
        """,
    )
    code, out, err = _invoke("-f", str(pool), "-f", str(bad), "-o", "json")
    assert code == 2
    assert out == ""
    assert "workload.yaml" in err
    assert "document 2" in err
    assert "spec.containers[0].resources.requests.cpu" in err
    assert fake_catalogue == [], "the catalogue must not be loaded for invalid manifests"


def test_invalid_nodepool_field_is_reported_with_its_path(write: Write, fake_catalogue: list[object]) -> None:
    pool = write("bad-nodepool.yaml", NODEPOOL.replace("operator: In", "operator: Within"))
    code, out, err = _invoke("-f", str(pool), "-o", "json")
    assert code == 2
    assert out == ""
    assert "bad-nodepool.yaml" in err and "document 1" in err
    assert "spec.template.spec.requirements[0].operator" in err


def test_missing_manifest_file_exits_2(tmp_path: Path, fake_catalogue: list[object]) -> None:
    code, out, err = _invoke("-f", str(tmp_path / "absent.yaml"), "-o", "json")
    assert (code, out) == (2, "")
    assert "absent.yaml" in err


def test_unknown_output_format_exits_2(pool: Path, fake_catalogue: list[object]) -> None:
    code, out, err = _invoke("-f", str(pool), "-o", "yaml")
    assert (code, out) == (2, "")
    assert "json" in err and "table" in err


def test_missing_price_table_exits_2(pool: Path, tmp_path: Path, fake_catalogue: list[object]) -> None:
    code, out, err = _invoke("-f", str(pool), "-o", "json", "--price-table", str(tmp_path / "prices.json"))
    assert (code, out) == (2, "")
    assert "prices.json" in err


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ("  amiFamily: AL2\n  amiSelectorTerms: [{id: ami-0123456789abcdef0}]\n", "amiFamily AL2"),
        (
            "  amiSelectorTerms: [{alias: bottlerocket@latest}]\n  kubelet: {podsPerCore: 4}\n",
            "not applied by the Bottlerocket AMI family that would be silently dropped: podsPerCore",
        ),
    ],
)
def test_a_nodeclass_the_reconcile_function_would_refuse_exits_2_saying_why(
    write: Write, fake_catalogue: list[object], change: str, reason: str
) -> None:
    manifest = NODEPOOL.replace("  amiSelectorTerms: [{alias: al2023@latest}]\n", change)
    code, out, err = _invoke("-f", str(write("nodepool.yaml", manifest)), "-o", "json")
    assert (code, out) == (2, "")
    assert "EC2NodeClass default would not be ready" in err
    assert reason in err


# ---------------------------------------------------------------------------------------- output


def test_json_output_is_exactly_one_object_with_the_plan(
    write: Write, pool: Path, fake_catalogue: list[object]
) -> None:
    files = ["-f", str(pool), "-f", str(write("workload.yaml", WORKLOAD))]
    code, out, err = _invoke(*files, "-o", "json")
    assert code == 0, err
    result = json.loads(out)  # fails if anything but one JSON document is on stdout
    assert out.count("\n") == 1 and out.endswith("}\n")
    assert set(result) == {"nodeclaims", "existing_nodes", "unschedulable", "cost_per_hour"}
    [claim] = result["nodeclaims"]
    assert claim["nodepool"] == "default"
    assert len(claim["pods"]) == 3 and all(p.startswith("shop/web-") for p in claim["pods"])
    assert claim["pods"] == sorted(claim["pods"])
    assert "c6g.large" not in claim["instance_types"], "arm64 type kept for an amd64-only NodePool"
    assert claim["capacity_type"] == "spot"  # both allowed and spot offered: Karpenter launches spot
    assert result["unschedulable"] == [{"pod": "shop/huge", "reason": result["unschedulable"][0]["reason"]}]
    assert result["cost_per_hour"] == claim["price_per_hour"] > 0
    assert "estimate" in err, "estimated spot prices must be labelled on stderr"


def test_table_output_renders_claims_unschedulable_pods_and_cost(
    write: Write, pool: Path, fake_catalogue: list[object]
) -> None:
    files = ["-f", str(pool), "-f", str(write("workload.yaml", WORKLOAD))]
    code, out, err = _invoke(*files, "-o", "table")
    assert code == 0, err
    assert "NodeClaims to launch (1)" in out
    assert "default" in out and "spot" in out
    assert "Unschedulable pods (1)" in out and "shop/huge" in out
    assert "USD/hour" in out
    assert "estimate" in out, "estimated prices must be labelled in the table"


def test_price_table_comes_from_the_environment_when_not_given(
    pool: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_catalogue: list[dict[str, object]]
) -> None:
    table = tmp_path / "prices.json"
    table.write_text(json.dumps({"prices": {"m5.large": 0.096}}))
    monkeypatch.setenv("NODESMITH_PRICE_TABLE", str(table))
    code, _, err = _invoke("-f", str(pool), "-o", "json")
    assert code == 0, err
    assert fake_catalogue[0]["price_table"] == table


def test_directory_of_manifests_is_accepted(write: Write, pool: Path, fake_catalogue: list[object]) -> None:
    write("workload.yaml", WORKLOAD)
    code, out, err = _invoke("-f", str(pool.parent), "-o", "json")
    assert code == 0, err
    assert len(json.loads(out)["nodeclaims"]) == 1


# ------------------------------------------------------------------------------ real process, moto


@pytest.mark.slow
def test_json_stdout_is_exactly_one_object_in_a_real_process(write: Write, pool: Path) -> None:
    """The installed command, embedded AWS and all: stdout carries the JSON object and nothing else."""
    if not PRICE_TABLE.is_file():
        pytest.skip(f"needs the shared price table at {PRICE_TABLE}")
    files = ["-f", str(pool), "-f", str(write("workload.yaml", WORKLOAD))]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["PYTHONPATH"] = str(REPO / "lambdas")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "nodesmith.cli.main",
            "simulate",
            *files,
            "-o",
            "json",
            "--price-table",
            str(PRICE_TABLE),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    decoder = json.JSONDecoder()
    result, end = decoder.raw_decode(proc.stdout)
    assert proc.stdout[end:] == "\n", f"extra output after the JSON object: {proc.stdout[end:]!r}"
    [claim] = result["nodeclaims"]
    assert claim["instance_types"] and all(isinstance(t, str) for t in claim["instance_types"])
    assert [u["pod"] for u in result["unschedulable"]] == []  # 64 CPUs fit real EC2 types


def test_real_aws_without_credentials_exits_1_with_the_reason(
    pool: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from nodesmith.adapters.aws import clients

    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    empty = tmp_path / "aws-config"
    empty.write_text("")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance-metadata lookup either
    clients.reset_clients()
    try:
        code, out, err = _invoke("-f", str(pool), "-o", "json", "--aws")
    finally:
        clients.reset_clients()  # never leave a credential-less client cached for other tests
    assert (code, out) == (1, "")
    assert "catalogue" in err and "credentials" in err.lower()


def test_malformed_price_table_exits_2_naming_the_file(pool: Path, tmp_path: Path) -> None:
    table = tmp_path / "prices.json"
    table.write_text('{"prices": {"m5.large": "cheap"}}')
    code, out, err = _invoke("-f", str(pool), "-o", "json", "--price-table", str(table))
    assert (code, out) == (2, "")
    assert "prices.json" in err and "not a number" in err
