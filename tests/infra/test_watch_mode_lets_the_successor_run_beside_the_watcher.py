"""In watch mode the next scheduled reconcile invocation must run while the leaving watcher still
runs, to take the lease over without a gap: reserved concurrency 2 there (the lease keeps one pass
active). Poll mode's 1 is asserted by test_stack."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def _reconcile_function(mode: str) -> dict[str, Any]:
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    from infra.config import NodesmithConfig
    from infra.stack import NodesmithStack

    context = json.loads((REPO / "cdk.json").read_text())["context"]
    context |= {
        "nodesmith:clusterName": "prod",
        "nodesmith:clusterEndpoint": "https://ABCDEF0123456789.gr7.eu-west-1.eks.amazonaws.com",
        "nodesmith:nodeRoleArn": "arn:aws:iam::123456789012:role/NodesmithNodeRole",
        "nodesmith:reconcileMode": mode,
    }
    app = cdk.App(context=context)
    stack = NodesmithStack(app, "NodesmithStack", config=NodesmithConfig.from_context(app.node.try_get_context))
    functions = Template.from_stack(stack).find_resources("AWS::Lambda::Function")
    return next(
        f["Properties"]
        for f in functions.values()
        if f["Properties"].get("Handler") == "nodesmith.handlers.reconcile.handler"
    )


def test_a_watching_reconcile_function_may_run_twice_at_once() -> None:
    function = _reconcile_function("watch")
    assert function["ReservedConcurrentExecutions"] == 2
    assert function["Environment"]["Variables"]["NODESMITH_RECONCILE_MODE"] == "watch"
