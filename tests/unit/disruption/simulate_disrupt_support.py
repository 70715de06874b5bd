"""Shared setup of the ``nodesmith simulate --disrupt`` tests: the snapshot's NodePool and EC2NodeClass, a run
of :func:`~nodesmith.cli.disrupt.run_simulate_disrupt` at :data:`~disruption_factories.NOW` on the shared
catalogue of :func:`~disruption_factories.catalogue` (no embedded AWS), and a run through the command line.

The CLI tests (``tests/cli``) import it by putting this directory on ``sys.path``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from disruption_factories import NOW, catalogue
from typer.testing import CliRunner

from nodesmith.cli.disrupt import run_simulate_disrupt
from nodesmith.cli.main import app
from nodesmith.cli.simulate_catalogue import CatalogueSource

if TYPE_CHECKING:
    from pathlib import Path

    import pytest
    from click.testing import Result

ON_DEMAND_POOL = """\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  disruption:
    consolidateAfter: 30s
    budgets: [{nodes: "100%"}]
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole
  amiFamily: AL2023
  amiSelectorTerms: [{id: ami-0new0000000000001}]
  subnetSelectorTerms: [{id: subnet-0aaa}]
  securityGroupSelectorTerms: [{id: sg-0aaa}]
---
"""
"""The NodePool ``default`` (on-demand only, ``consolidateAfter: 30s``, a 100 % budget) and its EC2NodeClass, as
the first documents of a snapshot; the Nodes and Pods follow."""


def simulate_disrupt(
    capsys: pytest.CaptureFixture[str], *files: Path, output: str = "json", now: float | str = NOW
) -> tuple[int, str, str]:
    """Run ``simulate --disrupt`` on ``files`` at ``now`` (epoch seconds or RFC 3339): the exit code, stdout and
    stderr."""
    code = run_simulate_disrupt(
        files=list(files), output=output, now=now, source=CatalogueSource(instance_types=catalogue())
    )
    captured = capsys.readouterr()
    return code, captured.out, captured.err


CLI_NOW = "2026-01-02T00:00:00Z"
"""When the command-line runs judge the snapshot: a day after the Nodes' ``creationTimestamp`` of 2026-01-01."""


def simulate_disrupt_cli(path: Path, *options: str) -> Result:
    """Run ``nodesmith simulate --disrupt -f path -o json --now CLI_NOW`` plus ``options`` through the command line
    (typer), on its default catalogue."""
    return CliRunner().invoke(app, ["simulate", "--disrupt", "-f", str(path), "-o", "json", "--now", CLI_NOW, *options])
