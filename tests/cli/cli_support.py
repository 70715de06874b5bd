"""Shared setup of the CLI tests: the EC2NodeClass their NodePools reference, and a run of ``nodesmith explain``
(:func:`~nodesmith.cli.explain.run_explain`) on a given catalogue (no embedded AWS)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodesmith.cli.explain import run_explain

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    import pytest

    from nodesmith.core.model import InstanceType

DEFAULT_NODECLASS = """\
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole-test
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: test}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: test}}]
---
"""
"""The EC2NodeClass ``default`` (AL2023, subnets and security groups tagged ``karpenter.sh/discovery: test``), as
one document of a manifest; the documents after it follow."""


def explain_pod(
    capsys: pytest.CaptureFixture[str], path: Path, catalogue: Sequence[InstanceType], pod: str, *, output: str
) -> tuple[int, str, str]:
    """Run ``nodesmith explain pod -f path -o output`` on ``catalogue``: the exit code, stdout and stderr."""
    code = run_explain(pod=pod, files=[path], instance_types=catalogue, output=output)
    captured = capsys.readouterr()
    return code, captured.out, captured.err
