"""The catalogue of the stack's CDK context keys: meaning, unit and accepted range of each ``nodesmith:*`` key.

:class:`infra.config.NodesmithConfig` validates the values; this catalogue describes them, and
``docs/configuration.md`` is rendered from it (``python -m infra.docs``). Defaults are not written here: the
page reads them from :class:`~infra.config.NodesmithConfig`. A test checks that every key ``from_context``
reads is listed, and that each range here is the one the validation enforces, so the page cannot drift.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

from infra.config import LOG_RETENTION_NAMES, PLACEHOLDER_ENDPOINT
from nodesmith.handlers.settings import KARPENTER_FEATURE_GATES, Settings

__all__ = ["CONTEXT_KEYS", "ContextKey"]


@dataclass(frozen=True, kw_only=True)
class ContextKey:
    """One ``nodesmith:<key>`` context key.

    ``attribute`` is the :class:`~infra.config.NodesmithConfig` field it sets. An integer key's accepted
    range is ``low..high`` (``high`` None: no upper bound) with every other key at its default; ``bound_by``
    says how another key moves the range. A key with a fixed set of values lists them in ``choices``; any
    other key states its ``rule``. ``default`` replaces the config's default value in the page where that
    value is derived at deploy time.
    """

    key: str
    attribute: str
    meaning: str
    unit: str = ""
    low: int | None = None
    high: int | None = None
    bound_by: str = ""
    choices: tuple[str, ...] = ()
    rule: str = ""
    default: str | None = None


def _choices(field: str) -> tuple[str, ...]:
    return tuple(str(value) for value in get_args(Settings.model_fields[field].annotation))


CONTEXT_KEYS: tuple[ContextKey, ...] = (
    ContextKey(
        key="clusterName",
        attribute="cluster_name",
        meaning="EKS cluster name; every launched resource is tagged `kubernetes.io/cluster/<name>: owned`, and "
        "EC2NodeClass selectors usually match `karpenter.sh/discovery: <name>`.",
        rule="1-100 of `[A-Za-z0-9_-]`, alphanumeric first (EKS cluster name)",
    ),
    ContextKey(
        key="clusterEndpoint",
        attribute="cluster_endpoint",
        meaning="API server URL of the cluster (`aws eks describe-cluster --query cluster.endpoint`).",
        rule="an `https://` URL",
        default=f"`{PLACEHOLDER_ENDPOINT}` (synthesizes; the functions reach no cluster)",
    ),
    ContextKey(
        key="clusterCaData",
        attribute="cluster_ca_data",
        meaning="Base64 CA bundle of the API server (`cluster.certificateAuthority.data`); empty: the system "
        "trust store.",
        rule="base64 text",
    ),
    ContextKey(
        key="nodeRoleArn",
        attribute="node_role_arn",
        meaning="IAM role of the nodes: the only role `iam:PassRole` allows, and the role of the instance "
        "profile launched instances get.",
        rule="an IAM role ARN",
        default="`KarpenterNodeRole-<clusterName>` in the deploying account (Karpenter's getting-started name)",
    ),
    ContextKey(
        key="reconcileMode",
        attribute="reconcile_mode",
        meaning="`poll`: one reconcile pass per scheduled invocation, once a minute; `watch`: one invocation "
        "watches pending pods for up to about 14 minutes and hands over to the next through the lease.",
        choices=_choices("reconcile_mode"),
    ),
    ContextKey(
        key="reconcileTimeoutSeconds",
        attribute="reconcile_timeout_seconds",
        meaning="Timeout of the reconcile function.",
        unit="seconds",
        low=60,
        high=900,
        bound_by="`watch` mode requires 900",
    ),
    ContextKey(
        key="reconcileMemoryMiB",
        attribute="reconcile_memory_mib",
        meaning="Memory of the reconcile function, which also sets its CPU share (Lambda gives one vCPU per "
        "1,769 MiB). A pass holds the cluster's pods, Nodes and NodeClaims in memory: size it from the "
        "function's Max Memory Used ([operations.md](operations.md#sizing-the-reconcile-function)).",
        unit="MiB",
        low=512,
        high=10240,
    ),
    ContextKey(
        key="interruptionTimeoutSeconds",
        attribute="interruption_timeout_seconds",
        meaning="Timeout of the interruption function. A failed message comes back after about this long, "
        "which must leave time within a spot interruption's two minutes.",
        unit="seconds",
        low=5,
        high=60,
    ),
    ContextKey(
        key="interruptionMaxConcurrency",
        attribute="interruption_max_concurrency",
        meaning="`MaximumConcurrency` of the interruption queue's event source.",
        low=2,
        high=1000,
    ),
    ContextKey(
        key="interruptionBatchSize",
        attribute="interruption_batch_size",
        meaning="`BatchSize` of the interruption queue's event source (messages per invocation).",
        low=1,
        high=10_000,
    ),
    ContextKey(
        key="interruptionReservedConcurrency",
        attribute="interruption_reserved_concurrency",
        meaning="Reserved concurrency of the interruption function, so a burst of interruptions is never throttled.",
        low=25,
        high=1000,
        bound_by="at least `interruptionMaxConcurrency`",
        default="`interruptionMaxConcurrency`",
    ),
    ContextKey(
        key="terminationTimeoutSeconds",
        attribute="termination_timeout_seconds",
        meaning="Timeout of the termination function (one drain round per message, up to a batch of 10); the "
        "termination queue's visibility timeout, and so the wait after a crashed round, is 10 s more.",
        unit="seconds",
        low=10,
        high=900,
    ),
    ContextKey(
        key="terminationMaxConcurrency",
        attribute="termination_max_concurrency",
        meaning="`MaximumConcurrency` of the termination queue's event source.",
        low=2,
        high=1000,
    ),
    ContextKey(
        key="terminationReservedConcurrency",
        attribute="termination_reserved_concurrency",
        meaning="Reserved concurrency of the termination function.",
        low=25,
        high=1000,
        bound_by="at least `terminationMaxConcurrency`",
        default="`terminationMaxConcurrency`",
    ),
    ContextKey(
        key="terminationMaxReceiveCount",
        attribute="termination_max_receive_count",
        meaning="Drain rounds of one termination request before it is dead-lettered (the termination queue's "
        "`maxReceiveCount`); with the defaults a drain blocked by a PodDisruptionBudget goes on for about an "
        "hour.",
        low=10,
        high=1000,
        bound_by="times (`terminationTimeoutSeconds` + 10) at most 86400, the queue's retention",
    ),
    ContextKey(
        key="terminationRetrySeconds",
        attribute="termination_retry_seconds",
        meaning="First wait between drain rounds of a node that still has pods; doubles per round.",
        unit="seconds",
        low=1,
        high=60,
    ),
    ContextKey(
        key="terminationRetryMaxSeconds",
        attribute="termination_retry_max_seconds",
        meaning="Cap of the doubling wait between drain rounds.",
        unit="seconds",
        low=2,
        high=900,
        bound_by="at least `terminationRetrySeconds`",
    ),
    ContextKey(
        key="terminationRequestStaleSeconds",
        attribute="termination_request_stale_seconds",
        meaning="The reconcile pass sends a deleting NodeClaim's termination request again when none was "
        "worked on for this long (a dead-lettered request is not lost work).",
        unit="seconds",
        low=71,
        high=3600,
        bound_by="more than 60 + `terminationRetryMaxSeconds`",
    ),
    ContextKey(
        key="evictionWorkers",
        attribute="eviction_workers",
        meaning="Evictions in flight per drain round.",
        low=1,
        high=64,
    ),
    ContextKey(
        key="priceTable",
        attribute="price_table",
        meaning="Path, as the functions see it, of a price table JSON file consulted after the AWS "
        "Pricing API; empty: the Pricing API, then an estimate from vCPUs and memory.",
        rule="a file path",
    ),
    ContextKey(
        key="rebalanceAction",
        attribute="rebalance_action",
        meaning="What an EC2 rebalance recommendation does: `ignore`, `event` (an Event only, Karpenter's "
        "behaviour), `cordon` (no new pods) or `drain` (replace the node, as for an interruption).",
        choices=_choices("rebalance_action"),
    ),
    ContextKey(
        key="alarmTopicArn",
        attribute="alarm_topic_arn",
        meaning="SNS topic notified by every alarm (alarm and OK actions); empty: the alarms notify nobody.",
        rule="an SNS topic ARN",
    ),
    ContextKey(
        key="pendingPodAgeAlarmSeconds",
        attribute="pending_pod_age_alarm_seconds",
        meaning="The pending-pods alarm fires when the oldest pending pod is older than this.",
        unit="seconds",
        low=60,
    ),
    ContextKey(
        key="logRetentionDays",
        attribute="log_retention_days",
        meaning="CloudWatch Logs retention of every function's log group.",
        unit="days",
        choices=tuple(str(days) for days in sorted(LOG_RETENTION_NAMES)),
    ),
    ContextKey(
        key="featureGates",
        attribute="feature_gates",
        meaning="Karpenter's `--feature-gates` for the reconcile function, `Name=true,Name=false`: "
        "`NodeRepair=true` turns node repair on, `NodeOverlay=true` applies NodeOverlays, "
        "`ReservedCapacity=false` turns capacity reservations off, `StaticCapacity=true` keeps static NodePools at "
        "their `replicas`; Karpenter's other gate names are accepted and "
        "change nothing.",
        rule="gates among " + ", ".join(f"`{name}`" for name in KARPENTER_FEATURE_GATES),
    ),
    ContextKey(
        key="registrationTtlSeconds",
        attribute="registration_ttl_seconds",
        meaning="A launched NodeClaim whose Node has not registered after this long is deleted and its instance "
        "terminated (Karpenter's registration TTL, 15 minutes).",
        unit="seconds",
        low=60,
        high=3600,
    ),
)
"""Every ``nodesmith:*`` context key, in the order of ``cdk.json``."""
