"""bench/README.md's results table is what bench/report.py renders from bench/results/*.json.

A result file added, changed or removed without `python bench/report.py` fails here; a malformed file is named.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def report() -> ModuleType:
    spec = importlib.util.spec_from_file_location("nodesmith_bench_report", BENCH / "report.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_readme_table_is_rendered_from_the_result_files(report: ModuleType) -> None:
    readme = (BENCH / "README.md").read_text(encoding="utf-8")
    table = report.render_table(BENCH / "results")
    assert table in readme, "bench/README.md's results table is out of date: run `python bench/report.py`"
    assert report.update_readme(readme, table) == readme
    for file in (BENCH / "results").glob("*.json"):
        assert f"](results/{file.name})" in table


def _write(directory: Path, name: str, data: object) -> None:
    (directory / name).write_text(json.dumps(data), encoding="utf-8")


def test_a_new_result_file_adds_its_rows(report: ModuleType, tmp_path: Path) -> None:
    _write(tmp_path, "a.json", {"command": "python bench/latency.py --json", "commit": "abc1234", "result": {"x": 1}})
    before = report.render_table(tmp_path)
    _write(
        tmp_path,
        "b.json",
        {
            "commit": "def5678",
            "runs": [
                {"command": "python bench/chaos.py --seed 1 --json", "result": {"ok": True, "settled": True}},
                {
                    "command": "python bench/chaos.py --seed 2 --json",
                    "result": {"ok": False, "settled": True, "invariants": {"pdb_violations": 2, "pods_lost": 0}},
                },
            ],
        },
    )
    after = report.render_table(tmp_path)
    assert before != after
    rows = [line for line in after.splitlines() if line.startswith("| [")]
    assert len(rows) == 3
    assert "| latency | `bench/latency.py --json` | abc1234 | x 1 |" in rows[0]
    assert rows[1].endswith(
        "| chaos | `bench/chaos.py --seed 1 --json` | def5678 | ok true, settled true: every invariant 0 |"
    )
    assert rows[2].endswith("ok false, settled true: pdb_violations 2 |")


def test_interruption_runs_show_their_headline_figures(report: ModuleType, tmp_path: Path) -> None:
    result = {
        "nodes": 10,
        "cordoned_seconds": None,
        "pods_running_again_seconds": 12.5,
        "pods_lost": 3,
        "pdb_violations": 0,
        "drains_per_event": {"max_fresh": 1},
    }
    _write(tmp_path, "i.json", {"command": "python bench/interruptions.py --nodes 10", "commit": "c", "result": result})
    table = report.render_table(tmp_path)
    assert "10 nodes, all cordoned never, pods running again 12.5 s; 3 pods lost, 0 PDB violations" in table


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("{not json", "x.json: not JSON"),
        (json.dumps({"commit": "c", "result": {}}), 'x.json: top level: needs "command"'),
        (json.dumps({"command": "run it", "result": {}}), "names no bench/<script>.py"),
        (json.dumps({"runs": [{"command": "python bench/chaos.py"}]}), "x.json: runs[0]"),
    ],
)
def test_a_malformed_result_file_is_named(report: ModuleType, tmp_path: Path, content: str, says: str) -> None:
    (tmp_path / "x.json").write_text(content, encoding="utf-8")
    with pytest.raises(report.ResultFileError, match=r".*" + says.replace("[", r"\[").replace("]", r"\]")):
        report.render_table(tmp_path)


def test_a_readme_without_markers_is_refused(report: ModuleType) -> None:
    with pytest.raises(ValueError, match="markers"):
        report.update_readme("# Benchmarks\n", "table")
