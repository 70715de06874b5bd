"""Volume topology: the node requirements a pod's PersistentVolumeClaims impose (zonal storage).

Mirrors ``[core]:pkg/controllers/provisioning/scheduling/volumetopology.go`` (``GetRequirements``):
for each claim the pod mounts (``persistentVolumeClaim.claimName``, or ``<pod>-<volume>`` for a
generic ephemeral volume):

* a claim bound to a PersistentVolume (``spec.volumeName``) takes the first term of the volume's
  ``nodeAffinity.required`` (terms are ORed; Karpenter uses the first), without the hostname
  requirement of ``local``/``hostPath`` volumes (a new node cannot have the old hostname);
* an unbound claim takes the first ``allowedTopologies`` term of its StorageClass, each
  ``matchLabelExpressions`` entry as ``key In values``;
* other claims (no class, no topology) impose nothing.

Like current Karpenter, these requirements constrain the NodeClaim (and the pod's topology
domains) but are not added to the pod's node affinity, so topology spread still counts nodes by
the pod's own affinity (``nodeAffinityPolicy``).

What Karpenter refuses before scheduling (``ValidatePersistentVolumeClaims``: missing claim,
volume or class; an unbound claim without a class or with an ``Immediate`` class) is reported
by :func:`volume_requirements` as notes and imposes nothing here, so a simulation of manifests
that omit the storage objects still schedules the pod (callers decide what to do with notes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nodesmith.core.model import NodeSelectorRequirement
from nodesmith.core.requirements import LABEL_HOSTNAME

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from nodesmith.core.model import NodeSelectorTerm, Pod

__all__ = [
    "PersistentVolume",
    "StorageClass",
    "VolumeClaim",
    "VolumeContext",
    "volume_requirements",
]


@dataclass(frozen=True, slots=True)
class VolumeClaim:
    """A PersistentVolumeClaim: ``storage_class`` (``spec.storageClassName``, "" when unset),
    ``volume_name`` (``spec.volumeName``, "" while unbound), ``owner_pod``: the pod that controls
    it (a generic ephemeral volume's claim), "" otherwise; ``deleting`` when it has a
    ``deletionTimestamp``, ``lost`` when its ``status.phase`` is ``Lost`` (its volume is gone)."""

    namespace: str
    name: str
    storage_class: str = ""
    volume_name: str = ""
    owner_pod: str = ""
    deleting: bool = False
    lost: bool = False


@dataclass(frozen=True, slots=True)
class PersistentVolume:
    """A PersistentVolume: its ``nodeAffinity.required`` terms (ORed) and whether it is a ``local``
    or ``hostPath`` volume (whose hostname requirement is dropped); ``deleting`` when it has a
    ``deletionTimestamp``."""

    name: str
    node_affinity: tuple[NodeSelectorTerm, ...] = ()
    local: bool = False
    deleting: bool = False


@dataclass(frozen=True, slots=True)
class StorageClass:
    """A StorageClass: ``allowed_topologies`` terms (ORed), each a tuple of ``(key, values)``
    label expressions (ANDed); ``binding_mode`` is ``volumeBindingMode`` (Kubernetes default
    ``Immediate``)."""

    name: str
    allowed_topologies: tuple[tuple[tuple[str, tuple[str, ...]], ...], ...] = ()
    binding_mode: str = "Immediate"


@dataclass(frozen=True, slots=True)
class VolumeContext:
    """The storage objects volume topology reads, as listed from a cluster or loaded from manifests.

    ``claims`` are keyed by ``(namespace, name)``, ``volumes`` and ``classes`` by name.
    """

    claims: Mapping[tuple[str, str], VolumeClaim] = field(default_factory=dict)
    volumes: Mapping[str, PersistentVolume] = field(default_factory=dict)
    classes: Mapping[str, StorageClass] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        *,
        claims: Iterable[VolumeClaim] = (),
        volumes: Iterable[PersistentVolume] = (),
        classes: Iterable[StorageClass] = (),
    ) -> VolumeContext:
        """A context indexed from lists of objects (a later duplicate wins)."""
        return cls(
            claims={(c.namespace, c.name): c for c in claims},
            volumes={v.name: v for v in volumes},
            classes={c.name: c for c in classes},
        )

    def requirements(
        self, pod: Pod, *, rescheduled: bool = False
    ) -> tuple[tuple[NodeSelectorRequirement, ...], tuple[str, ...]]:
        """:func:`volume_requirements` of ``pod`` against this context: ``(requirements, notes)``."""
        return volume_requirements(
            pod, claims=self.claims, volumes=self.volumes, classes=self.classes, rescheduled=rescheduled
        )


def volume_requirements(
    pod: Pod,
    *,
    claims: Mapping[tuple[str, str], VolumeClaim],
    volumes: Mapping[str, PersistentVolume],
    classes: Mapping[str, StorageClass],
    rescheduled: bool = False,
) -> tuple[tuple[NodeSelectorRequirement, ...], tuple[str, ...]]:
    """``(requirements, notes)`` for the claims ``pod`` mounts (rules in the module docstring).

    ``claims`` are keyed by ``(namespace, name)``, ``volumes`` and ``classes`` by name. Notes say
    what Karpenter would reject the pod for (``ValidatePersistentVolumeClaims``: a claim, volume or
    class that does not exist, a claim or volume being deleted, a ``Lost`` claim, an unbound claim
    without a class or with an ``Immediate`` class), naming the object. ``rescheduled``: the pod is
    bound to a node that is going away; the claims of its generic ephemeral volumes (controlled by
    the pod) are then skipped, since they are deleted with the pod and its replacement gets new ones
    (``getRequirements`` skips ephemeral volumes of bound pods).
    """
    out: list[NodeSelectorRequirement] = []
    notes: list[str] = []
    for name in pod.pvc_names:
        ref = f"{pod.namespace}/{name}"
        claim = claims.get((pod.namespace, name))
        if claim is None:
            notes.append(f"PersistentVolumeClaim {ref} not found")
            continue
        if rescheduled and claim.owner_pod == pod.name:
            continue
        if claim.deleting or claim.lost:
            state = (
                "is being deleted" if claim.deleting else f"is Lost (its PersistentVolume {claim.volume_name} is gone)"
            )
            notes.append(f"PersistentVolumeClaim {ref} {state}")
            continue
        if claim.volume_name:
            reqs, note = _bound(claim, ref, volumes)
        else:
            reqs, note = _unbound(claim, ref, classes)
        out.extend(reqs)
        if note:
            notes.append(note)
    return tuple(out), tuple(notes)


def _bound(
    claim: VolumeClaim, ref: str, volumes: Mapping[str, PersistentVolume]
) -> tuple[tuple[NodeSelectorRequirement, ...], str]:
    """A bound claim: its volume's first node-affinity term (hostname dropped for local volumes)."""
    volume = volumes.get(claim.volume_name)
    if volume is None:
        return (), f"PersistentVolume {claim.volume_name} (of claim {ref}) not found"
    if volume.deleting:
        return (), f"PersistentVolume {claim.volume_name} (of claim {ref}) is being deleted"
    if not volume.node_affinity:
        return (), ""
    first = volume.node_affinity[0].match_expressions
    return tuple(r for r in first if not (volume.local and r.key == LABEL_HOSTNAME)), ""


def _unbound(
    claim: VolumeClaim, ref: str, classes: Mapping[str, StorageClass]
) -> tuple[tuple[NodeSelectorRequirement, ...], str]:
    """An unbound claim: its StorageClass's first ``allowedTopologies`` term (also with a note for Immediate)."""
    if not claim.storage_class:
        return (), f"unbound PersistentVolumeClaim {ref} has no storage class"
    storage_class = classes.get(claim.storage_class)
    if storage_class is None:
        return (), f"StorageClass {claim.storage_class} (of claim {ref}) not found"
    note = ""
    if storage_class.binding_mode == "Immediate":
        note = (
            f"unbound PersistentVolumeClaim {ref} uses StorageClass {storage_class.name} "
            "with volumeBindingMode Immediate: it must be bound first"
        )
    reqs = tuple(
        NodeSelectorRequirement(key=key, operator="In", values=values)
        for key, values in (storage_class.allowed_topologies[0] if storage_class.allowed_topologies else ())
    )
    return reqs, note
