"""Deployment configuration of the Nodesmith stack, read from CDK context and validated at synth time.

Every value has a default, so ``cdk synth`` works with no context, no AWS account and no lookups.
A bad value fails synthesis with a :class:`ConfigError` that names the context key, instead of
deploying a stack whose Lambdas would fail at their first invocation.

Context keys (``cdk.json`` ``context`` or ``cdk synth -c key=value``), all prefixed ``nodesmith:``, are listed
with their meaning and accepted range in :data:`infra.config_keys.CONTEXT_KEYS`, from which
``docs/configuration.md`` is rendered (``python -m infra.docs``).

Why the interruption timeout is at most 60 s: the queue keeps messages 300 s (Karpenter's
interruption queue), and a message whose handling failed (a Kubernetes API answering 503, say) comes
back after the queue's visibility timeout, :func:`queue_visibility_seconds`, just above the function
timeout. That has to leave a spot interruption's two minutes for the retry, and let a message that keeps
failing reach the dead-letter queue before it expires. Lambda's SQS guidance asks for six times the
function timeout so that throttled invocations are retried within the visibility; here the function's
reserved concurrency is at least the event source's maximum concurrency, so it is never throttled.

A drain round lost to a termination invocation that crashed or timed out comes back only after the termination
queue's visibility timeout, which follows the function timeout: a round is one pass of evictions, so the
termination function's default timeout is 20 s (visibility 30 s), and a lost round near a spot notice's end costs
no more than that.

The termination queue works the other way round: a request stays on it while its node drains, one
round per delivery. The termination handler reports a node that still has pods as a batch item
failure and sets that message's visibility to the backoff itself (``ChangeMessageVisibility``:
``terminationRetrySeconds`` doubling per delivery up to ``terminationRetryMaxSeconds``), so the queue's
own visibility timeout (:func:`queue_visibility_seconds`, just above the function timeout, as
Lambda requires) only applies when an invocation fails or that call is refused. ``maxReceiveCount``
therefore bounds how long a drain blocked by a PodDisruptionBudget goes on before its request is
dead-lettered: :func:`termination_patience_seconds` (about an hour with the defaults). The queue keeps
messages :data:`TERMINATION_QUEUE_RETENTION_SECONDS` (1 day), and a request must reach the dead-letter
queue before it expires even if every delivery waited the full visibility timeout, so
``terminationMaxReceiveCount x visibility`` must fit in it. A dead-lettered request is not lost work: the
NodeClaim is still deleting, and the reconcile pass sends a new request once the last one is
``terminationRequestStaleSeconds`` old.

Both queue functions reserve at least their event source's maximum concurrency, so their pollers are never
throttled and no other function of the account can take the capacity a burst of interruptions needs.
Reserved concurrency (theirs and the reconcile function's 1, or 2 in watch mode) comes out of the account's
Lambda concurrency quota, of which Lambda keeps 100 unreserved: the defaults need a quota of at least 151.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, get_args

from nodesmith.handlers.settings import Settings, parse_feature_gates

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = [
    "CONTEXT_PREFIX",
    "LOG_RETENTION_NAMES",
    "PLACEHOLDER_ENDPOINT",
    "QUEUE_BATCHING_WINDOW_SECONDS",
    "TERMINATION_QUEUE_RETENTION_SECONDS",
    "ConfigError",
    "NodesmithConfig",
    "queue_visibility_seconds",
    "termination_patience_seconds",
]

CONTEXT_PREFIX = "nodesmith:"
PLACEHOLDER_ENDPOINT = "https://cluster-endpoint.nodesmith.invalid"
"""Default API endpoint: synthesizes, but a Lambda deployed with it cannot reach any cluster."""

QUEUE_BATCHING_WINDOW_SECONDS = 1
"""``MaximumBatchingWindowInSeconds`` of both SQS event sources: a batch fills for at most 1 s."""

TERMINATION_QUEUE_RETENTION_SECONDS = 86_400
"""How long the termination queue keeps a request (1 day): far longer than any drain it may carry."""

_VISIBILITY_HEADROOM_SECONDS = 9
"""Above the function timeout and batching window: Lambda refuses an SQS event source whose queue's
visibility timeout is below the function timeout (AWS Lambda developer guide, "Using Lambda with Amazon SQS")."""

_REQUEST_HEARTBEAT_SECONDS = 60
"""A draining node's request time (``nodesmith.dev/termination-requested-at``) is refreshed at most this often."""

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


def queue_visibility_seconds(timeout_seconds: int) -> int:
    """The visibility timeout of a queue a function consumes, for its function timeout (seconds): timeout +
    batching window + 9 s, the least Lambda accepts with room for the invocation to end. Only a failed
    invocation or record (or a backoff SQS refused) waits this long before SQS delivers it again."""
    return timeout_seconds + QUEUE_BATCHING_WINDOW_SECONDS + _VISIBILITY_HEADROOM_SECONDS


def termination_patience_seconds(*, max_receive_count: int, retry_seconds: int, retry_max_seconds: int) -> int:
    """How long (seconds, drain rounds' own time left out) a request whose node never drains is delivered
    before SQS dead-letters it: the backoffs after each of its ``max_receive_count`` deliveries, doubling from
    ``retry_seconds`` and capped at ``retry_max_seconds`` (``nodesmith.core.termination.retry_after_seconds``)."""
    return sum(min(retry_max_seconds, retry_seconds * 2 ** min(n, 30)) for n in range(max_receive_count))


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
    reconcile_memory_mib: int = 1024
    interruption_timeout_seconds: int = 20
    interruption_max_concurrency: int = 25
    interruption_batch_size: int = 10
    interruption_reserved_concurrency: int = 25
    termination_timeout_seconds: int = 20
    termination_max_concurrency: int = 25
    termination_reserved_concurrency: int = 25
    termination_max_receive_count: int = 360
    termination_retry_seconds: int = 2
    termination_retry_max_seconds: int = 10
    termination_request_stale_seconds: int = 300
    eviction_workers: int = 8
    price_table: str = ""
    rebalance_action: str = "cordon"
    alarm_topic_arn: str | None = None
    pending_pod_age_alarm_seconds: int = 300
    log_retention_days: int = 30
    feature_gates: str = ""
    registration_ttl_seconds: int = 900

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
            512 <= self.reconcile_memory_mib <= 10240,
            "reconcileMemoryMiB",
            f"{self.reconcile_memory_mib} is outside 512..10240 MiB (Lambda's maximum is 10240; a pass needs its "
            "imports, the catalogue and the cluster's objects in memory: see docs/operations.md, Sizing)",
        )
        self._check_interruption()
        self._check_termination()
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
        try:
            parse_feature_gates(self.feature_gates)
        except ValueError as exc:
            raise ConfigError(f"CDK context {CONTEXT_PREFIX}featureGates: {exc}") from None

    def _check_interruption(self) -> None:
        _check(
            5 <= self.interruption_timeout_seconds <= 60,
            "interruptionTimeoutSeconds",
            f"{self.interruption_timeout_seconds} is outside 5..60 seconds: a failed message must come back "
            "within a spot interruption's two minutes, and be dead-lettered before the queue's 300 s retention",
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
            self.interruption_max_concurrency <= self.interruption_reserved_concurrency <= 1000,
            "interruptionReservedConcurrency",
            f"{self.interruption_reserved_concurrency} is outside interruptionMaxConcurrency.."
            f"1000 ({self.interruption_max_concurrency}..1000): below the event source's maximum concurrency "
            "the function would be throttled in a burst",
        )

    def _check_termination(self) -> None:
        _check(
            10 <= self.termination_timeout_seconds <= 900,
            "terminationTimeoutSeconds",
            f"{self.termination_timeout_seconds} is outside 10..900 seconds (Lambda's maximum is 900)",
        )
        _check(
            2 <= self.termination_max_concurrency <= 1000,
            "terminationMaxConcurrency",
            f"{self.termination_max_concurrency} is outside 2..1000 (the SQS event source's MaximumConcurrency)",
        )
        _check(
            self.termination_max_concurrency <= self.termination_reserved_concurrency <= 1000,
            "terminationReservedConcurrency",
            f"{self.termination_reserved_concurrency} is outside terminationMaxConcurrency.."
            f"1000 ({self.termination_max_concurrency}..1000): below the event source's maximum concurrency "
            "the function would be throttled while nodes drain",
        )
        _check(
            1 <= self.eviction_workers <= 64,
            "evictionWorkers",
            f"{self.eviction_workers} is outside 1..64",
        )
        _check(
            1 <= self.termination_retry_seconds <= 60,
            "terminationRetrySeconds",
            f"{self.termination_retry_seconds} is outside 1..60 seconds",
        )
        _check(
            max(1, self.termination_retry_seconds) <= self.termination_retry_max_seconds <= 900,
            "terminationRetryMaxSeconds",
            f"{self.termination_retry_max_seconds} is outside terminationRetrySeconds..900 seconds",
        )
        stale_floor = _REQUEST_HEARTBEAT_SECONDS + self.termination_retry_max_seconds
        _check(
            max(60, stale_floor + 1) <= self.termination_request_stale_seconds <= 3600,
            "terminationRequestStaleSeconds",
            f"{self.termination_request_stale_seconds} is outside {max(60, stale_floor + 1)}..3600 seconds: a "
            f"draining node's request is refreshed every {_REQUEST_HEARTBEAT_SECONDS} s plus one backoff "
            "(terminationRetryMaxSeconds), and a shorter staleness would re-send requests for drains under way",
        )
        _check(
            60 <= self.registration_ttl_seconds <= 3600,
            "registrationTtlSeconds",
            f"{self.registration_ttl_seconds} is outside 60..3600 seconds: a node takes about a minute to "
            "register, and a NodeClaim left longer without one holds capacity the pods cannot use",
        )
        visibility = queue_visibility_seconds(self.termination_timeout_seconds)
        longest = self.termination_max_receive_count * visibility
        _check(
            10 <= self.termination_max_receive_count <= 1000 and longest <= TERMINATION_QUEUE_RETENTION_SECONDS,
            "terminationMaxReceiveCount",
            f"{self.termination_max_receive_count} is outside 10..1000, or times the termination queue's "
            f"{visibility} s visibility timeout ({longest} s) it exceeds the queue's "
            f"{TERMINATION_QUEUE_RETENTION_SECONDS} s retention: a request must be dead-lettered before it expires",
        )

    @property
    def uses_placeholder_endpoint(self) -> bool:
        """True when no real cluster endpoint was configured (synth works, the Lambdas would not)."""
        return self.cluster_endpoint == PLACEHOLDER_ENDPOINT

    @property
    def termination_patience_seconds(self) -> int:
        """How long a drain that never finishes is retried before its request is dead-lettered (seconds)."""
        return termination_patience_seconds(
            max_receive_count=self.termination_max_receive_count,
            retry_seconds=self.termination_retry_seconds,
            retry_max_seconds=self.termination_retry_max_seconds,
        )

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
        d = cls()
        interruption_max = _int(get, "interruptionMaxConcurrency", d.interruption_max_concurrency)
        termination_max = _int(get, "terminationMaxConcurrency", d.termination_max_concurrency)
        return cls(
            cluster_name=_text(get, "clusterName", d.cluster_name),
            cluster_endpoint=_text(get, "clusterEndpoint", d.cluster_endpoint),
            cluster_ca_data=_text(get, "clusterCaData", d.cluster_ca_data),
            node_role_arn=_text(get, "nodeRoleArn", "") or None,
            reconcile_mode=_text(get, "reconcileMode", d.reconcile_mode),
            reconcile_timeout_seconds=_int(get, "reconcileTimeoutSeconds", d.reconcile_timeout_seconds),
            reconcile_memory_mib=_int(get, "reconcileMemoryMiB", d.reconcile_memory_mib),
            interruption_timeout_seconds=_int(get, "interruptionTimeoutSeconds", d.interruption_timeout_seconds),
            interruption_max_concurrency=interruption_max,
            interruption_batch_size=_int(get, "interruptionBatchSize", d.interruption_batch_size),
            interruption_reserved_concurrency=_int(get, "interruptionReservedConcurrency", interruption_max),
            termination_timeout_seconds=_int(get, "terminationTimeoutSeconds", d.termination_timeout_seconds),
            termination_max_concurrency=termination_max,
            termination_reserved_concurrency=_int(get, "terminationReservedConcurrency", termination_max),
            termination_max_receive_count=_int(get, "terminationMaxReceiveCount", d.termination_max_receive_count),
            termination_retry_seconds=_int(get, "terminationRetrySeconds", d.termination_retry_seconds),
            termination_retry_max_seconds=_int(get, "terminationRetryMaxSeconds", d.termination_retry_max_seconds),
            termination_request_stale_seconds=_int(
                get, "terminationRequestStaleSeconds", d.termination_request_stale_seconds
            ),
            eviction_workers=_int(get, "evictionWorkers", d.eviction_workers),
            price_table=_text(get, "priceTable", d.price_table),
            rebalance_action=_text(get, "rebalanceAction", d.rebalance_action),
            alarm_topic_arn=_text(get, "alarmTopicArn", "") or None,
            pending_pod_age_alarm_seconds=_int(get, "pendingPodAgeAlarmSeconds", d.pending_pod_age_alarm_seconds),
            log_retention_days=_int(get, "logRetentionDays", d.log_retention_days),
            feature_gates=_text(get, "featureGates", d.feature_gates),
            registration_ttl_seconds=_int(get, "registrationTtlSeconds", d.registration_ttl_seconds),
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
