"""What loading manifests produces: :class:`ManifestBundle` (objects grouped by kind) and
:class:`IgnoredDocument`, plus the internal document-level error the kind handlers raise."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nodesmith.core.api.ec2nodeclass import EC2NodeClass
    from nodesmith.core.api.nodeclaim import NodeClaim
    from nodesmith.core.api.nodeoverlay import NodeOverlay
    from nodesmith.core.api.nodepool import NodePool
    from nodesmith.core.model import DaemonSet, Node, Pod, PodDisruptionBudget
    from nodesmith.core.scheduling.volumes import PersistentVolume, StorageClass, VolumeClaim

__all__ = [
    "IgnoredDocument",
    "ManifestBundle",
]


@dataclass(frozen=True, slots=True)
class IgnoredDocument:
    """A document of a kind Nodesmith does not use (ConfigMap, Service, ...), with where it was."""

    kind: str
    name: str
    path: str
    document: int


@dataclass(slots=True)
class ManifestBundle:
    """Everything read from a set of manifests, grouped by kind (in file and document order)."""

    nodepools: list[NodePool] = field(default_factory=list)
    ec2nodeclasses: list[EC2NodeClass] = field(default_factory=list)
    nodeclaims: list[NodeClaim] = field(default_factory=list)
    nodeoverlays: list[NodeOverlay] = field(default_factory=list)
    pods: list[Pod] = field(default_factory=list)
    daemonsets: list[DaemonSet] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    pdbs: list[PodDisruptionBudget] = field(default_factory=list)
    volume_claims: list[VolumeClaim] = field(default_factory=list)
    persistent_volumes: list[PersistentVolume] = field(default_factory=list)
    storage_classes: list[StorageClass] = field(default_factory=list)
    ignored: list[IgnoredDocument] = field(default_factory=list)

    @property
    def ignored_kinds(self) -> list[str]:
        """Sorted distinct kinds that were ignored."""
        return sorted({d.kind for d in self.ignored})

    def extend(self, other: ManifestBundle) -> None:
        """Append everything from ``other`` (in place)."""
        self.nodepools.extend(other.nodepools)
        self.ec2nodeclasses.extend(other.ec2nodeclasses)
        self.nodeclaims.extend(other.nodeclaims)
        self.nodeoverlays.extend(other.nodeoverlays)
        self.pods.extend(other.pods)
        self.daemonsets.extend(other.daemonsets)
        self.nodes.extend(other.nodes)
        self.pdbs.extend(other.pdbs)
        self.volume_claims.extend(other.volume_claims)
        self.persistent_volumes.extend(other.persistent_volumes)
        self.storage_classes.extend(other.storage_classes)
        self.ignored.extend(other.ignored)


class _DocumentError(Exception):
    """Internal: a document-level failure with field path and reason (context added by the caller)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(reason)
        self.field = field
        self.reason = reason
