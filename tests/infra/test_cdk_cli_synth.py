"""`npx cdk synth` with the pinned CDK CLI (package.json) reads the app and writes a template.

The aws-cdk-lib 2.275 cloud assembly is only readable by a 2.x CLI (2.1148.1); a 3.x CLI fails
here. `make unit` installs node_modules with `npm ci` before running the tests.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("cdk-synth")]


def test_npx_cdk_synth_with_the_pinned_cli_writes_the_nodesmith_template(tmp_path: Path) -> None:
    cli = ROOT / "node_modules" / ".bin" / "cdk"
    if not cli.exists() or shutil.which("npx") is None:
        pytest.skip("the pinned CDK CLI is not installed: run `make cdk-cli` (npm ci)")
    env = dict(os.environ, JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="20", CDK_DISABLE_VERSION_CHECK="1")
    out = tmp_path / "cdk.out"

    result = subprocess.run(
        ["npx", "--no-install", "cdk", "synth", "-q", "--output", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )

    assert result.returncode == 0, result.stderr[-3000:]
    templates = list(out.glob("*.template.json"))
    assert templates, f"no template in {out}"
    resources = json.loads(templates[0].read_text())["Resources"]
    types = {r["Type"] for r in resources.values()}
    assert {"AWS::SQS::Queue", "AWS::Lambda::Function", "AWS::Events::Rule", "AWS::DynamoDB::Table"} <= types
