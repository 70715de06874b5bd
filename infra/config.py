"""Deployment configuration of the Nodesmith stack, read from CDK context and validated at synth time.

Every value has a default, so ``cdk synth`` works with no context, no AWS account and no lookups.
A bad value fails synthesis with a :class:`ConfigError` that names the context key, instead of
deploying a stack whose Lambdas would fail at their first invocation.

Context keys (``cdk.json`` ``context`` or ``cdk synth -c key=value``), all prefixed ``nodesmith:``:

===============================  ==========================================================  ==============
key                              meaning                                                     default
===============================  ==========================================================  ==============
``clusterName``                  EKS cluster name (also the ``kubernetes.io/cluster/<name>``  ``nodesmith``
                                 tag every launched resource must carry)
``clusterEndpoint``              API server URL (``https://...``)                             placeholder
``clusterCaData``                base64 cluster CA bundle (empty: system trust store)         ``""``
``nodeRoleArn``                  IAM role of the nodes (the only role ``iam:PassRole``        ``KarpenterNode
                                 allows); empty: ``KarpenterNodeRole-<clusterName>`` in the   Role-<cluster>``
                                 deploying account, Karpenter's getting-started name
``reconcileMode``                ``poll`` (one pass per scheduled invocation, once a minute)  ``poll``
                                 or ``watch`` (one invocation watches pending pods for up to
                                 ~14 min and hands over through the lease; timeout 900 s)
``reconcileTimeoutSeconds``      reconcile Lambda timeout, 60..900 s                          ``900``
``interruptionTimeoutSeconds``   interruption Lambda timeout, 5..44 s (see below)             ``20``
``drainTimeoutSeconds``          drain work per invocation, capped below each timeout         ``60``
``priceTable``                   price table passed to the Lambdas (empty: Pricing API)       ``""``
``rebalanceAction``              what a rebalance recommendation does:                        ``cordon``
                                 ``ignore | event | cordon | drain``
``alarmTopicArn``                SNS topic for alarm and OK actions (empty: none)             ``""``
``pendingPodAgeAlarmSeconds``    alarm when the oldest pending pod is older than this         ``300``
``logRetentionDays``             CloudWatch Logs retention of both functions                  ``30``
===============================  ==========================================================  ==============

Why the interruption timeout is at most 44 s: the queue keeps messages 300 s (Karpenter's
interruption queue), and Lambda's SQS guidance asks for a visibility timeout of at least six times
the function timeout. A message must be retried (or reach the dead-letter queue) before it expires,
so ``6 x timeout + batching window`` has to fit in the retention period with room to spare.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, get_args

from nodesmith.handlers.settings import Settings

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = [
    "CONTEXT_PREFIX",
    "LOG_RETENTION_NAMES",
    "PLACEHOLDER_ENDPOINT",
    "ConfigError",
    "NodesmithConfig",
]

CONTEXT_PREFIX = "nodesmith:"
PLACEHOLDER_ENDPOINT = "https://cluster-endpoint.nodesmith.invalid"
"""Default API endpoint: synthesizes, but a Lambda deployed with it cannot reach any cluster."""

_CLUSTER_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9\-_]{0,99}$")  # EKS CreateCluster name rule
_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,512}$")
_TOPIC_ARN = re.compile(r"^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[\w-]{1,256}$")
LOG_RETENTION_NAMES: Mapping[int, str] = MappingProxyType(
    {
        1: "ONE_DAY",
        3: "THREE_DAYS",
        5: "FIVE_DAYS",
        7: "ONE_WEEK",
        14: "TWO_WEEKS",
        30: "ONE_MONTH",
        60: "TWO_MONTHS",
        90: "THREE_MONTHS",
        120: "FOUR_MONTHS",
        150: "FIVE_MONTHS",
        180: "SIX_MONTHS",
        365: "ONE_YEAR",
        400: "THIRTEEN_MONTHS",
        545: "EIGHTEEN_MONTHS",
        731: "TWO_YEARS",
        1096: "THREE_YEARS",
        1827: "FIVE_YEARS",
        2192: "SIX_YEARS",
        2557: "SEVEN_YEARS",
        2922: "EIGHT_YEARS",
        3288: "NINE_YEARS",
        3653: "TEN_YEARS",
    }
)
"""CloudWatch Logs retention in days -> ``aws_logs.RetentionDays`` member name (no jsii import here)."""
_REBALANCE_ACTIONS: tuple[str, ...] = get_args(Settings.model_fields["rebalance_action"].annotation)
_RECONCILE_MODES: tuple[str, ...] = get_args(Settings.model_fields["reconcile_mode"].annotation)


class ConfigError(ValueError):
    """A CDK context value is invalid; the message names the ``nodesmith:*`` key and the rule."""


@dataclass(frozen=True, kw_only=True)
class NodesmithConfig:
    """Validated deployment settings of one Nodesmith stack (one EKS cluster).

    Durations are seconds. ``node_role_arn`` of ``None`` means "derive it in the stack" (the
    account is a deploy-time token, not known at synth time).
    """

    cluster_name: str = "nodesmith"
    cluster_endpoint: str = PLACEHOLDER_ENDPOINT
    cluster_ca_data: str = ""
    node_role_arn: str | None = None
    reconcile_mode: str = "poll"
    reconcile_timeout_seconds: int = 900
    interruption_timeout_seconds: int = 20
    interruption_max_concurrency: int = 25
    interruption_batch_size: int = 10
    drain_timeout_seconds: int = 60
    price_table: str = ""
    rebalance_action: str = "cordon"
    alarm_topic_arn: str | None = None
    pending_pod_age_alarm_seconds: int = 300
    log_retention_days: int = 30

    def __post_init__(self) -> None:
        """Check every field; raise :class:`ConfigError` naming the context key on the first bad one."""
        _check(
            bool(_CLUSTER_NAME.match(self.cluster_name)),
            "clusterName",
            f"{self.cluster_name!r} is not an EKS cluster name (1-100 of [A-Za-z0-9_-], alphanumeric first)",
        )
        _check(
            self.cluster_endpoint.startswith("https://") and len(self.cluster_endpoint) > len("https://"),
            "clusterEndpoint",
            f"{self.cluster_endpoint!r} must be an https:// URL",
        )
        _check(
            self.node_role_arn is None or bool(_ROLE_ARN.match(self.node_role_arn)),
            "nodeRoleArn",
            f"{self.node_role_arn!r} is not an IAM role ARN",
        )
        _check(
            self.reconcile_mode in _RECONCILE_MODES,
            "reconcileMode",
            f"{self.reconcile_mode!r} is not supported (supported: {', '.join(_RECONCILE_MODES)})",
        )
        _check(
            self.reconcile_mode != "watch" or self.reconcile_timeout_seconds == 900,
            "reconcileTimeoutSeconds",
            f"{self.reconcile_timeout_seconds} with reconcileMode watch: a watcher needs the full 900 s "
            "(it leaves ~1.5 min early and the next scheduled invocation takes over)",
        )
        _check(
            60 <= self.reconcile_timeout_seconds <= 900,
            "reconcileTimeoutSeconds",
            f"{self.reconcile_timeout_seconds} is outside 60..900 seconds (Lambda's maximum is 900)",
        )
        _check(
            5 <= self.interruption_timeout_seconds <= 44,
            "interruptionTimeoutSeconds",
            f"{self.interruption_timeout_seconds} is outside 5..44 seconds: six times it must fit in the "
            "queue's 300 s retention so a failed message is retried or dead-lettered before it expires",
        )
        _check(
            2 <= self.interruption_max_concurrency <= 1000,
            "interruptionMaxConcurrency",
            f"{self.interruption_max_concurrency} is outside 2..1000 (the SQS event source's MaximumConcurrency)",
        )
        _check(
            1 <= self.interruption_batch_size <= 10_000,
            "interruptionBatchSize",
            f"{self.interruption_batch_size} is outside 1..10000 (the SQS event source's BatchSize, standard queue)",
        )
        _check(
            1 <= self.drain_timeout_seconds <= 900,
            "drainTimeoutSeconds",
            f"{self.drain_timeout_seconds} is outside 1..900 seconds",
        )
        _check(
            self.rebalance_action in _REBALANCE_ACTIONS,
            "rebalanceAction",
            f"{self.rebalance_action!r} is not one of {', '.join(_REBALANCE_ACTIONS)}",
        )
        _check(
            self.alarm_topic_arn is None or bool(_TOPIC_ARN.match(self.alarm_topic_arn)),
            "alarmTopicArn",
            f"{self.alarm_topic_arn!r} is not an SNS topic ARN",
        )
        _check(
            self.pending_pod_age_alarm_seconds >= 60,
            "pendingPodAgeAlarmSeconds",
            f"{self.pending_pod_age_alarm_seconds} is below 60 seconds (the reconcile period)",
        )
        _check(
            self.log_retention_days in LOG_RETENTION_NAMES,
            "logRetentionDays",
            f"{self.log_retention_days} is not a CloudWatch Logs retention "
            f"({', '.join(map(str, sorted(LOG_RETENTION_NAMES)))})",
        )

    @property
    def uses_placeholder_endpoint(self) -> bool:
        """True when no real cluster endpoint was configured (synth works, the Lambdas would not)."""
        return self.cluster_endpoint == PLACEHOLDER_ENDPOINT

    @classmethod
    def from_context(cls, get: Callable[[str], Any]) -> NodesmithConfig:
        """Build the config from a context getter such as ``app.node.try_get_context``.

        ``get`` receives the full key (``nodesmith:clusterName``) and returns ``None`` when unset.
        Values given on the command line arrive as strings; integers are parsed from them. An empty
        string means "use the default" (``cdk.json`` lists every key with ``""`` where unset).

        Raises
        ------
        ConfigError
            Naming the key whose value is missing a rule above or is not an integer where one is due.
        """
        defaults = cls()
        return cls(
            cluster_name=_text(get, "clusterName", defaults.cluster_name),
            cluster_endpoint=_text(get, "clusterEndpoint", defaults.cluster_endpoint),
            cluster_ca_data=_text(get, "clusterCaData", defaults.cluster_ca_data),
            node_role_arn=_text(get, "nodeRoleArn", "") or None,
            reconcile_mode=_text(get, "reconcileMode", defaults.reconcile_mode),
            reconcile_timeout_seconds=_int(get, "reconcileTimeoutSeconds", defaults.reconcile_timeout_seconds),
            interruption_timeout_seconds=_int(get, "interruptionTimeoutSeconds", defaults.interruption_timeout_seconds),
            interruption_max_concurrency=_int(get, "interruptionMaxConcurrency", defaults.interruption_max_concurrency),
            interruption_batch_size=_int(get, "interruptionBatchSize", defaults.interruption_batch_size),
            drain_timeout_seconds=_int(get, "drainTimeoutSeconds", defaults.drain_timeout_seconds),
            price_table=_text(get, "priceTable", defaults.price_table),
            rebalance_action=_text(get, "rebalanceAction", defaults.rebalance_action),
            alarm_topic_arn=_text(get, "alarmTopicArn", "") or None,
            pending_pod_age_alarm_seconds=_int(
                get, "pendingPodAgeAlarmSeconds", defaults.pending_pod_age_alarm_seconds
            ),
            log_retention_days=_int(get, "logRetentionDays", defaults.log_retention_days),
        )


def _check(ok: bool, key: str, problem: str) -> None:
    if not ok:
        raise ConfigError(f"CDK context {CONTEXT_PREFIX}{key}: {problem}")


def _text(get: Callable[[str], Any], key: str, default: str) -> str:
    value = get(CONTEXT_PREFIX + key)
    if value is None or value == "":
        return default
    if not isinstance(value, str):
        raise ConfigError(f"CDK context {CONTEXT_PREFIX}{key}: expected a string, got {value!r}")
    return value.strip()


def _int(get: Callable[[str], Any], key: str, default: int) -> int:
    value = get(CONTEXT_PREFIX + key)
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        raise ConfigError(f"CDK context {CONTEXT_PREFIX}{key}: expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        raise ConfigError(f"CDK context {CONTEXT_PREFIX}{key}: expected an integer, got {value!r}") from None
