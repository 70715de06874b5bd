"""``NodesmithStack``: composes the constructs, wires grants and alarm actions, applies cdk-nag.

The stack owns no resources of its own beyond the composition: each capability is one construct
under ``infra/constructs``. It is environment-agnostic (account and region are deploy-time
tokens), so synthesis needs no AWS credentials and makes no lookups.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_cdk import Annotations, Aspects, CfnOutput, Duration, Stack, Tags
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from cdk_nag import AwsSolutionsChecks

from infra.config import LOG_RETENTION_NAMES, NodesmithConfig
from infra.constructs.cluster_access import ClusterAccess
from infra.constructs.dashboard import NodesmithMonitoring
from infra.constructs.interruption import Interruption
from infra.constructs.permissions import NodesmithPermissions
from infra.constructs.reconcile import WATCH_CONCURRENCY, Reconcile
from nodesmith.handlers.settings import ENV

if TYPE_CHECKING:
    from constructs import Construct

__all__ = ["NodesmithStack"]

_DRAIN_HEADROOM_SECONDS = 5  # leave time after a bounded drain to report and return


class NodesmithStack(Stack):
    """Nodesmith for one existing EKS cluster: interruption pipeline, reconcile loop, IAM, EKS access,
    dashboard and alarms.

    ``config`` (keyword-only) is the validated :class:`~infra.config.NodesmithConfig`; every other
    keyword argument goes to ``aws_cdk.Stack`` (``description``, ``env``, ...).
    """

    def __init__(self, scope: Construct, construct_id: str, *, config: NodesmithConfig, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        if config.uses_placeholder_endpoint:
            Annotations.of(self).add_warning_v2(
                "nodesmith:placeholder-endpoint",
                "No cluster endpoint configured (context nodesmith:clusterEndpoint): the template synthesizes, "
                "but the deployed Lambdas could not reach a cluster.",
            )
        node_role_arn = config.node_role_arn or self.format_arn(
            service="iam", region="", resource="role", resource_name=f"KarpenterNodeRole-{config.cluster_name}"
        )
        cluster_arn = self.format_arn(service="eks", resource="cluster", resource_name=config.cluster_name)
        log_retention = getattr(logs.RetentionDays, LOG_RETENTION_NAMES[config.log_retention_days])

        reconcile_timeout = Duration.seconds(config.reconcile_timeout_seconds)
        interruption_timeout = Duration.seconds(config.interruption_timeout_seconds)

        reconcile = Reconcile(
            self,
            "Reconcile",
            environment=_settings_environment(
                config, node_role_arn=node_role_arn, timeout_seconds=config.reconcile_timeout_seconds
            ),
            timeout=reconcile_timeout,
            log_retention=log_retention,
            concurrency=WATCH_CONCURRENCY if config.reconcile_mode == "watch" else 1,
        )
        interruption = Interruption(
            self,
            "Interruption",
            environment={
                **_settings_environment(
                    config, node_role_arn=node_role_arn, timeout_seconds=config.interruption_timeout_seconds
                ),
                ENV.STATE_TABLE: reconcile.table.table_name,
            },
            timeout=interruption_timeout,
            log_retention=log_retention,
            max_concurrency=config.interruption_max_concurrency,
            batch_size=config.interruption_batch_size,
        )

        # Grants live here, in the composition root.
        permissions = NodesmithPermissions(
            self,
            "Permissions",
            cluster_name=config.cluster_name,
            cluster_arn=cluster_arn,
            node_role_arn=node_role_arn,
        )
        permissions.reconcile_policy.attach_to_role(reconcile.handler.role)
        permissions.interruption_policy.attach_to_role(interruption.handler.role)
        reconcile.table.grant_read_write_data(reconcile.function)
        reconcile.table.grant_read_write_data(interruption.function)
        if config.reconcile_mode == "poll":
            # An interruption batch that finds the reconcile lease free wakes the reconcile function for the
            # replacement pass (an asynchronous invoke): a pass over a large cluster can outlast its own 20 s.
            # (In watch mode the watcher holds the lease and runs the passes batches ask for.)
            interruption.function.add_environment(ENV.RECONCILE_FUNCTION, reconcile.function.function_name)
            interruption.function.add_to_role_policy(
                iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[reconcile.function.function_arn])
            )

        ClusterAccess(
            self,
            "ClusterAccess",
            cluster_name=config.cluster_name,
            roles={"ReconcileRole": reconcile.handler.role, "InterruptionRole": interruption.handler.role},
        )

        monitoring = NodesmithMonitoring(
            self,
            "Monitoring",
            reconcile_function=reconcile.function,
            interruption_function=interruption.function,
            queue=interruption.queue,
            dead_letter_queue=interruption.dead_letter_queue,
            pending_pod_age_threshold=Duration.seconds(config.pending_pod_age_alarm_seconds),
            extra_alarms=[interruption.dlq_alarm],
        )
        if config.alarm_topic_arn:
            topic = sns.Topic.from_topic_arn(self, "AlarmTopic", config.alarm_topic_arn)
            for alarm in [interruption.dlq_alarm, *monitoring.alarms]:
                alarm.add_alarm_action(cw_actions.SnsAction(topic))
                alarm.add_ok_action(cw_actions.SnsAction(topic))

        CfnOutput(self, "InterruptionQueueUrl", value=interruption.queue.queue_url)
        CfnOutput(self, "StateTableName", value=reconcile.table.table_name)
        CfnOutput(
            self,
            "ReconcileRoleArn",
            value=reconcile.handler.role.role_arn,
            description="Admitted to the cluster in Kubernetes group 'nodesmith'",
        )
        CfnOutput(
            self,
            "InterruptionRoleArn",
            value=interruption.handler.role.role_arn,
            description="Admitted to the cluster in Kubernetes group 'nodesmith'",
        )
        CfnOutput(self, "DashboardName", value=monitoring.dashboard.dashboard_name)

        Tags.of(self).add("app", "nodesmith")
        Aspects.of(self).add(AwsSolutionsChecks(verbose=True))


def _settings_environment(config: NodesmithConfig, *, node_role_arn: str, timeout_seconds: int) -> dict[str, str]:
    """Nodesmith settings shared by both Lambdas, keyed by ``ENV`` names; empty values are left out.

    The drain budget of one invocation is capped below the function's own timeout.
    """
    drain_seconds = max(1, min(config.drain_timeout_seconds, timeout_seconds - _DRAIN_HEADROOM_SECONDS))
    values = {
        ENV.CLUSTER_NAME: config.cluster_name,
        ENV.CLUSTER_ENDPOINT: config.cluster_endpoint,
        ENV.CLUSTER_CA_DATA: config.cluster_ca_data,
        ENV.KUBE_AUTH: "eks",
        ENV.NODE_ROLE_ARN: node_role_arn,
        ENV.PRICE_TABLE: config.price_table,
        ENV.REBALANCE_ACTION: config.rebalance_action,
        ENV.DRAIN_TIMEOUT_SECONDS: str(drain_seconds),
        ENV.RECONCILE_MODE: config.reconcile_mode,
    }
    return {name: value for name, value in values.items() if value}
