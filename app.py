#!/usr/bin/env python3
"""CDK entry point: build the Nodesmith stack from CDK context (see ``infra/config.py`` for the keys).

Synthesis makes no AWS calls (no STS, no lookups), so it works without credentials::

    npm ci && JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20 npx cdk synth -q
    npx cdk synth -c nodesmith:clusterName=prod -c nodesmith:clusterEndpoint=https://...
"""

from __future__ import annotations

import aws_cdk as cdk

from infra.config import NodesmithConfig
from infra.stack import NodesmithStack


def main() -> None:
    """Synthesize ``NodesmithStack`` into ``cdk.out``."""
    app = cdk.App()
    config = NodesmithConfig.from_context(app.node.try_get_context)
    NodesmithStack(
        app,
        "NodesmithStack",
        config=config,
        description=f"Nodesmith: serverless Karpenter-compatible node autoscaler for EKS cluster {config.cluster_name}",
    )
    app.synth()


if __name__ == "__main__":
    main()
