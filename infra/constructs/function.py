"""``NodesmithFunction``: the one way this project defines a Lambda function.

Every Nodesmith Lambda shares the same runtime, architecture, logging, tracing and code asset; only
the handler, timeout, memory and environment differ. Keeping that in one construct avoids the
copy-pasted function blocks the cookbook anchor warns about (``code-style-anchors.md`` §1).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from cdk_nag import NagPackSuppression, NagSuppressions
from constructs import Construct

from infra.metric_names import NAMESPACE
from nodesmith.handlers.settings import ENV

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["REPO_ROOT", "NodesmithFunction", "code_asset_path"]

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The repository root (``infra/constructs/function.py`` is two levels below it)."""

_ENV_NAMES = frozenset(value for key, value in vars(ENV).items() if key.isupper())

# Lambda's code root: the vendored build (runtime dependencies + ``nodesmith``) when a build step
# produced it, else the source tree. No Docker bundling: synth stays offline and fast.
_BUILD_DIR = Path("build") / "lambda"
_SOURCE_DIR = Path("lambdas")
# Never needed at run time (the import-linter contract keeps the Lambdas off sim and cli).
_SOURCE_EXCLUDES = ("**/__pycache__", "**/*.pyc", "nodesmith/sim", "nodesmith/cli", "*.egg-info")


def code_asset_path(root: Path = REPO_ROOT) -> Path:
    """Return ``build/lambda`` under ``root`` if it exists (dependencies vendored), else ``lambdas``."""
    build = root / _BUILD_DIR
    return build if build.is_dir() else root / _SOURCE_DIR


class NodesmithFunction(Construct):
    """A Python 3.11 arm64 Lambda with JSON logs, active X-Ray tracing and its own role and log group.

    Props (keyword-only):

    ``handler``
        Dotted path inside the asset, e.g. ``nodesmith.handlers.reconcile.handler``.
    ``service_name``
        Powertools service name: the ``service`` dimension of its metrics and field of its logs.
    ``description``
        Shown in the Lambda console.
    ``timeout``
        Function timeout.
    ``memory_size_mib``
        Memory in MiB (CPU scales with it).
    ``environment``
        Nodesmith settings; every key must be a name from ``nodesmith.handlers.settings.ENV`` so the
        stack cannot drift from what the handlers read. Powertools variables are added here.
    ``log_retention``
        Retention of the function's explicit log group.
    ``reserved_concurrency``
        Reserved concurrent executions, or ``None`` for the unreserved pool.

    Attributes: ``function`` (``aws_lambda.Function``), ``role`` (its own ``iam.Role``, with no
    managed policies: log writing is granted on its log group only), ``log_group``.

    Raises ``ValueError`` at synth time when ``environment`` has a key that is not in ``ENV``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        handler: str,
        service_name: str,
        description: str,
        timeout: Duration,
        memory_size_mib: int,
        environment: Mapping[str, str],
        log_retention: logs.RetentionDays,
        reserved_concurrency: int | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        unknown = sorted(set(environment) - _ENV_NAMES)
        if unknown:
            raise ValueError(
                f"{self.node.path}: environment variables {unknown} are not defined in "
                "nodesmith.handlers.settings.ENV; add them there first so the handlers read them"
            )

        self.log_group = logs.LogGroup(
            self,
            "LogGroup",
            retention=log_retention,
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"Nodesmith {service_name} Lambda",
        )
        # Instead of AWSLambdaBasicExecutionRole (logs:* on every log group): this group only.
        self.log_group.grant_write(self.role)

        self.function = lambda_.Function(
            self,
            "Function",
            description=description,
            runtime=lambda_.Runtime.PYTHON_3_11,
            architecture=lambda_.Architecture.ARM_64,
            handler=handler,
            code=lambda_.Code.from_asset(str(code_asset_path()), exclude=list(_SOURCE_EXCLUDES)),
            role=self.role,
            timeout=timeout,
            memory_size=memory_size_mib,
            reserved_concurrent_executions=reserved_concurrency,
            tracing=lambda_.Tracing.ACTIVE,
            logging_format=lambda_.LoggingFormat.JSON,
            application_log_level_v2=lambda_.ApplicationLogLevel.INFO,
            system_log_level_v2=lambda_.SystemLogLevel.WARN,
            log_group=self.log_group,
            environment={
                **environment,
                "POWERTOOLS_SERVICE_NAME": service_name,
                "POWERTOOLS_METRICS_NAMESPACE": NAMESPACE,
            },
        )

        # CDK makes the function depend on every resource under the role: the role itself (already
        # implied by the GetAtt, cfn-lint W3005) and its default policy (needed: the SQS event source
        # mapping is validated against it). Keep only the policy.
        default_policy = self.role.node.find_child("DefaultPolicy").node.default_child
        cfn_function = self.function.node.default_child
        if not (isinstance(default_policy, iam.CfnPolicy) and isinstance(cfn_function, lambda_.CfnFunction)):
            raise TypeError(f"{self.node.path}: unexpected CDK construct tree under the function or its role")
        cfn_function.add_override("DependsOn", [default_policy.logical_id])

        NagSuppressions.add_resource_suppressions(
            self.role,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM5",
                    reason=(
                        "X-Ray PutTraceSegments/PutTelemetryRecords (added by Tracing.ACTIVE) support no "
                        "resource-level permissions, so AWS requires Resource '*' for them."
                    ),
                    applies_to=["Resource::*"],
                ),
            ],
            apply_to_children=True,
        )
        NagSuppressions.add_resource_suppressions(
            self.function,
            [
                NagPackSuppression(
                    id="AwsSolutions-L1",
                    reason=(
                        "Pinned on purpose: the package targets Python 3.11 (pyproject requires-python "
                        ">=3.11,<3.12) and the vendored wheels are built for it."
                    ),
                ),
            ],
        )
