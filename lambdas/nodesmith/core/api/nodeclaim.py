"""``karpenter.sh/v1`` NodeClaim: one requested node, created by the provisioner, immutable spec.

Source: ``[core]:pkg/apis/v1/nodeclaim.go``, ``nodeclaim_status.go`` and the generated CRD
``[aws]:pkg/apis/crds/karpenter.sh_nodeclaims.yaml`` (v1.14.1). Condition types are those of
``nodeclaim_status.go``: Launched, Registered, Initialized (rolling up into Ready), Consolidatable,
Drifted, Drained, VolumesDetached, InstanceTerminating, ConsistentStateFound, DisruptionReason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Literal

from pydantic import Field

from nodesmith.core.api.common import (
    Condition,
    Duration,
    KubeModel,
    NillableDuration,
    NodeClassReference,
    NodeSelectorRequirementWithMinValues,
    ObjectMeta,
    ResourceList,
    SpecModel,
    StatusModel,
    Taint,
    omit_empty,
    parse_duration,
)
from nodesmith.core.resources import Resources, parse_resource_list

if TYPE_CHECKING:
    from nodesmith.core import model as core_model

__all__ = [
    "CONDITION_CONSOLIDATABLE",
    "CONDITION_DRIFTED",
    "CONDITION_INITIALIZED",
    "CONDITION_LAUNCHED",
    "CONDITION_READY",
    "CONDITION_REGISTERED",
    "NodeClaim",
    "NodeClaimResources",
    "NodeClaimSpec",
    "NodeClaimStatus",
    "same_version",
]

API_VERSION: Final = "karpenter.sh/v1"
KIND: Final = "NodeClaim"

CONDITION_LAUNCHED: Final = "Launched"
CONDITION_REGISTERED: Final = "Registered"
CONDITION_INITIALIZED: Final = "Initialized"
CONDITION_READY: Final = "Ready"
CONDITION_CONSOLIDATABLE: Final = "Consolidatable"
CONDITION_DRIFTED: Final = "Drifted"
CONDITION_DRAINED: Final = "Drained"
CONDITION_VOLUMES_DETACHED: Final = "VolumesDetached"
CONDITION_INSTANCE_TERMINATING: Final = "InstanceTerminating"
CONDITION_DISRUPTION_REASON: Final = "DisruptionReason"

_READY_PARTS = (CONDITION_LAUNCHED, CONDITION_REGISTERED, CONDITION_INITIALIZED)


class NodeClaimResources(SpecModel):
    """``spec.resources``: the requests the NodeClaim was sized for (quantity strings)."""

    requests: ResourceList = Field(default_factory=dict, exclude_if=omit_empty)


class NodeClaimSpec(SpecModel):
    """``NodeClaim.spec`` (immutable once created).

    ``requirements`` (max 100) may include ``karpenter.sh/nodepool`` and
    ``node.kubernetes.io/instance-type In [...]``; ``expire_after`` defaults to ``"720h"``.
    """

    taints: list[Taint] = Field(default_factory=list, exclude_if=omit_empty)
    startup_taints: list[Taint] = Field(default_factory=list, exclude_if=omit_empty)
    requirements: list[NodeSelectorRequirementWithMinValues] = Field(max_length=100)
    resources: NodeClaimResources = Field(default_factory=NodeClaimResources)
    node_class_ref: NodeClassReference
    termination_grace_period: Duration | None = None
    expire_after: NillableDuration = "720h"


class NodeClaimStatus(StatusModel):
    """``NodeClaim.status``, written by the lifecycle controller.

    ``provider_id`` is ``aws:///<zone>/<instance-id>``; ``capacity``/``allocatable`` are quantity
    strings; ``last_pod_event_time`` is an RFC 3339 string.
    """

    node_name: str | None = None
    provider_id: str | None = Field(default=None, alias="providerID")
    image_id: str | None = Field(default=None, alias="imageID")
    capacity: dict[str, str] = Field(default_factory=dict, exclude_if=omit_empty)
    allocatable: dict[str, str] = Field(default_factory=dict, exclude_if=omit_empty)
    conditions: list[Condition] = Field(default_factory=list, exclude_if=omit_empty)
    last_pod_event_time: str | None = None


class NodeClaim(KubeModel):
    """A ``karpenter.sh/v1`` NodeClaim.

    Helpers: :meth:`condition` / :meth:`set_condition` (the Ready roll-up of Launched, Registered
    and Initialized is kept up to date), :meth:`model_dump_k8s` for the API server, and
    ``*_core`` converters to core types.
    """

    api_version: Literal["karpenter.sh/v1"] = API_VERSION
    kind: Literal["NodeClaim"] = KIND
    metadata: ObjectMeta
    spec: NodeClaimSpec
    status: NodeClaimStatus = Field(default_factory=NodeClaimStatus)

    @property
    def name(self) -> str:
        """``metadata.name``."""
        return self.metadata.name

    @property
    def nodepool_name(self) -> str | None:
        """The owning NodePool (label ``karpenter.sh/nodepool``), or None."""
        return self.metadata.labels.get("karpenter.sh/nodepool")

    def condition(self, type_: str) -> Condition | None:
        """The status condition of type ``type_`` (e.g. ``"Launched"``), or None when absent."""
        for cond in self.status.conditions:
            if cond.type == type_:
                return cond
        return None

    def is_true(self, type_: str) -> bool:
        """True when condition ``type_`` exists with status "True"."""
        cond = self.condition(type_)
        return cond is not None and cond.status == "True"

    def set_condition(
        self,
        type_: str,
        status: Literal["True", "False", "Unknown"],
        reason: str,
        message: str,
        now_iso: str,
    ) -> bool:
        """Set condition ``type_``; ``last_transition_time`` becomes ``now_iso`` only when the status changes.

        Setting Launched, Registered or Initialized recomputes ``Ready`` (True when all three are
        True, False when any is False, else Unknown), as the operatorpkg status roll-up does.
        ``now_iso`` is an RFC 3339 timestamp (time is passed in, never read).
        Returns True when anything changed.
        """
        changed = self._put(type_, status, reason, message, now_iso)
        if type_ in _READY_PARTS:
            parts = [self.condition(t) for t in _READY_PARTS]
            statuses = [p.status if p else "Unknown" for p in parts]
            if all(s == "True" for s in statuses):
                ready: Literal["True", "False", "Unknown"] = "True"
                ready_reason = "Ready"
            elif any(s == "False" for s in statuses):
                ready = "False"
                ready_reason = next(t for t, s in zip(_READY_PARTS, statuses, strict=True) if s == "False") + "False"
            else:
                ready = "Unknown"
                ready_reason = "AwaitingReconciliation"
            changed = self._put(CONDITION_READY, ready, ready_reason, "", now_iso) or changed
        return changed

    def _put(
        self, type_: str, status: Literal["True", "False", "Unknown"], reason: str, message: str, now: str
    ) -> bool:
        existing = self.condition(type_)
        if existing is None:
            self.status.conditions.append(
                Condition(
                    type=type_,
                    status=status,
                    reason=reason,
                    message=message,
                    last_transition_time=now,
                    observed_generation=self.metadata.generation,
                )
            )
            return True
        if (existing.status, existing.reason, existing.message) == (status, reason, message):
            return False
        if existing.status != status:
            existing.last_transition_time = now
        existing.status = status
        existing.reason = reason
        existing.message = message
        existing.observed_generation = self.metadata.generation
        return True

    def model_dump_k8s(self) -> dict[str, Any]:
        """The object as the API server wants it: JSON names, no None fields, no empty lists/maps."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")

    def requirements_core(self) -> tuple[core_model.NodeSelectorRequirement, ...]:
        """``spec.requirements`` as core requirements (deprecated keys normalized)."""
        return tuple(r.to_core() for r in self.spec.requirements)

    def taints_core(self) -> tuple[core_model.Taint, ...]:
        """``spec.taints`` as core taints."""
        return tuple(t.to_core() for t in self.spec.taints)

    def startup_taints_core(self) -> tuple[core_model.Taint, ...]:
        """``spec.startupTaints`` as core taints."""
        return tuple(t.to_core() for t in self.spec.startup_taints)

    def requests_core(self) -> Resources:
        """``spec.resources.requests`` parsed (cpu millicores, memory bytes, counts)."""
        return parse_resource_list(self.spec.resources.requests)

    def allocatable_core(self) -> Resources:
        """``status.allocatable`` parsed (cpu millicores, memory bytes, counts)."""
        return parse_resource_list(self.status.allocatable)

    def expire_after_seconds(self) -> float | None:
        """``spec.expireAfter`` in seconds; None for ``Never``."""
        return parse_duration(self.spec.expire_after)


def same_version(a: NodeClaim | None, b: NodeClaim | None) -> bool:
    """Whether ``a`` and ``b`` are one version of one NodeClaim: the same object, or the same ``metadata.uid``
    and a non-empty, equal ``metadata.resourceVersion`` (the API server changes it with every write: Kubernetes
    API concepts, "Resource versions"). Two Nones are the same; one None is not."""
    if a is b:
        return True
    if a is None or b is None or not a.metadata.resource_version:
        return False
    return a.metadata.uid == b.metadata.uid and a.metadata.resource_version == b.metadata.resource_version
