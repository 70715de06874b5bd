"""Every command turns bad input into exit 2 and an ``error:`` line naming the problem, the same way
(:mod:`nodesmith.cli.exits`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from nodesmith.cli.convert import run_convert
from nodesmith.cli.disrupt import run_simulate_disrupt
from nodesmith.cli.exits import EXIT_BAD_INPUT, EXIT_FAILED, BadInput, StepFailed, check_choice, check_manifests, report
from nodesmith.cli.explain import run_explain
from nodesmith.cli.playground import run_interrupt
from nodesmith.cli.simulate import run_simulate
from nodesmith.cli.simulate_catalogue import CatalogueSource

if TYPE_CHECKING:
    from pathlib import Path


def test_report_prints_the_error_and_returns_its_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert report(BadInput("manifest x.yaml#2: spec.requirments")) == EXIT_BAD_INPUT
    assert report(StepFailed("cannot reach EC2")) == EXIT_FAILED
    assert capsys.readouterr().err.splitlines() == [
        "error: manifest x.yaml#2: spec.requirments",
        "error: cannot reach EC2",
    ]


def test_the_checks_name_the_option_and_the_missing_files(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match=r"--output must be one of table, json, not 'yaml'"):
        check_choice("--output", "yaml", ("table", "json"))
    with pytest.raises(BadInput, match="no manifest file given"):
        check_manifests([])
    with pytest.raises(BadInput, match=r"manifest file not found: .*nope\.yaml"):
        check_manifests([tmp_path / "nope.yaml"])
    present = tmp_path / "a.yaml"
    present.write_text("{}")
    with pytest.raises(BadInput, match="price table not found"):
        check_manifests([present], price_table=tmp_path / "prices.json")


def test_each_command_answers_a_missing_manifest_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = [tmp_path / "missing.yaml"]
    codes = {
        "simulate": run_simulate(files=missing, source=CatalogueSource(region="us-east-1"), output="table"),
        "disrupt": run_simulate_disrupt(files=missing, source=CatalogueSource(region="us-east-1"), output="table"),
        "explain": run_explain(
            pod="p", files=missing, region="us-east-1", price_table=None, output="table", packing="karpenter"
        ),
        "convert": run_convert(files=missing, output_dir=None),
    }

    assert codes == dict.fromkeys(codes, EXIT_BAD_INPUT)
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 4
    assert all("missing.yaml" in line for line in errors)


def test_interrupt_without_a_playground_is_a_failed_step(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_interrupt(state_dir=tmp_path, node="ip-10-0-0-1.ec2.internal") == EXIT_FAILED
    assert "no playground is running" in capsys.readouterr().err
