"""An EC2NodeClass's readiness conditions as Karpenter's AWS provider writes them (pure).

Karpenter's ``nodeclass`` controller (``[aws]:pkg/controllers/nodeclass/{subnet,securitygroup,ami,instanceprofile,
capacityreservation}.go``) resolves each part of the class and sets one dependent condition per part
(``[aws]:pkg/apis/v1/ec2nodeclass_status.go``): ``SubnetsReady``, ``SecurityGroupsReady``, ``AMIsReady``,
``InstanceProfileReady`` and, with the ``ReservedCapacity`` gate, ``CapacityReservationsReady``. The root ``Ready``
follows them as ``awslabs/operatorpkg`` ``status.ConditionSet`` computes it: ``True`` (reason ``Ready``) when every
dependent is True, else ``False`` with reason ``UnhealthyDependents`` and a message listing the unhealthy ones
(``SubnetsReady=False, AMIsReady=False``). A True condition's reason is its own type and its message empty; a
condition keeps its ``lastTransitionTime`` while its status does not change, and carries the class's
``metadata.generation`` as ``observedGeneration``.

The adapter that resolves the class against EC2 reports one :class:`Check` per part; :func:`nodeclass_conditions`
turns them into the ``status.conditions`` list (Kubernetes JSON). Times are epoch seconds, passed in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from nodesmith.core.timestamps import to_rfc3339

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nodesmith.core.api.ec2nodeclass import EC2NodeClass

__all__ = [
    "AMIS_READY",
    "CAPACITY_RESERVATIONS_READY",
    "INSTANCE_PROFILE_READY",
    "READY",
    "SECURITY_GROUPS_READY",
    "SUBNETS_READY",
    "Check",
    "conditions_changed",
    "nodeclass_conditions",
]

READY: Final = "Ready"
SUBNETS_READY: Final = "SubnetsReady"
SECURITY_GROUPS_READY: Final = "SecurityGroupsReady"
AMIS_READY: Final = "AMIsReady"
INSTANCE_PROFILE_READY: Final = "InstanceProfileReady"
CAPACITY_RESERVATIONS_READY: Final = "CapacityReservationsReady"

UNHEALTHY_DEPENDENTS: Final = "UnhealthyDependents"
"""The root condition's reason when a dependent is not True (``operatorpkg`` ``recomputeRootCondition``)."""


@dataclass(frozen=True, slots=True)
class Check:
    """The outcome of resolving one part of an EC2NodeClass: the dependent condition ``type`` (``SubnetsReady``,
    ...), ``ok``, and when not ok Karpenter's ``reason`` (``SubnetsNotFound``, ``AMINotFound``, ...) and a
    ``message`` naming what did not resolve."""

    type: str
    ok: bool
    reason: str = ""
    message: str = ""


def _condition(
    check: Check, *, previous: dict[str, dict[str, Any]], now: float, generation: int | None
) -> dict[str, Any]:
    status = "True" if check.ok else "False"
    before = previous.get(check.type) or {}
    since = before.get("lastTransitionTime") if before.get("status") == status else None
    condition: dict[str, Any] = {
        "type": check.type,
        "status": status,
        "reason": check.type if check.ok else (check.reason or check.type),
        "message": "" if check.ok else check.message,
        "lastTransitionTime": since or to_rfc3339(now),
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    return condition


def nodeclass_conditions(*, nodeclass: EC2NodeClass, checks: Sequence[Check], now: float) -> list[dict[str, Any]]:
    """``status.conditions`` (Kubernetes JSON, ``metav1.Condition`` shape) of ``nodeclass`` for ``checks`` at
    ``now`` (epoch seconds): one condition per check, in the checks' order, then ``Ready``.

    ``Ready`` is True when every check is ok, else False with reason ``UnhealthyDependents`` and the message
    ``"<type>=False, ..."`` over the failing checks in their order. Raises ``ValueError`` when two checks share a
    type or a check is named ``Ready``.
    """
    types = [c.type for c in checks]
    if len(set(types)) != len(types) or READY in types:
        raise ValueError(f"EC2NodeClass {nodeclass.name}: condition checks must have distinct types, not {types}")
    status = nodeclass.status
    previous = {c.type: c.model_dump(by_alias=True, exclude_none=True) for c in (status.conditions if status else [])}
    generation = nodeclass.metadata.generation
    out = [_condition(c, previous=previous, now=now, generation=generation) for c in checks]
    failing = [c.type for c in checks if not c.ok]
    root = Check(
        type=READY,
        ok=not failing,
        reason=UNHEALTHY_DEPENDENTS,
        message=", ".join(f"{t}=False" for t in failing),
    )
    out.append(_condition(root, previous=previous, now=now, generation=generation))
    return out


def conditions_changed(nodeclass: EC2NodeClass, conditions: Sequence[dict[str, Any]]) -> bool:
    """True when ``conditions`` (from :func:`nodeclass_conditions`) differ from ``nodeclass``'s
    ``status.conditions``; False means writing them would change nothing."""
    status = nodeclass.status
    current = [c.model_dump(by_alias=True, exclude_none=True) for c in (status.conditions if status else [])]
    return current != list(conditions)
