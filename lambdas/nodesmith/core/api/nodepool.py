"""``karpenter.sh/v1`` NodePool, with Karpenter's defaults and validation.

Source: ``[core]:pkg/apis/v1/nodepool.go``, ``nodepool_validation.go``, ``nodeclaim_validation.go``
and the generated CRD ``[aws]:pkg/apis/crds/karpenter.sh_nodepools.yaml`` (v1.14.1): defaults
``expireAfter: 720h``, ``consolidationPolicy: WhenEmptyOrUnderutilized``, ``consolidateAfter: 0s``,
``budgets: [{nodes: 10%}]``; ``weight`` 1..100; at most 100 requirements and 50 budgets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Final, Literal

from pydantic import Field, StringConstraints, field_validator, model_validator

from nodesmith.core.api.common import (
    LABEL_VALUE_RE,
    NODEPOOL_LABEL_KEY,
    QUALIFIED_NAME_RE,
    Condition,
    Duration,
    NamedObject,
    NillableDuration,
    NodeClassReference,
    NodeSelectorRequirementWithMinValues,
    ObjectMeta,
    Quantity,
    SpecModel,
    StatusModel,
    Taint,
    is_restricted_label,
    omit_empty,
    parse_duration,
)
from nodesmith.core.resources import parse_quantity

if TYPE_CHECKING:
    from nodesmith.core import model as core_model

__all__ = [
    "Budget",
    "Disruption",
    "NodeClaimTemplate",
    "NodeClaimTemplateMetadata",
    "NodeClaimTemplateSpec",
    "NodeClassReference",
    "NodePool",
    "NodePoolSpec",
    "NodePoolStatus",
    "check_nodepool_update",
]

API_VERSION: Final = "karpenter.sh/v1"
KIND: Final = "NodePool"


class NodeClaimTemplateMetadata(SpecModel):
    """Labels and annotations every NodeClaim (and so its Node) of the NodePool gets.

    Labels must be qualified names with valid label values, at most 100; ``karpenter.sh/nodepool``,
    ``kubernetes.io/hostname`` and non-well-known keys of the ``karpenter.sh`` /
    ``karpenter.k8s.aws`` domains are refused (``validateLabels`` in ``nodepool_validation.go``).
    """

    labels: dict[str, str] = Field(default_factory=dict, exclude_if=omit_empty, max_length=100)
    annotations: dict[str, str] = Field(default_factory=dict, exclude_if=omit_empty)

    @field_validator("labels")
    @classmethod
    def _labels_allowed(cls, labels: dict[str, str]) -> dict[str, str]:
        for key, value in labels.items():
            if key == NODEPOOL_LABEL_KEY:
                raise ValueError(f'label "{NODEPOOL_LABEL_KEY}" is restricted')
            if len(key) > 316 or not QUALIFIED_NAME_RE.match(key):
                raise ValueError(f"label key {key!r} is not a qualified name")
            if len(value) > 63 or not LABEL_VALUE_RE.match(value):
                raise ValueError(f"label {key}: value {value!r} is not a valid label value")
            reason = is_restricted_label(key)
            if reason:
                raise ValueError(reason)
        return labels


class NodeClaimTemplateSpec(SpecModel):
    """``spec.template.spec``: requirements, taints, startup taints, node class, expiry, grace period.

    ``expire_after`` defaults to ``"720h"`` (``"Never"`` disables expiry);
    ``termination_grace_period`` has no default (wait for pods forever). A taint key/effect pair
    may appear only once across ``taints`` and ``startupTaints``. ``karpenter.sh/nodepool`` may not
    be a requirement key.
    """

    requirements: list[NodeSelectorRequirementWithMinValues] = Field(max_length=100)
    taints: list[Taint] = Field(default_factory=list, exclude_if=omit_empty)
    startup_taints: list[Taint] = Field(default_factory=list, exclude_if=omit_empty)
    node_class_ref: NodeClassReference
    expire_after: NillableDuration = "720h"
    termination_grace_period: Duration | None = None

    @field_validator("requirements")
    @classmethod
    def _no_nodepool_requirement(
        cls, requirements: list[NodeSelectorRequirementWithMinValues]
    ) -> list[NodeSelectorRequirementWithMinValues]:
        for index, req in enumerate(requirements):
            if req.key == NODEPOOL_LABEL_KEY:
                raise ValueError(f'requirements[{index}].key: label "{NODEPOOL_LABEL_KEY}" is restricted')
        return requirements

    @model_validator(mode="after")
    def _unique_taints(self) -> NodeClaimTemplateSpec:
        seen: set[tuple[str, str]] = set()
        for field_name, taints in (("taints", self.taints), ("startupTaints", self.startup_taints)):
            for taint in taints:
                pair = (taint.key, taint.effect)
                if pair in seen:
                    raise ValueError(f"{field_name}: duplicate taint key/effect pair {taint.key}:{taint.effect}")
                seen.add(pair)
        return self

    @field_validator("taints", "startup_taints", "requirements", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return [] if value is None else value


class NodeClaimTemplate(SpecModel):
    """``spec.template``: metadata and spec of the NodeClaims this NodePool creates."""

    metadata: NodeClaimTemplateMetadata = Field(default_factory=NodeClaimTemplateMetadata)
    spec: NodeClaimTemplateSpec


DisruptionReason = Literal["Underutilized", "Empty", "Drifted", "Unhealthy"]


class Budget(SpecModel):
    """A disruption budget: at most ``nodes`` (count or percent) disrupted at once.

    ``schedule`` (cron, UTC, or ``@daily``-style) and ``duration`` (minutes/hours only) go
    together; ``reasons`` limits the budget to some disruption reasons (omit = all).
    """

    nodes: Annotated[str, StringConstraints(pattern=r"^((100|[0-9]{1,2})%|[0-9]+)$")] = "10%"
    schedule: (
        Annotated[
            str,
            StringConstraints(
                pattern=r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly))|((.+)\s(.+)\s(.+)\s(.+)\s(.+))$"
            ),
        ]
        | None
    ) = None
    duration: Annotated[str, StringConstraints(pattern=r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$")] | None = None
    reasons: list[DisruptionReason] | None = Field(default=None, max_length=50)

    @field_validator("nodes", mode="before")
    @classmethod
    def _int_nodes(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @model_validator(mode="after")
    def _schedule_with_duration(self) -> Budget:
        if (self.schedule is None) != (self.duration is None):
            raise ValueError("'schedule' must be set with 'duration'")
        return self

    def duration_seconds(self) -> float | None:
        """``duration`` in seconds, or None when the budget has no schedule (always active)."""
        return parse_duration(self.duration) if self.duration else None


def _default_budgets() -> list[Budget]:
    return [Budget(nodes="10%")]


class Disruption(SpecModel):
    """``spec.disruption``: consolidation policy, ``consolidateAfter`` and budgets."""

    consolidation_policy: Literal["WhenEmptyOrUnderutilized", "WhenEmpty", "Balanced"] = "WhenEmptyOrUnderutilized"
    consolidate_after: NillableDuration = "0s"
    budgets: list[Budget] = Field(default_factory=_default_budgets, max_length=50)

    def consolidate_after_seconds(self) -> float | None:
        """``consolidateAfter`` in seconds; None for ``Never`` (consolidation disabled)."""
        return parse_duration(self.consolidate_after)


class NodePoolSpec(SpecModel):
    """``NodePool.spec``.

    ``limits`` maps resource names to quantity strings (YAML numbers are turned into strings);
    ``weight`` 1..100 (None means 0, tried last). ``replicas`` (>= 0) makes the NodePool static
    (Karpenter's alpha ``StaticCapacity``, :mod:`nodesmith.core.disruption.static`): it then allows no
    ``weight`` and no limit but ``limits.nodes`` (the CEL rules of ``[core]:pkg/apis/v1/nodepool.go``);
    ``consolidationPolicy`` and ``consolidateAfter`` are accepted and ignored. Whether ``replicas`` may
    be added or removed is an update rule: :func:`check_nodepool_update`.
    """

    template: NodeClaimTemplate
    disruption: Disruption = Field(default_factory=Disruption)
    limits: dict[str, Quantity] | None = None
    weight: int | None = Field(default=None, ge=1, le=100)
    replicas: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _static_nodepool(self) -> NodePoolSpec:
        if self.replicas is not None:
            if self.limits and set(self.limits) != {"nodes"}:
                raise ValueError("only 'limits.nodes' is supported on static NodePools")
            if self.weight is not None:
                raise ValueError("'weight' is not supported on static NodePools")
        return self


def check_nodepool_update(old: NodePool, new: NodePool) -> None:
    """Karpenter's update rule ``has(self.replicas) == has(oldSelf.replicas)``: a NodePool never switches
    between static and dynamic. Raises ``ValueError`` naming ``spec.replicas`` when ``new`` adds or removes it
    (changing its value, 0 included, is allowed: that is a scale)."""
    if (old.spec.replicas is None) != (new.spec.replicas is None):
        verb = "added to" if old.spec.replicas is None else "removed from"
        raise ValueError(
            f'NodePool "{new.name}": spec.replicas cannot be {verb} an existing NodePool '
            "(a NodePool is static or dynamic for its whole life; create a new NodePool instead)"
        )


class NodePoolStatus(StatusModel):
    """``NodePool.status``: resources in use (quantity strings), node count, conditions."""

    resources: dict[str, str] = Field(default_factory=dict, exclude_if=omit_empty)
    nodes: int | None = None
    node_class_observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list, exclude_if=omit_empty)


class NodePool(NamedObject):
    """A ``karpenter.sh/v1`` NodePool.

    ``model_validate(manifest_dict)`` applies Karpenter's defaults and validation and raises
    ``pydantic.ValidationError`` (a ``ValueError``) naming the field path; dump with
    ``model_dump(by_alias=True, exclude_none=True)`` for the API server.
    """

    api_version: Literal["karpenter.sh/v1"] = API_VERSION
    kind: Literal["NodePool"] = KIND
    metadata: ObjectMeta
    spec: NodePoolSpec
    status: NodePoolStatus | None = None

    def requirements_core(self) -> tuple[core_model.NodeSelectorRequirement, ...]:
        """The template requirements as core types (deprecated keys normalized, order kept)."""
        return tuple(r.to_core() for r in self.spec.template.spec.requirements)

    def taints_core(self) -> tuple[core_model.Taint, ...]:
        """``spec.template.spec.taints`` as core taints."""
        return tuple(t.to_core() for t in self.spec.template.spec.taints)

    def startup_taints_core(self) -> tuple[core_model.Taint, ...]:
        """``spec.template.spec.startupTaints`` as core taints (ignored for provisioning decisions)."""
        return tuple(t.to_core() for t in self.spec.template.spec.startup_taints)

    def limits_core(self) -> dict[str, int]:
        """``spec.limits`` parsed: cpu in millicores, memory/storage in bytes, ``nodes`` and others as counts.

        Empty when the NodePool has no limits.
        """
        if not self.spec.limits:
            return {}
        return {name: parse_quantity(value, resource=name) for name, value in self.spec.limits.items()}

    def expire_after_seconds(self) -> float | None:
        """``expireAfter`` in seconds; None for ``Never``."""
        return parse_duration(self.spec.template.spec.expire_after)

    def termination_grace_period_seconds(self) -> float | None:
        """``terminationGracePeriod`` in seconds; None when unset (wait forever)."""
        tgp = self.spec.template.spec.termination_grace_period
        return parse_duration(tgp) if tgp else None

    @property
    def weight_or_zero(self) -> int:
        """``spec.weight``, 0 when unset (Karpenter orders NodePools by weight, highest first)."""
        return self.spec.weight or 0
