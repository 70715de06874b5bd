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
    ``volume_name`` (``spec.volumeName``, "" while unbound) and ``owner_pod``: the pod that controls
    it (a generic ephemeral volume's claim), "" otherwise."""

    namespace: str
    name: str
    storage_class: str = ""
    volume_name: str = ""
    owner_pod: str = ""


@dataclass(frozen=True, slots=True)
class PersistentVolume:
    """A PersistentVolume: its ``nodeAffinity.required`` terms (ORed) and whether it is a ``local``
    or ``hostPath`` volume (whose hostname requirement is dropped)."""

    name: str
    node_affinity: tuple[NodeSelectorTerm, ...] = ()
    local: bool = False


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
    what Karpenter would reject the pod for (a claim, volume or class that does not exist, an
    unbound claim without a class or with an ``Immediate`` class), naming the object.
    ``rescheduled``: the pod is bound to a node that is going away; the claims of its generic
    ephemeral volumes (controlled by the pod) are then skipped, since they are deleted with the pod
    and its replacement gets new ones (``getRequirements`` skips ephemeral volumes of bound pods).
    """
    out: list[NodeSelectorRequirement] = []
    notes: list[str] = []
    for name in pod.pvc_names:
        claim = claims.get((pod.namespace, name))
        if rescheduled and claim is not None and claim.owner_pod == pod.name:
            continue
        if claim is None:
            notes.append(f"PersistentVolumeClaim {pod.namespace}/{name} not found")
            continue
        if claim.volume_name:
            volume = volumes.get(claim.volume_name)
            if volume is None:
                notes.append(f"PersistentVolume {claim.volume_name} (of claim {pod.namespace}/{name}) not found")
                continue
            if volume.node_affinity:
                first = volume.node_affinity[0].match_expressions
                out.extend(r for r in first if not (volume.local and r.key == LABEL_HOSTNAME))
            continue
        if not claim.storage_class:
            notes.append(f"unbound PersistentVolumeClaim {pod.namespace}/{name} has no storage class")
            continue
        storage_class = classes.get(claim.storage_class)
        if storage_class is None:
            notes.append(f"StorageClass {claim.storage_class} (of claim {pod.namespace}/{name}) not found")
            continue
        if storage_class.binding_mode == "Immediate":
            notes.append(
                f"unbound PersistentVolumeClaim {pod.namespace}/{name} uses StorageClass {storage_class.name} "
                "with volumeBindingMode Immediate: it must be bound first"
            )
        if storage_class.allowed_topologies:
            out.extend(
                NodeSelectorRequirement(key=key, operator="In", values=values)
                for key, values in storage_class.allowed_topologies[0]
            )
    return tuple(out), tuple(notes)
