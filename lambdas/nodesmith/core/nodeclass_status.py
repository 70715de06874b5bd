"""An EC2NodeClass's readiness conditions as Karpenter's AWS provider writes them (pure).

Karpenter's ``nodeclass`` controller (``[aws]:pkg/controllers/nodeclass/{subnet,securitygroup,ami,instanceprofile,
capacityreservation}.go``) resolves each part of the class and sets one dependent condition per part
(``[aws]:pkg/apis/v1/ec2nodeclass_status.go``): ``SubnetsReady``, ``SecurityGroupsReady``, ``AMIsReady``,
``InstanceProfileReady``, ``ValidationSucceeded`` (here: the ``kubelet`` settings the AMI family can apply,
``validation.go``) and, with the ``ReservedCapacity`` gate, ``CapacityReservationsReady``. The root ``Ready``
follows them as ``awslabs/operatorpkg`` ``status.ConditionSet`` computes it: ``True`` (reason ``Ready``) when every
dependent is True, else ``False`` with reason ``UnhealthyDependents`` and a message listing the unhealthy ones
(``SubnetsReady=False, AMIsReady=False``). A True condition's reason is its own type and its message empty; a
condition keeps its ``lastTransitionTime`` while its status does not change, and carries the class's
``metadata.generation`` as ``observedGeneration``.

The adapter that resolves the class against EC2 reports one :class:`Check` per part; :func:`nodeclass_conditions`
turns them into the ``status.conditions`` list (Kubernetes JSON). Times are epoch seconds, passed in.

Beside the conditions the same controller writes what each part resolved to (:func:`nodeclass_status`, from a
:class:`ResolvedParts`): ``status.subnets`` (``subnet.go``: every selected subnet, most available IPv4 addresses
first, then by id), ``status.securityGroups`` (``securitygroup.go``: by id), ``status.amis`` (``ami.go`` and
``[aws]:pkg/providers/amifamily``: newest ``CreationDate`` first, then by id; each with the requirements an instance
type must meet to boot it, sorted by key length then key) and ``status.instanceProfile`` (``instanceprofile.go``).
A part that resolved to nothing has its field removed, as Karpenter sets it to nil; a part that could not be told
(an unsupported alias, an instance profile that could not be made) keeps what the status says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from nodesmith.core.timestamps import from_rfc3339, to_rfc3339

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nodesmith.core.api.ec2nodeclass import EC2NodeClass
    from nodesmith.core.nodeclass_parts import Image, SecurityGroup, Subnet

__all__ = [
    "AMIS_READY",
    "CAPACITY_RESERVATIONS_READY",
    "INSTANCE_PROFILE_READY",
    "LABEL_ARCH",
    "LABEL_INSTANCE_ACCELERATOR_COUNT",
    "LABEL_INSTANCE_GPU_COUNT",
    "READY",
    "SECURITY_GROUPS_READY",
    "SUBNETS_READY",
    "VALIDATION_SUCCEEDED",
    "Check",
    "ResolvedParts",
    "ami_requirements",
    "conditions_changed",
    "nodeclass_conditions",
    "nodeclass_status",
    "status_changed",
]

READY: Final = "Ready"
SUBNETS_READY: Final = "SubnetsReady"
SECURITY_GROUPS_READY: Final = "SecurityGroupsReady"
AMIS_READY: Final = "AMIsReady"
INSTANCE_PROFILE_READY: Final = "InstanceProfileReady"
CAPACITY_RESERVATIONS_READY: Final = "CapacityReservationsReady"
VALIDATION_SUCCEEDED: Final = "ValidationSucceeded"

UNHEALTHY_DEPENDENTS: Final = "UnhealthyDependents"
"""The root condition's reason when a dependent is not True (``operatorpkg`` ``recomputeRootCondition``)."""

LABEL_ARCH: Final = "kubernetes.io/arch"
LABEL_INSTANCE_GPU_COUNT: Final = "karpenter.k8s.aws/instance-gpu-count"
LABEL_INSTANCE_ACCELERATOR_COUNT: Final = "karpenter.k8s.aws/instance-accelerator-count"

_VARIANT_REQUIREMENTS: Final[dict[str, tuple[tuple[str, str], ...]]] = {
    "": (),
    "standard": ((LABEL_INSTANCE_ACCELERATOR_COUNT, "DoesNotExist"), (LABEL_INSTANCE_GPU_COUNT, "DoesNotExist")),
    "nvidia": ((LABEL_INSTANCE_GPU_COUNT, "Exists"),),
    "neuron": ((LABEL_INSTANCE_ACCELERATOR_COUNT, "Exists"),),
}
"""Requirements of an EKS AMI variant besides its architecture (``[aws]:pkg/providers/amifamily/types.go``,
``Variant.Requirements``); ``""`` is an AMI the user selected, which only needs its architecture."""


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


@dataclass(frozen=True, slots=True)
class ResolvedParts:
    """What resolving an EC2NodeClass against EC2 found, part by part.

    ``checks`` are the dependent conditions (:class:`Check`). Each other field is what that part resolved to: an
    empty tuple (or ``""`` for ``instance_profile``) when it resolved to nothing, ``None`` when it could not be told
    this time and the status keeps what it says. ``subnets`` holds every selected subnet, not one per zone.
    """

    checks: tuple[Check, ...]
    subnets: tuple[Subnet, ...] | None = None
    security_groups: tuple[SecurityGroup, ...] | None = None
    images: tuple[Image, ...] | None = None
    instance_profile: str | None = None


def ami_requirements(image: Image) -> list[dict[str, Any]]:
    """The ``status.amis[].requirements`` of ``image`` (``corev1.NodeSelectorRequirement`` JSON): its
    ``kubernetes.io/arch`` and, for an EKS variant, the accelerator requirements Karpenter gives it
    (standard: ``instance-accelerator-count`` and ``instance-gpu-count`` DoesNotExist; nvidia: ``instance-gpu-count``
    Exists; neuron: ``instance-accelerator-count`` Exists), sorted by key length then key as ``ami.go`` sorts them.
    Raises ``ValueError`` for a variant Karpenter does not know."""
    extra = _VARIANT_REQUIREMENTS.get(image.variant)
    if extra is None:
        raise ValueError(f"AMI {image.id}: unknown variant {image.variant!r} (standard, nvidia, neuron or none)")
    out: list[dict[str, Any]] = [{"key": LABEL_ARCH, "operator": "In", "values": [image.arch]}]
    out += [{"key": key, "operator": operator} for key, operator in extra]
    return sorted(out, key=lambda r: (len(r["key"]), r["key"]))


def _subnet_json(subnet: Subnet) -> dict[str, Any]:
    out: dict[str, Any] = {"id": subnet.id, "zone": subnet.zone}
    if subnet.zone_id:
        out["zoneID"] = subnet.zone_id
    return out


def _security_group_json(group: SecurityGroup) -> dict[str, Any]:
    return {"id": group.id, "name": group.name} if group.name else {"id": group.id}


def _ami_json(image: Image) -> dict[str, Any]:
    out: dict[str, Any] = {"id": image.id}
    if image.name:
        out["name"] = image.name
    out["requirements"] = ami_requirements(image)
    return out


def _newest_first(image: Image) -> tuple[float, str]:
    created = from_rfc3339(image.creation_date)
    return (-created if created is not None else float("inf"), image.id)


def nodeclass_status(*, nodeclass: EC2NodeClass, resolution: ResolvedParts, now: float) -> dict[str, Any]:
    """The ``status`` merge patch (Kubernetes JSON) of ``nodeclass`` for ``resolution`` at ``now`` (epoch seconds):
    ``conditions`` (:func:`nodeclass_conditions`) and, for each part that could be told, its field in Karpenter's
    order (see the module docstring): ``subnets`` (``[{id, zone, zoneID}]``), ``securityGroups`` (``[{id, name}]``),
    ``amis`` (``[{id, name, requirements}]``) and ``instanceProfile`` (a name). A part that resolved to nothing is
    ``None`` in the patch, which removes the field; a part not told is left out, so the status keeps it.
    ``status.capacityReservations`` is not part of it. Raises ``ValueError`` as :func:`nodeclass_conditions` and
    :func:`ami_requirements` do."""
    out: dict[str, Any] = {
        "conditions": nodeclass_conditions(nodeclass=nodeclass, checks=resolution.checks, now=now),
    }
    if resolution.subnets is not None:
        ordered = sorted(resolution.subnets, key=lambda s: (-s.available_ips, s.id))
        out["subnets"] = [_subnet_json(s) for s in ordered] or None
    if resolution.security_groups is not None:
        groups = sorted(resolution.security_groups, key=lambda g: g.id)
        out["securityGroups"] = [_security_group_json(g) for g in groups] or None
    if resolution.images is not None:
        out["amis"] = [_ami_json(i) for i in sorted(resolution.images, key=_newest_first)] or None
    if resolution.instance_profile is not None:
        out["instanceProfile"] = resolution.instance_profile or None
    return out


def status_changed(nodeclass: EC2NodeClass, status: dict[str, Any]) -> bool:
    """True when writing ``status`` (from :func:`nodeclass_status`) as a merge patch would change ``nodeclass``'s
    status: a field differs, or a ``None`` field would remove one that is there. False means no write is needed."""
    current = nodeclass.status.model_dump(by_alias=True, exclude_none=True, mode="json") if nodeclass.status else {}
    for key, wanted in status.items():
        if wanted is None:
            if current.get(key) not in (None, [], ""):
                return True
        elif current.get(key) != wanted:
            return True
    return False
