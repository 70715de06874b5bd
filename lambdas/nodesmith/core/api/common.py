"""Pieces shared by the Karpenter CRD models: base model, ObjectMeta, Taint, requirements, conditions.

Python attribute names are the snake_case of the Kubernetes JSON names and serialise back to the
JSON (camelCase) names, so ``model_dump(by_alias=True, exclude_none=True)`` yields a manifest the
API server accepts. Empty lists and maps are left out of dumps, like Go's ``omitempty``.

Sources: ``k8s.io/api/core/v1`` (Taint), ``k8s.io/apimachinery`` ``metav1.ObjectMeta`` and
``metav1.Condition``, Karpenter ``[core]:pkg/apis/v1/nodeclaim.go``
(``NodeSelectorRequirementWithMinValues``), ``[core]:pkg/apis/v1/labels.go`` (restricted labels),
the generated CRDs ``[aws]:pkg/apis/crds/karpenter.sh_nodepools.yaml`` (patterns, CEL rules) and
Go's ``time.ParseDuration``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from nodesmith.core import model as core_model
from nodesmith.core.durations import parse_go_duration
from nodesmith.core.resources import QuantityError, parse_quantity

__all__ = [
    "AWS_WELL_KNOWN_LABELS",
    "LABEL_VALUE_RE",
    "NODEPOOL_LABEL_KEY",
    "NORMALIZED_LABELS",
    "QUALIFIED_NAME_RE",
    "Condition",
    "Duration",
    "KubeModel",
    "NamedObject",
    "NillableDuration",
    "NodeClassReference",
    "NodeSelectorRequirementWithMinValues",
    "ObjectMeta",
    "OwnerReference",
    "Quantity",
    "ResourceList",
    "SpecModel",
    "StatusModel",
    "Taint",
    "format_loc",
    "is_restricted_label",
    "omit_empty",
    "parse_duration",
]

NODEPOOL_LABEL_KEY = "karpenter.sh/nodepool"
CAPACITY_TYPE_LABEL_KEY = "karpenter.sh/capacity-type"
HOSTNAME_LABEL_KEY = "kubernetes.io/hostname"

# [core]:pkg/apis/v1/labels.go WellKnownLabels.
CORE_WELL_KNOWN_LABELS = frozenset(
    {
        NODEPOOL_LABEL_KEY,
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "node.kubernetes.io/instance-type",
        "kubernetes.io/arch",
        "kubernetes.io/os",
        CAPACITY_TYPE_LABEL_KEY,
        "node.kubernetes.io/windows-build",
    }
)

# [aws]:pkg/apis/v1/labels.go init() and the CEL allow-list of the karpenter.k8s.aws domain in
# [aws]:pkg/apis/crds/karpenter.sh_nodepools.yaml.
AWS_WELL_KNOWN_LABELS = frozenset(
    {
        "karpenter.k8s.aws/instance-tenancy",
        "karpenter.k8s.aws/capacity-reservation-type",
        "karpenter.k8s.aws/capacity-reservation-id",
        "karpenter.k8s.aws/capacity-reservation-interruptible",
        "karpenter.k8s.aws/ec2nodeclass",
        "karpenter.k8s.aws/instance-encryption-in-transit-supported",
        "karpenter.k8s.aws/nitro-sandbox",
        "karpenter.k8s.aws/instance-category",
        "karpenter.k8s.aws/instance-hypervisor",
        "karpenter.k8s.aws/instance-family",
        "karpenter.k8s.aws/instance-generation",
        "karpenter.k8s.aws/instance-local-nvme",
        "karpenter.k8s.aws/instance-size",
        "karpenter.k8s.aws/instance-cpu",
        "karpenter.k8s.aws/instance-cpu-manufacturer",
        "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz",
        "karpenter.k8s.aws/instance-memory",
        "karpenter.k8s.aws/instance-ebs-bandwidth",
        "karpenter.k8s.aws/instance-network-bandwidth",
        "karpenter.k8s.aws/instance-gpu-name",
        "karpenter.k8s.aws/instance-gpu-manufacturer",
        "karpenter.k8s.aws/instance-gpu-count",
        "karpenter.k8s.aws/instance-gpu-memory",
        "karpenter.k8s.aws/instance-accelerator-name",
        "karpenter.k8s.aws/instance-accelerator-manufacturer",
        "karpenter.k8s.aws/instance-accelerator-count",
        "karpenter.k8s.aws/instance-capability-flex",
        "karpenter.k8s.aws/placement-group-id",
        "karpenter.k8s.aws/placement-group-partition",
        "topology.k8s.aws/zone-id",
    }
)

WELL_KNOWN_LABELS = CORE_WELL_KNOWN_LABELS | AWS_WELL_KNOWN_LABELS
RESTRICTED_LABEL_DOMAINS = ("karpenter.sh", "karpenter.k8s.aws")

# [core]:pkg/apis/v1/labels.go NormalizedLabels: deprecated keys and their stable names.
NORMALIZED_LABELS = {
    "failure-domain.beta.kubernetes.io/zone": "topology.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region": "topology.kubernetes.io/region",
    "beta.kubernetes.io/arch": "kubernetes.io/arch",
    "beta.kubernetes.io/os": "kubernetes.io/os",
    "beta.kubernetes.io/instance-type": "node.kubernetes.io/instance-type",
}

# Kubernetes qualified name (label key) and label value syntax, as in the CRD patterns.
QUALIFIED_NAME_RE = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$"
)
LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

_NON_NEGATIVE_INT = re.compile(r"^[0-9]+$")


def parse_duration(value: str) -> float | None:
    """Parse a Go duration (``time.ParseDuration``) into seconds; ``"Never"`` gives None.

    Accepts sequences of decimal numbers with units ``ns us µs ms s m h`` (``"720h"`` -> 2592000.0,
    ``"1h30m"`` -> 5400.0, ``"1.5s"`` -> 1.5), an optional leading sign, and the bare ``"0"``.

    Raises
    ------
    ValueError
        If ``value`` is not a Go duration.
    """
    text = value.strip()
    if text == "Never":
        return None
    try:
        return parse_go_duration(text)
    except ValueError:
        raise ValueError(f"{value!r} is not a duration (expected e.g. 720h, 1h30m, 30s or Never)") from None


def format_loc(loc: tuple[int | str, ...]) -> str:
    """Render a pydantic error location as a field path: ``("spec", "budgets", 0, "nodes")`` ->
    ``spec.budgets[0].nodes``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def is_restricted_label(key: str) -> str | None:
    """Why Karpenter refuses ``key`` as a NodePool label or requirement key, or None if allowed.

    Mirrors ``IsRestrictedLabel`` (``[core]:pkg/apis/v1/labels.go``) with the AWS provider's
    additions: well-known labels are allowed; any other key in the ``karpenter.sh`` or
    ``karpenter.k8s.aws`` domains (or their subdomains) is restricted; ``kubernetes.io/hostname``
    is restricted. (``karpenter.sh/nodepool`` is well known but forbidden in NodePool labels and
    requirements by separate rules.)
    """
    if key in WELL_KNOWN_LABELS:
        return None
    domain = key.split("/", 1)[0] if "/" in key else ""
    for restricted in RESTRICTED_LABEL_DOMAINS:
        if domain == restricted or domain.endswith("." + restricted):
            return f'label domain "{restricted}" is restricted (key {key!r} is not a well-known label)'
    if key == HOSTNAME_LABEL_KEY:
        return f'label "{HOSTNAME_LABEL_KEY}" is restricted'
    return None


def omit_empty(value: Any) -> bool:
    """``exclude_if`` predicate: leave empty lists/maps out of dumps (Go ``omitempty``)."""
    return value is None or (isinstance(value, list | dict | tuple) and len(value) == 0)


def _to_str(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return str(value)
    return value


def _check_quantity(value: str) -> str:
    try:
        parse_quantity(value)
    except QuantityError as exc:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 500m, 2, 1Gi)") from exc
    return value


Quantity = Annotated[str, BeforeValidator(_to_str), AfterValidator(_check_quantity)]
"""A Kubernetes quantity kept as written (``"500m"``, ``"1Gi"``; YAML numbers become strings)."""

ResourceList = dict[str, Quantity]
"""A Kubernetes ``ResourceList``: resource name to quantity string."""

Duration = Annotated[str, StringConstraints(pattern=r"^([0-9]+(s|m|h))+$")]
"""A Karpenter duration such as ``"30s"``, ``"1h30m"`` (CRD pattern ``^([0-9]+(s|m|h))+$``)."""

NillableDuration = Annotated[str, StringConstraints(pattern=r"^(([0-9]+(s|m|h))+|Never)$")]
"""A Karpenter duration or ``"Never"`` (CRD pattern ``^(([0-9]+(s|m|h))+|Never)$``)."""


class KubeModel(BaseModel):
    """Base of every CRD model: snake_case attributes, camelCase JSON, unknown fields rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_default=False,
    )


class SpecModel(KubeModel):
    """Base of ``spec`` parts: structural like Karpenter's CRDs, so a typo (``requirments``) is an error."""


class StatusModel(KubeModel):
    """Base of ``status`` parts: written by controllers, so unknown fields are ignored, not errors."""

    model_config = ConfigDict(extra="ignore")


class OwnerReference(StatusModel):
    """``metav1.OwnerReference``: the owning object (``controller: true`` marks the managing owner)."""

    api_version: str = ""
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(StatusModel):
    """The subset of ``metav1.ObjectMeta`` Nodesmith uses. Other server-set fields are ignored.

    Timestamps are kept as RFC 3339 strings as the API server writes them.
    """

    name: str = ""
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict, exclude_if=omit_empty)
    annotations: dict[str, str] = Field(default_factory=dict, exclude_if=omit_empty)
    uid: str | None = None
    resource_version: str | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    finalizers: list[str] = Field(default_factory=list, exclude_if=omit_empty)
    owner_references: list[OwnerReference] = Field(default_factory=list, exclude_if=omit_empty)
    generation: int | None = None

    @field_validator("labels", "annotations", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value


class NamedObject(KubeModel):
    """Base of a cluster-scoped CRD model whose ``metadata`` field (declared by the subclass, so its fields keep
    Kubernetes' order: apiVersion, kind, metadata, spec, status) must carry a name, as the API server requires;
    :attr:`name` is ``metadata.name``. A nameless object raises ``pydantic.ValidationError`` at ``metadata``."""

    if TYPE_CHECKING:
        metadata: ObjectMeta

    @field_validator("metadata", check_fields=False)
    @classmethod
    def _named(cls, metadata: ObjectMeta) -> ObjectMeta:
        if not metadata.name:
            raise ValueError("'name' is required")
        return metadata

    @property
    def name(self) -> str:
        """``metadata.name``."""
        return self.metadata.name


LabelKey = Annotated[str, StringConstraints(max_length=316, pattern=QUALIFIED_NAME_RE.pattern)]
LabelValue = Annotated[str, StringConstraints(max_length=63, pattern=LABEL_VALUE_RE.pattern)]


class Taint(SpecModel):
    """A node taint (``core/v1 Taint``); effect NoSchedule, PreferNoSchedule or NoExecute."""

    key: Annotated[str, StringConstraints(min_length=1, pattern=QUALIFIED_NAME_RE.pattern)]
    value: Annotated[str, StringConstraints(pattern=QUALIFIED_NAME_RE.pattern)] | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
    time_added: str | None = None

    def to_core(self) -> core_model.Taint:
        """This taint as a :class:`nodesmith.core.model.Taint`."""
        return core_model.Taint(key=self.key, effect=self.effect, value=self.value or "")


class NodeClassReference(SpecModel):
    """Reference to the provider node class (``{group: karpenter.k8s.aws, kind: EC2NodeClass, name}``).

    All three fields are required and non-empty; ``group`` contains no ``/``.
    """

    group: Annotated[str, StringConstraints(min_length=1, pattern=r"^[^/]*$")]
    kind: Annotated[str, StringConstraints(min_length=1)]
    name: Annotated[str, StringConstraints(min_length=1)]


Operator = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte"]


class NodeSelectorRequirementWithMinValues(SpecModel):
    """A NodePool/NodeClaim requirement: ``key``, ``operator``, ``values`` and optional ``minValues``.

    Validation follows the CRD and ``ValidateRequirement`` (``[core]:pkg/apis/v1/nodeclaim_validation.go``):
    ``In`` needs at least one value (and at least ``minValues`` of them); ``Gt``/``Lt``/``Gte``/``Lte``
    take exactly one non-negative integer; ``minValues`` is 1..50; values are label values;
    restricted keys are refused (see :func:`is_restricted_label`); ``karpenter.sh/capacity-type In``
    must name at least one of spot, on-demand, reserved.
    """

    key: LabelKey
    operator: Operator
    values: list[LabelValue] = Field(default_factory=list, exclude_if=omit_empty)
    min_values: int | None = Field(default=None, ge=1, le=50)

    @field_validator("key")
    @classmethod
    def _key_not_restricted(cls, key: str) -> str:
        reason = is_restricted_label(NORMALIZED_LABELS.get(key, key))
        if reason:
            raise ValueError(reason)
        return key

    @field_validator("values", mode="before")
    @classmethod
    def _values_none_is_empty(cls, value: Any) -> Any:
        return [] if value is None else value

    @model_validator(mode="after")
    def _operator_values(self) -> NodeSelectorRequirementWithMinValues:
        op, values = self.operator, self.values
        if op == "In" and not values:
            raise ValueError(f"values: requirement {self.key} with operator 'In' must have a value defined")
        if op in ("Gt", "Lt", "Gte", "Lte") and (len(values) != 1 or not values[0].isdigit()):
            raise ValueError(
                f"values: requirement {self.key} with operator {op!r} must have a single non-negative integer value"
            )
        if op == "In" and self.min_values is not None and len(values) < self.min_values:
            raise ValueError(
                f"values: requirement {self.key} with 'minValues' {self.min_values} must have at least that many values"
            )
        if self.key == CAPACITY_TYPE_LABEL_KEY and op == "In":
            known = [v for v in values if v in ("spot", "on-demand", "reserved")]
            if not known:
                raise ValueError(f"values: {values} for {self.key}: expected one of spot, on-demand, reserved")
            if self.min_values is not None and len(known) < self.min_values:
                raise ValueError(f"values: not enough valid values for {self.key} to meet minValues {self.min_values}")
        return self

    def to_core(self) -> core_model.NodeSelectorRequirement:
        """This requirement as a core :class:`~nodesmith.core.model.NodeSelectorRequirement`.

        Deprecated keys are normalized to their stable names (``beta.kubernetes.io/arch`` ->
        ``kubernetes.io/arch``), as Karpenter does (``NormalizedLabels``).
        """
        return core_model.NodeSelectorRequirement(
            key=NORMALIZED_LABELS.get(self.key, self.key),
            operator=self.operator,
            values=tuple(self.values),
            min_values=self.min_values,
        )


class Condition(StatusModel):
    """A status condition (``metav1.Condition``): ``status`` is "True", "False" or "Unknown".

    ``last_transition_time`` is an RFC 3339 string.
    """

    type: str
    status: Literal["True", "False", "Unknown"] = "Unknown"
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None
    observed_generation: int | None = None
