"""``karpenter.sh/v1alpha1`` NodeOverlay, with Karpenter's validation (alpha, feature gate ``NodeOverlay``).

A NodeOverlay changes what scheduling simulations believe about the instance types it selects: the
price of their offerings (``price`` replaces it, ``priceAdjustment`` shifts it) and their capacity
(``capacity`` adds extended resources). The rules of applying them live in :mod:`nodesmith.core.overlay`.

Sources: ``[core]:pkg/apis/v1alpha1/nodeoverlay.go`` (schema, patterns, CEL rules, ``OrderByWeight``),
``nodeoverlay_validation.go`` (``RuntimeValidate``: restricted label keys, label syntax) and
``nodeoverlay_status.go`` (the ``ValidationSucceeded`` condition):

* ``requirements``: at most 100; operators In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte; In and
  NotIn need at least one value; Gt/Lt/Gte/Lte exactly one non-negative integer; keys are label keys.
  Keys that are restricted (not well-known ``karpenter.sh`` / ``karpenter.k8s.aws`` keys,
  ``kubernetes.io/hostname``) pass the schema and fail runtime validation (:meth:`NodeOverlay.runtime_errors`),
  as in Karpenter; well-known labels, ``karpenter.sh/nodepool`` and custom labels pass both.
* ``price``: ``^\\d+(\\.\\d+)?$`` (USD per hour for the EC2 catalogue, unitless in Karpenter).
* ``priceAdjustment``: a signed absolute value (``+0.1``, ``-0.05``), ``+N%`` or ``-N%`` with at most two
  integer digits, or ``-100%``.
* ``price`` and ``priceAdjustment`` are mutually exclusive ("cannot set both 'price' and 'priceAdjustment'").
* ``capacity``: extended resources only; ``cpu``, ``memory``, ``ephemeral-storage`` and ``pods`` are refused
  ("invalid resource restricted").
* ``weight``: 1..10000, unset counts as 0.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal

from pydantic import Field, StringConstraints, field_validator, model_validator

from nodesmith.core import model as core_model
from nodesmith.core.api.common import (
    LABEL_VALUE_RE,
    NORMALIZED_LABELS,
    QUALIFIED_NAME_RE,
    Condition,
    NamedObject,
    ObjectMeta,
    Quantity,
    SpecModel,
    StatusModel,
    is_restricted_label,
    omit_empty,
)

__all__ = [
    "API_VERSION",
    "CONDITION_VALIDATION_SUCCEEDED",
    "KIND",
    "PRICE_ADJUSTMENT_RE",
    "PRICE_RE",
    "RESTRICTED_CAPACITY",
    "NodeOverlay",
    "NodeOverlayRequirement",
    "NodeOverlaySpec",
    "NodeOverlayStatus",
]

API_VERSION: Final = "karpenter.sh/v1alpha1"
KIND: Final = "NodeOverlay"
CONDITION_VALIDATION_SUCCEEDED: Final = "ValidationSucceeded"
"""The NodeOverlay's only condition (it feeds the root ``Ready``), ``[core]:nodeoverlay_status.go``."""

PRICE_RE: Final = re.compile(r"^\d+(\.\d+)?$")
"""The CRD pattern of ``spec.price``: an unsigned decimal."""

PRICE_ADJUSTMENT_RE: Final = re.compile(r"^(([+-](\d*\.?\d+))|(\+\d*\.?\d+%)|(-\d{1,2}(\.\d+)?%)|(-100%))$")
"""The CRD pattern of ``spec.priceAdjustment``: ``+0.5``, ``-1.2``, ``+N%``, ``-N%`` (N < 100) or ``-100%``."""

RESTRICTED_CAPACITY: Final = frozenset({"cpu", "memory", "ephemeral-storage", "pods"})
"""Resources a NodeOverlay may not set (CEL on ``spec.capacity``: "invalid resource restricted")."""

_LabelKey = Annotated[str, StringConstraints(max_length=316, pattern=QUALIFIED_NAME_RE.pattern)]
_LabelValue = Annotated[str, StringConstraints(max_length=63, pattern=LABEL_VALUE_RE.pattern)]


class NodeOverlayRequirement(SpecModel):
    """One ``spec.requirements`` entry: ``key``, ``operator`` and ``values`` (no ``minValues``).

    Raises (through pydantic) ``In``/``NotIn`` without values, ``Gt``/``Lt``/``Gte``/``Lte`` without exactly
    one non-negative integer, and ``Exists``/``DoesNotExist`` with values (the CRD's rules). Restricted keys pass
    the schema, as in Karpenter, and are caught by :meth:`NodeOverlay.runtime_errors`.
    """

    key: _LabelKey
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte"]
    values: list[_LabelValue] = Field(default_factory=list, exclude_if=omit_empty)

    @field_validator("values", mode="before")
    @classmethod
    def _values_none_is_empty(cls, value: Any) -> Any:
        return [] if value is None else value

    @model_validator(mode="after")
    def _operator_values(self) -> NodeOverlayRequirement:
        op, values = self.operator, self.values
        if op in ("In", "NotIn") and not values:
            raise ValueError(f"values: requirements with operator {op!r} must have a value defined ({self.key})")
        if op in ("Gt", "Lt", "Gte", "Lte") and (len(values) != 1 or not values[0].isdigit()):
            raise ValueError(
                f"values: requirements operator {op!r} must have a single positive integer value ({self.key})"
            )
        if op in ("Exists", "DoesNotExist") and values:
            raise ValueError(f"values: requirements with operator {op!r} must have no values ({self.key})")
        return self

    def to_core(self) -> core_model.NodeSelectorRequirement:
        """This requirement as a core :class:`~nodesmith.core.model.NodeSelectorRequirement` (key normalized)."""
        return core_model.NodeSelectorRequirement(
            key=NORMALIZED_LABELS.get(self.key, self.key), operator=self.operator, values=tuple(self.values)
        )


class NodeOverlaySpec(SpecModel):
    """``NodeOverlay.spec`` (rules in the module docstring)."""

    requirements: list[NodeOverlayRequirement] = Field(default_factory=list, max_length=100, exclude_if=omit_empty)
    price: str | None = None
    price_adjustment: str | None = None
    capacity: dict[str, Quantity] = Field(default_factory=dict, exclude_if=omit_empty)
    weight: int | None = Field(default=None, ge=1, le=10000)

    @field_validator("requirements", mode="before")
    @classmethod
    def _requirements_none_is_empty(cls, value: Any) -> Any:
        return [] if value is None else value

    @field_validator("price", "price_adjustment", mode="before")
    @classmethod
    def _number_as_text(cls, value: Any) -> Any:
        # YAML reads ``price: 0.5`` as a float; the CRD field is a string. A negative number keeps its sign
        # (and fails ``price``'s pattern), a positive one gains none (and fails ``priceAdjustment``'s).
        if isinstance(value, int | float) and not isinstance(value, bool):
            return repr(value) if isinstance(value, float) else str(value)
        return value

    @field_validator("price")
    @classmethod
    def _price_pattern(cls, value: str | None) -> str | None:
        if value is not None and not PRICE_RE.match(value):
            raise ValueError(
                f"{value!r} is not a price (an unsigned decimal such as '0.25'; to shift a price use priceAdjustment)"
            )
        return value

    @field_validator("price_adjustment")
    @classmethod
    def _adjustment_pattern(cls, value: str | None) -> str | None:
        if value is not None and not PRICE_ADJUSTMENT_RE.match(value):
            raise ValueError(
                f"{value!r} is not a price adjustment (a signed value or percentage such as '+0.1', '-0.05', "
                "'+25%', '-10%'; a decrease is at most '-100%'; quote it in YAML so the sign is kept)"
            )
        return value

    @field_validator("capacity", mode="before")
    @classmethod
    def _capacity_restricted(cls, value: Any) -> Any:
        if value is None:
            return {}
        if isinstance(value, dict):
            bad = sorted(str(k) for k in value if str(k) in RESTRICTED_CAPACITY)
            if bad:
                raise ValueError(
                    f"invalid resource restricted: {', '.join(bad)} (a NodeOverlay adds extended resources only)"
                )
        return value

    @model_validator(mode="after")
    def _price_xor_adjustment(self) -> NodeOverlaySpec:
        if self.price is not None and self.price_adjustment is not None:
            raise ValueError("cannot set both 'price' and 'priceAdjustment'")
        return self


class NodeOverlayStatus(StatusModel):
    """``NodeOverlay.status``: conditions (``ValidationSucceeded``, ``Ready``)."""

    conditions: list[Condition] = Field(default_factory=list, exclude_if=omit_empty)


class NodeOverlay(NamedObject):
    """A ``karpenter.sh/v1alpha1`` NodeOverlay (cluster-scoped, short name ``overlays``).

    ``model_validate(manifest_dict)`` applies Karpenter's validation and raises ``pydantic.ValidationError``
    (a ``ValueError``) naming the field path.
    """

    api_version: Literal["karpenter.sh/v1alpha1"] = API_VERSION
    kind: Literal["NodeOverlay"] = KIND
    metadata: ObjectMeta
    spec: NodeOverlaySpec
    status: NodeOverlayStatus | None = None

    @property
    def weight_or_zero(self) -> int:
        """``spec.weight``, 0 when unset (Karpenter's ``lo.FromPtr(Spec.Weight)``)."""
        return self.spec.weight or 0

    def runtime_errors(self) -> list[tuple[str, str]]:
        """Karpenter's ``RuntimeValidate`` (``[core]:pkg/apis/v1alpha1/nodeoverlay_validation.go``): what the CRD
        schema lets through but the controller refuses, as ``(field path, reason)`` pairs; empty when valid.
        A requirement on a restricted label key (:func:`~nodesmith.core.api.common.is_restricted_label`: a
        ``karpenter.sh`` / ``karpenter.k8s.aws`` key that is not well known, ``kubernetes.io/hostname``) is one.
        """
        out: list[tuple[str, str]] = []
        for i, req in enumerate(self.spec.requirements):
            reason = is_restricted_label(NORMALIZED_LABELS.get(req.key, req.key))
            if reason:
                out.append((f"spec.requirements[{i}].key", f"invalid value: {reason} in requirements, restricted"))
        return out

    def requirements_core(self) -> tuple[core_model.NodeSelectorRequirement, ...]:
        """``spec.requirements`` as core requirements (deprecated keys normalized, order kept)."""
        return tuple(r.to_core() for r in self.spec.requirements)
