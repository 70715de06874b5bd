"""``NodesmithStack``: composes the constructs, wires grants and alarm actions, applies cdk-nag.

The stack owns no resources of its own beyond the composition: each capability is one construct
under ``infra/constructs``. It is environment-agnostic (account and region are deploy-time
tokens), so synthesis needs no AWS credentials and makes no lookups.

Every grant is made here, in the composition root, and each function gets exactly what its code
calls (``tests/infra/test_stack.py`` holds each role to its list):

========================  ==============================================================================
function                  AWS permissions besides its logs, X-Ray and its own queue's event source
========================  ==============================================================================
reconcile                 :attr:`~infra.constructs.permissions.NodesmithPermissions.reconcile_policy`;
                          the state table (lease and offering marks); ``sqs:SendMessage`` to the
                          termination queue (disruptions and the sweep of user deletions)
interruption              ``ec2:DescribeInstances``; ``dynamodb:PutItem`` of offering marks only
                          (``dynamodb:LeadingKeys``); ``sqs:SendMessage`` to the termination queue;
                          ``lambda:InvokeFunction`` of the reconcile function (poll mode)
termination               ``ec2:DescribeInstances``; ``ec2:TerminateInstances`` of owned NodePool
                          instances (its event source's grant covers ``ChangeMessageVisibility``)
========================  ==============================================================================
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
from infra.constructs.reconcile import OFFERING_PARTITION, WATCH_CONCURRENCY, Reconcile
from infra.constructs.termination import Termination
from nodesmith.handlers.settings import ENV

if TYPE_CHECKING:
    from constructs import Construct

__all__ = ["NodesmithStack", "interruption_environment", "reconcile_environment", "termination_environment"]


class NodesmithStack(Stack):
    """Nodesmith for one existing EKS cluster: interruption and termination pipelines, reconcile loop, IAM,
    EKS access, dashboard and alarms.

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

        termination = Termination(
            self,
            "Termination",
            environment=termination_environment(config),
            timeout=Duration.seconds(config.termination_timeout_seconds),
            log_retention=log_retention,
            max_concurrency=config.termination_max_concurrency,
            reserved_concurrency=config.termination_reserved_concurrency,
            max_receive_count=config.termination_max_receive_count,
        )
        queue_url = termination.queue.queue_url
        reconcile = Reconcile(
            self,
            "Reconcile",
            environment={
                **reconcile_environment(config, node_role_arn=node_role_arn),
                ENV.TERMINATION_QUEUE_URL: queue_url,
            },
            timeout=Duration.seconds(config.reconcile_timeout_seconds),
            memory_size_mib=config.reconcile_memory_mib,
            log_retention=log_retention,
            concurrency=WATCH_CONCURRENCY if config.reconcile_mode == "watch" else 1,
        )
        interruption = Interruption(
            self,
            "Interruption",
            environment={
                **interruption_environment(config),
                ENV.TERMINATION_QUEUE_URL: queue_url,
                ENV.STATE_TABLE: reconcile.table.table_name,
            },
            timeout=Duration.seconds(config.interruption_timeout_seconds),
            log_retention=log_retention,
            max_concurrency=config.interruption_max_concurrency,
            reserved_concurrency=config.interruption_reserved_concurrency,
            batch_size=config.interruption_batch_size,
        )

        permissions = NodesmithPermissions(
            self,
            "Permissions",
            cluster_name=config.cluster_name,
            cluster_arn=cluster_arn,
            node_role_arn=node_role_arn,
        )
        permissions.reconcile_policy.attach_to_role(reconcile.handler.role)
        permissions.interruption_policy.attach_to_role(interruption.handler.role)
        permissions.termination_policy.attach_to_role(termination.handler.role)
        # The interruption function marks interrupted spot offerings unavailable: one PutItem per offering, under
        # the offering partition only, so it can never touch the reconcile lease.
        interruption.function.add_to_role_policy(
            iam.PolicyStatement(
                actions=["dynamodb:PutItem"],
                resources=[reconcile.table.table_arn],
                conditions={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [OFFERING_PARTITION]}},
            )
        )
        # Termination requests (SendMessageBatch is authorized by sqs:SendMessage); the queue denies every
        # other sender.
        for sender in (reconcile.function, interruption.function):
            termination.queue.grant(sender, "sqs:SendMessage")
        termination.restrict_senders([reconcile.handler.role, interruption.handler.role])
        if config.reconcile_mode == "poll":
            # An interruption batch that cordoned nodes wakes the reconcile function for the replacement pass (an
            # asynchronous invoke). In watch mode the watcher sees the cordoned nodes' pods itself.
            interruption.function.add_environment(ENV.RECONCILE_FUNCTION, reconcile.function.function_name)
            interruption.function.add_to_role_policy(
                iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[reconcile.function.function_arn])
            )

        ClusterAccess(
            self,
            "ClusterAccess",
            cluster_name=config.cluster_name,
            roles={
                "ReconcileRole": reconcile.handler.role,
                "InterruptionRole": interruption.handler.role,
                "TerminationRole": termination.handler.role,
            },
        )

        dlq_alarms = [interruption.dlq_alarm, termination.dlq_alarm]
        monitoring = NodesmithMonitoring(
            self,
            "Monitoring",
            reconcile_function=reconcile.function,
            interruption=interruption,
            termination=termination,
            pending_pod_age_threshold=Duration.seconds(config.pending_pod_age_alarm_seconds),
            extra_alarms=dlq_alarms,
        )
        if config.alarm_topic_arn:
            topic = sns.Topic.from_topic_arn(self, "AlarmTopic", config.alarm_topic_arn)
            for alarm in [*dlq_alarms, *monitoring.alarms]:
                alarm.add_alarm_action(cw_actions.SnsAction(topic))
                alarm.add_ok_action(cw_actions.SnsAction(topic))

        CfnOutput(self, "InterruptionQueueUrl", value=interruption.queue.queue_url)
        CfnOutput(self, "TerminationQueueUrl", value=termination.queue.queue_url)
        CfnOutput(self, "StateTableName", value=reconcile.table.table_name)
        for name, function in (
            ("ReconcileRoleArn", reconcile.handler),
            ("InterruptionRoleArn", interruption.handler),
            ("TerminationRoleArn", termination.handler),
        ):
            CfnOutput(
                self,
                name,
                value=function.role.role_arn,
                description="Admitted to the cluster in Kubernetes group 'nodesmith'",
            )
        CfnOutput(self, "DashboardName", value=monitoring.dashboard.dashboard_name)

        Tags.of(self).add("app", "nodesmith")
        Aspects.of(self).add(AwsSolutionsChecks(verbose=True))


def _kube_environment(config: NodesmithConfig) -> dict[str, str]:
    """How every function reaches the cluster: name, endpoint, CA, and EKS token authentication."""
    return {
        ENV.CLUSTER_NAME: config.cluster_name,
        ENV.CLUSTER_ENDPOINT: config.cluster_endpoint,
        ENV.CLUSTER_CA_DATA: config.cluster_ca_data,
        ENV.KUBE_AUTH: "eks",
    }


def _present(values: dict[str, str]) -> dict[str, str]:
    return {name: value for name, value in values.items() if value}


def reconcile_environment(config: NodesmithConfig, *, node_role_arn: str) -> dict[str, str]:
    """The reconcile function's settings (``ENV`` names; empty values left out); the stack adds the state
    table and the termination queue URL."""
    return _present(
        {
            **_kube_environment(config),
            ENV.NODE_ROLE_ARN: node_role_arn,
            ENV.PRICE_TABLE: config.price_table,
            ENV.RECONCILE_MODE: config.reconcile_mode,
            ENV.TERMINATION_REQUEST_STALE_SECONDS: str(config.termination_request_stale_seconds),
            ENV.FEATURE_GATES: config.feature_gates,
            ENV.REGISTRATION_TTL_SECONDS: str(config.registration_ttl_seconds),
        }
    )


def interruption_environment(config: NodesmithConfig) -> dict[str, str]:
    """The interruption function's settings; the stack adds the state table (offering marks), the termination
    queue URL and, in poll mode, the reconcile function's name. No node role or price table: it launches
    nothing."""
    return _present({**_kube_environment(config), ENV.REBALANCE_ACTION: config.rebalance_action})


def termination_environment(config: NodesmithConfig) -> dict[str, str]:
    """The termination function's settings; its construct adds its own queue's URL. No state table: its cloud
    provider then shares no offering marks, and it needs none."""
    return _present(
        {
            **_kube_environment(config),
            ENV.EVICTION_WORKERS: str(config.eviction_workers),
            ENV.TERMINATION_RETRY_SECONDS: str(config.termination_retry_seconds),
            ENV.TERMINATION_RETRY_MAX_SECONDS: str(config.termination_retry_max_seconds),
        }
    )
