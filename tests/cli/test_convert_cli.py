"""``nodesmith convert`` as a user runs it: YAML only on stdout, notes and errors on stderr, exit codes,
``--output-dir`` and ``--default-instance-profile``.

Tests call :func:`nodesmith.cli.convert.run_convert` (what the typer command wraps); the last test
goes through the ``nodesmith`` app itself once the command is registered in ``cli/main.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from nodesmith.adapters.manifests import load_manifest_text
from nodesmith.cli.convert import run_convert

LEGACY = Path(__file__).resolve().parents[1] / "manifests" / "legacy"

Write = Callable[[str, str], Path]

TEMPLATE = """\
apiVersion: karpenter.k8s.aws/v1alpha1
kind: AWSNodeTemplate
metadata:
  name: default
spec:
  subnetSelector: {karpenter.sh/discovery: prod}
  securityGroupSelector: {karpenter.sh/discovery: prod}
  userData: |
    #!/bin/bash
    echo "hello"
"""


def test_stdout_is_only_v1_yaml_and_notes_go_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    code = run_convert(files=[LEGACY], output_dir=None)

    out, err = capsys.readouterr()
    assert code == 0
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert out.startswith("---\n")
    assert {d["apiVersion"] for d in docs if d["kind"] in ("NodePool", "EC2NodeClass")} == {
        "karpenter.sh/v1",
        "karpenter.k8s.aws/v1",
    }
    bundle = load_manifest_text(out, source="<converted>")  # what `nodesmith simulate` would read
    assert len(bundle.nodepools) == 6
    assert len(bundle.ec2nodeclasses) == 6
    assert "not carried over: spec.provider.launchTemplate" in err
    assert "changed: spec.ttlSecondsAfterEmpty" in err
    assert err.rstrip().splitlines()[-1].startswith("converted 14 input documents into 6 NodePools, 6 EC2NodeClasses")


def test_multiline_user_data_is_written_as_a_literal_block(write: Write, capsys: pytest.CaptureFixture[str]) -> None:
    path = write("template.yaml", TEMPLATE)

    assert run_convert(files=[path], output_dir=None, default_instance_profile="NodeProfile") == 0
    out = capsys.readouterr().out
    assert "userData: |\n    #!/bin/bash\n" in out
    [doc] = yaml.safe_load_all(out)
    assert doc["spec"]["userData"] == '#!/bin/bash\necho "hello"\n'
    assert doc["spec"]["instanceProfile"] == "NodeProfile"


def test_missing_instance_profile_without_a_default_is_bad_input(
    write: Write, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write("template.yaml", TEMPLATE)

    assert run_convert(files=[path], output_dir=None) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"error: {path}#1 AWSNodeTemplate/default: spec.instanceProfile: not set")
    assert "--default-instance-profile" in err


def test_result_that_would_not_validate_exits_2_naming_the_field(
    write: Write, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(
        "pool.yaml",
        """\
        apiVersion: karpenter.sh/v1beta1
        kind: NodePool
        metadata: {name: web}
        spec:
          template:
            spec:
              nodeClassRef: {name: default}
              requirements:
                - {key: kubernetes.io/arch, operator: Within, values: [amd64]}
        """,
    )

    assert run_convert(files=[path], output_dir=None) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert f"{path}#1 NodePool/web: spec.template.spec.requirements[0].operator" in err
    assert "not valid v1" in err


@pytest.mark.parametrize(
    ("text", "expected"),
    [("kind: [unclosed\n", "invalid YAML (line 2"), ("- just\n- a list\n", "expected an object")],
)
def test_unparseable_files_exit_2(write: Write, capsys: pytest.CaptureFixture[str], text: str, expected: str) -> None:
    path = write("bad.yaml", text)

    assert run_convert(files=[path], output_dir=None) == 2
    assert expected in capsys.readouterr().err


def test_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_convert(files=[tmp_path / "nope.yaml"], output_dir=None) == 2
    assert "no such file" in capsys.readouterr().err


def test_output_dir_writes_one_file_per_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "v1"
    files = [LEGACY / "v1alpha5-provisioners.yaml", LEGACY / "v1alpha5-workloads.yaml"]

    assert run_convert(files=files, output_dir=out_dir) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert sorted(p.name for p in out_dir.iterdir()) == ["v1alpha5-provisioners.yaml", "v1alpha5-workloads.yaml"]
    provisioners = list(yaml.safe_load_all((out_dir / "v1alpha5-provisioners.yaml").read_text()))
    workloads = list(yaml.safe_load_all((out_dir / "v1alpha5-workloads.yaml").read_text()))
    assert {d["kind"] for d in provisioners} == {"NodePool", "EC2NodeClass"}
    assert [d["kind"] for d in workloads] == ["Deployment", "StatefulSet", "Pod", "Node", "ConfigMap"]
    assert f"wrote {out_dir / 'v1alpha5-workloads.yaml'} (5 documents)" in err


def test_output_dir_never_overwrites_an_input(write: Write, capsys: pytest.CaptureFixture[str]) -> None:
    path = write("template.yaml", TEMPLATE)
    before = path.read_text()

    assert run_convert(files=[path], output_dir=path.parent, default_instance_profile="p") == 2
    assert "would overwrite an input file" in capsys.readouterr().err
    assert path.read_text() == before


def test_registered_convert_command_wires_the_options(tmp_path: Path) -> None:
    from nodesmith.cli.main import app

    if not any(
        c.name == "convert" or getattr(c.callback, "__name__", "") == "convert" for c in app.registered_commands
    ):
        pytest.skip("the convert command is not registered in nodesmith.cli.main yet")
    template = tmp_path / "t.yaml"
    template.write_text(TEMPLATE)
    result = CliRunner().invoke(app, ["convert", "-f", str(template), "--default-instance-profile", "NodeProfile"])

    assert result.exit_code == 0, result.stderr
    [doc] = yaml.safe_load_all(result.stdout)
    assert doc["spec"]["instanceProfile"] == "NodeProfile"
    assert "action needed: spec.amiFamily" in result.stderr
