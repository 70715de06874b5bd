"""Lambda configuration, read from environment variables into validated pydantic models.

This module imports pydantic only, so ``infra`` can import the variable names from here and the
stack can never drift from what the handlers read. Nothing is read at import time: call
:func:`load_settings` (cached per container by the wiring).
"""

from __future__ import annotations

import os
from types import MappingProxyType
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "ENV",
    "ENV_BY_FIELD",
    "KARPENTER_FEATURE_GATES",
    "Settings",
    "SettingsError",
    "load_settings",
    "parse_feature_gates",
]


class ENV:
    """Environment variable names shared by the handlers and the CDK stack."""

    CLUSTER_NAME = "NODESMITH_CLUSTER_NAME"
    CLUSTER_ENDPOINT = "NODESMITH_CLUSTER_ENDPOINT"
    CLUSTER_CA_DATA = "NODESMITH_CLUSTER_CA_DATA"
    KUBE_AUTH = "NODESMITH_KUBE_AUTH"
    KUBE_TOKEN = "NODESMITH_KUBE_TOKEN"
    TERMINATION_QUEUE_URL = "NODESMITH_TERMINATION_QUEUE_URL"
    STATE_TABLE = "NODESMITH_STATE_TABLE"
    PRICE_TABLE = "NODESMITH_PRICE_TABLE"
    REBALANCE_ACTION = "NODESMITH_REBALANCE_ACTION"
    NODE_ROLE_ARN = "NODESMITH_NODE_ROLE_ARN"
    EVICTION_WORKERS = "NODESMITH_EVICTION_WORKERS"
    TERMINATION_RETRY_SECONDS = "NODESMITH_TERMINATION_RETRY_SECONDS"
    TERMINATION_RETRY_MAX_SECONDS = "NODESMITH_TERMINATION_RETRY_MAX_SECONDS"
    TERMINATION_REQUEST_STALE_SECONDS = "NODESMITH_TERMINATION_REQUEST_STALE_SECONDS"
    DISRUPTION = "NODESMITH_DISRUPTION"
    DISRUPTION_VALIDATION_DELAY_SECONDS = "NODESMITH_DISRUPTION_VALIDATION_DELAY_SECONDS"
    DISRUPTION_MIN_SAVINGS_USD_PER_HOUR = "NODESMITH_DISRUPTION_MIN_SAVINGS_USD_PER_HOUR"
    DISRUPTION_POLICY = "NODESMITH_DISRUPTION_POLICY"
    RECONCILE_MODE = "NODESMITH_RECONCILE_MODE"
    RECONCILE_FUNCTION = "NODESMITH_RECONCILE_FUNCTION"
    FEATURE_GATES = "NODESMITH_FEATURE_GATES"
    REGISTRATION_TTL_SECONDS = "NODESMITH_REGISTRATION_TTL_SECONDS"


KARPENTER_FEATURE_GATES = (
    "NodeRepair",
    "ReservedCapacity",
    "SpotToSpotConsolidation",
    "NodeOverlay",
    "StaticCapacity",
    "CapacityBuffer",
    "TerminateFirstDrift",
    "TerminateFirstRepair",
    "PodDeletionCostManagement",
)
"""Karpenter's feature gate names (``--feature-gates``, ``[core]:pkg/operator/options/options.go``; v1.15 adds
the last three). Nodesmith reads ``NodeRepair``, ``NodeOverlay`` and ``StaticCapacity`` (default off, alpha in
Karpenter) and ``ReservedCapacity`` (default on, beta in Karpenter); the others are accepted, so a Karpenter
setting can be copied as is, and change nothing."""

_BOOLS = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
          "0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False}  # fmt: skip


def parse_feature_gates(text: str) -> dict[str, bool]:
    """Karpenter's ``--feature-gates`` syntax, ``Name=bool,Name=bool``, into a mapping (empty text: none set).

    Booleans are Go's ``strconv.ParseBool`` spellings (``true``, ``false``, ``1``, ``0``, ``t``, ``F``, ...), as
    Kubernetes' feature gate library reads them. Raises ``ValueError`` naming the first unknown gate (not in
    :data:`KARPENTER_FEATURE_GATES`) or malformed entry.
    """
    gates: dict[str, bool] = {}
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        name, sep, value = (part.strip() for part in entry.partition("="))
        if not sep or value not in _BOOLS:
            raise ValueError(f"{entry!r} is not Name=true|false")
        if name not in KARPENTER_FEATURE_GATES:
            raise ValueError(f"unknown feature gate {name!r} (known: {', '.join(KARPENTER_FEATURE_GATES)})")
        gates[name] = _BOOLS[value]
    return gates


NonEmpty = Annotated[str, Field(min_length=1)]


class Settings(BaseModel):
    """Validated configuration of one Nodesmith Lambda: one field per environment variable (``ENV``).

    Each field's ``description`` is its contract (durations in seconds, prices in USD per hour);
    ``docs/configuration.md`` is rendered from these descriptions, defaults and bounds.
    """

    model_config = ConfigDict(frozen=True)

    cluster_name: Annotated[
        NonEmpty, Field(description="EKS cluster name: launched instances are tagged `kubernetes.io/cluster/<name>`.")
    ]
    cluster_endpoint: Annotated[NonEmpty, Field(description="Kubernetes API server URL of the cluster.")]
    cluster_ca_data: str = Field(
        default="", description="Base64 CA bundle of the API server (empty: the system trust store)."
    )
    kube_auth: Literal["eks", "token", "none"] = Field(
        default="eks",
        description="How the Kubernetes client authenticates: `eks` mints a token as `aws eks get-token` does "
        "(presigned STS GetCallerIdentity), `token` sends `NODESMITH_KUBE_TOKEN` as a bearer token, `none` sends "
        "no credentials (the embedded emulator).",
    )
    kube_token: str = Field(default="", description="Bearer token used when `NODESMITH_KUBE_AUTH` is `token`.")
    termination_queue_url: str = Field(
        default="",
        description="URL of the termination queue, where the interruption function, the disruption pass and the "
        "reconcile pass send termination requests (empty: none are sent).",
    )
    state_table: str = Field(
        default="",
        description="DynamoDB table of the reconcile lease and the shared unavailable-offerings cache "
        "(empty: no lease, and each function keeps its own offering marks).",
    )
    price_table: str = Field(
        default="",
        description='Path of a price table JSON file (`{"prices": {"m5.large": 0.096}}`, USD per hour), '
        "consulted after the AWS Pricing API (empty: the Pricing API, then an estimate).",
    )
    rebalance_action: Literal["ignore", "event", "cordon", "drain"] = Field(
        default="cordon",
        description="What an EC2 rebalance recommendation does: `ignore`, `event` (an Event only, Karpenter's "
        "behaviour), `cordon` (no new pods) or `drain` (the node's termination is requested, as for an "
        "interruption).",
    )
    node_role_arn: str = Field(
        default="", description="IAM role of the nodes: the instance profile's role that launched instances get."
    )
    eviction_workers: int = Field(default=8, ge=1, le=64, description="Evictions in flight per drain round.")
    termination_retry_seconds: float = Field(
        default=2.0,
        ge=0.5,
        le=60,
        description="Seconds before a node that still has pods is drained again; doubles per delivery.",
    )
    termination_retry_max_seconds: float = Field(
        default=10.0, ge=1, le=900, description="Cap of the doubling wait between drain rounds (seconds)."
    )
    termination_request_stale_seconds: float = Field(
        default=300.0,
        ge=60,
        le=3600,
        description="The reconcile pass sends a deleting NodeClaim's termination request again when none was "
        "sent or worked on for this long (seconds).",
    )
    disruption: bool = Field(
        default=True, description="Whether the reconcile pass runs disruption (consolidation, drift, expiration)."
    )
    disruption_validation_delay_seconds: float = Field(
        default=15.0,
        ge=0,
        le=600,
        description="How long a disruption decision waits before it is re-validated and executed (seconds; "
        "Karpenter: 15 s).",
    )
    disruption_min_savings_usd_per_hour: float = Field(
        default=0.0, ge=0, description="The least a consolidation must save (USD per hour)."
    )
    disruption_policy: Literal["karpenter", "nodesmith"] = Field(
        default="nodesmith",
        description="Consolidation policy: `nodesmith` (a set of wasteful nodes out, their pods re-packed at the "
        "lowest cost) or `karpenter` (Karpenter's multi- and single-node consolidation).",
    )
    reconcile_mode: Literal["poll", "watch"] = Field(
        default="poll",
        description="`poll`: one reconcile pass per scheduled invocation (a warm container reads only what changed "
        "since its last pass); `watch`: one invocation watches pending pods for most of its timeout.",
    )
    reconcile_function: str = Field(
        default="",
        description="Name of the reconcile function (the interruption function's setting): a batch that cordoned "
        "nodes wakes it for a provisioning pass (empty: the next scheduled pass provisions).",
    )
    feature_gates: str = Field(
        default="",
        description="Karpenter's `--feature-gates` string, `Name=true,Name=false`; `NodeRepair=true` turns node "
        "repair on, `NodeOverlay=true` applies NodeOverlays, `ReservedCapacity=false` turns capacity reservations off, "
        "`StaticCapacity=true` keeps static NodePools at their `replicas`. "
        "Karpenter's other gate names are accepted and change nothing.",
    )
    registration_ttl_seconds: float = Field(
        default=900.0,
        ge=10,
        le=3600,
        description="Seconds a launched NodeClaim may go without a registered Node before it is deleted and its "
        "instance terminated (Karpenter's registration TTL, 15 minutes).",
    )

    @field_validator("feature_gates")
    @classmethod
    def _known_gates(cls, value: str) -> str:
        parse_feature_gates(value)
        return value

    @property
    def node_repair(self) -> bool:
        """True when the feature gate ``NodeRepair`` is on (Karpenter's default: off)."""
        return parse_feature_gates(self.feature_gates).get("NodeRepair", False)

    @property
    def node_overlay(self) -> bool:
        """True when the feature gate ``NodeOverlay`` is on (Karpenter's default: off)."""
        return parse_feature_gates(self.feature_gates).get("NodeOverlay", False)

    @property
    def reserved_capacity(self) -> bool:
        """True unless the feature gate ``ReservedCapacity`` is off (Karpenter's default: on): EC2NodeClass
        ``capacityReservationSelectorTerms`` are used, other launches keep out of open ODCRs."""
        return parse_feature_gates(self.feature_gates).get("ReservedCapacity", True)

    @property
    def static_capacity(self) -> bool:
        """True when the feature gate ``StaticCapacity`` is on (Karpenter's default: off): static NodePools are kept at
        their ``spec.replicas``; off, they are left alone."""
        return parse_feature_gates(self.feature_gates).get("StaticCapacity", False)


class SettingsError(ValueError):
    """The Lambda's environment is missing or has an invalid variable (named in the message)."""


ENV_BY_FIELD: Mapping[str, str] = MappingProxyType(
    {
        "cluster_name": ENV.CLUSTER_NAME,
        "cluster_endpoint": ENV.CLUSTER_ENDPOINT,
        "cluster_ca_data": ENV.CLUSTER_CA_DATA,
        "kube_auth": ENV.KUBE_AUTH,
        "kube_token": ENV.KUBE_TOKEN,
        "termination_queue_url": ENV.TERMINATION_QUEUE_URL,
        "state_table": ENV.STATE_TABLE,
        "price_table": ENV.PRICE_TABLE,
        "rebalance_action": ENV.REBALANCE_ACTION,
        "node_role_arn": ENV.NODE_ROLE_ARN,
        "eviction_workers": ENV.EVICTION_WORKERS,
        "termination_retry_seconds": ENV.TERMINATION_RETRY_SECONDS,
        "termination_retry_max_seconds": ENV.TERMINATION_RETRY_MAX_SECONDS,
        "termination_request_stale_seconds": ENV.TERMINATION_REQUEST_STALE_SECONDS,
        "disruption": ENV.DISRUPTION,
        "disruption_validation_delay_seconds": ENV.DISRUPTION_VALIDATION_DELAY_SECONDS,
        "disruption_min_savings_usd_per_hour": ENV.DISRUPTION_MIN_SAVINGS_USD_PER_HOUR,
        "disruption_policy": ENV.DISRUPTION_POLICY,
        "reconcile_mode": ENV.RECONCILE_MODE,
        "reconcile_function": ENV.RECONCILE_FUNCTION,
        "feature_gates": ENV.FEATURE_GATES,
        "registration_ttl_seconds": ENV.REGISTRATION_TTL_SECONDS,
    }
)
"""The environment variable of each :class:`Settings` field."""


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Build :class:`Settings` from ``environ`` (default ``os.environ``).

    Raises
    ------
    SettingsError
        Naming the environment variable that is missing or invalid.
    """
    env = os.environ if environ is None else environ
    raw = {field: env[var] for field, var in ENV_BY_FIELD.items() if var in env and env[var] != ""}
    try:
        return Settings.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            field = str(err["loc"][0]) if err["loc"] else "?"
            problems.append(f"{ENV_BY_FIELD.get(field, field)}: {err['msg']}")
        raise SettingsError("invalid Nodesmith environment: " + "; ".join(problems)) from exc
