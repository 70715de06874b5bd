"""Ports: what services need from the outside world, as Protocols.

Adapters implement them (``nodesmith.adapters.aws`` for :class:`CloudProvider`,
``nodesmith.adapters.kube`` for :class:`Cluster`); tests implement them with fakes. Every method
takes keyword-only arguments. Errors raised are those of :mod:`nodesmith.core.errors`.

What Lambda containers share (the state store and the termination queue) is in :mod:`nodesmith.core.state_ports`,
re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from nodesmith.core.state_ports import LeaseInfo, OfferingMark, StateStore, TerminationQueue

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

    from nodesmith.core.api.ec2nodeclass import EC2NodeClass
    from nodesmith.core.api.nodeclaim import NodeClaim
    from nodesmith.core.api.nodeoverlay import NodeOverlay
    from nodesmith.core.api.nodepool import NodePool
    from nodesmith.core.capacityreservations import CapacityReservation
    from nodesmith.core.errors import UnavailableOffering
    from nodesmith.core.model import (
        DaemonSet,
        InstanceType,
        Node,
        Pod,
        PodDisruptionBudget,
        Taint,
    )
    from nodesmith.core.nodeclass_status import ResolvedParts
    from nodesmith.core.scheduling.volumes import VolumeContext

__all__ = [
    "CapacityReservations",
    "CloudProvider",
    "Cluster",
    "EvictionOutcome",
    "Instance",
    "InstanceFacts",
    "LaunchRequest",
    "LaunchResult",
    "LaunchTemplateCleanup",
    "LeaseInfo",
    "NodeClassFinalizers",
    "NodeClassReadiness",
    "NodeOverlays",
    "ObjectRef",
    "OfferingMark",
    "PodEvent",
    "StateStore",
    "TerminationQueue",
]


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """Everything needed to launch one NodeClaim's instance with CreateFleet.

    ``instance_types`` are cheapest first and carry their offerings; only offerings whose zone is
    in ``zones`` and capacity type in ``capacity_types`` may be used. ``labels`` and ``taints``
    are registered by the kubelet through user data. ``client_token`` makes the CreateFleet call
    idempotent (derived from the NodeClaim). ``price_overlaid`` is True when a NodeOverlay set the price of
    one of ``instance_types``: the offerings' prices are then the overlaid ones and CreateFleet launches by
    them (Karpenter's AWS provider switches to the prioritized allocation strategies). ``tenancy`` is the instance
    tenancy to launch with (``default`` | ``dedicated``, :func:`nodesmith.core.tenancy.tenancy_of`).
    """

    nodeclaim_name: str
    nodepool_name: str
    nodeclass: EC2NodeClass
    instance_types: tuple[InstanceType, ...]
    capacity_types: frozenset[str]
    zones: frozenset[str]
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    startup_taints: tuple[Taint, ...] = ()
    client_token: str = ""
    tags: Mapping[str, str] = field(default_factory=dict)
    price_overlaid: bool = False
    tenancy: str = "default"


@dataclass(frozen=True, slots=True)
class LaunchResult:
    """The instance CreateFleet started: id, type, zone, capacity type, AMI and its price (USD/hour).

    ``capacity_errors`` are the offerings the same CreateFleet answered a capacity error for while it launched
    this one (its ``Errors``): the provider has marked them unavailable, and the caller's pass should plan
    around them too. A ``reserved`` instance names its capacity reservation (``reservation_id``, ``reservation_type``
    ``default`` | ``capacity-block``, and ``reservation_interruptible`` for an interruptible ODCR). ``tenancy`` is
    the instance's tenancy (``default`` | ``dedicated``).
    """

    instance_id: str
    instance_type: str
    zone: str
    capacity_type: str
    image_id: str
    price: float
    launch_template_name: str = ""
    capacity_errors: tuple[UnavailableOffering, ...] = ()
    reservation_id: str = ""
    reservation_type: str = ""
    reservation_interruptible: bool = False
    tenancy: str = "default"

    @property
    def provider_id(self) -> str:
        """Kubernetes providerID of the instance: ``aws:///<zone>/<instance-id>``."""
        return f"aws:///{self.zone}/{self.instance_id}"


@dataclass(frozen=True, slots=True)
class Instance:
    """An EC2 instance as listed by the cloud provider (only instances tagged for our cluster).

    ``state`` is the EC2 state name (pending, running, shutting-down, terminated, stopping,
    stopped); ``launch_time`` is epoch seconds; ``tags`` are all instance tags.
    """

    instance_id: str
    instance_type: str
    zone: str
    capacity_type: str
    state: str
    launch_time: float
    private_dns_name: str = ""
    image_id: str = ""
    subnet_id: str = ""
    security_group_ids: tuple[str, ...] = ()
    tags: Mapping[str, str] = field(default_factory=dict)
    reservation_id: str = ""
    reservation_type: str = ""

    @property
    def provider_id(self) -> str:
        """Kubernetes providerID of the instance: ``aws:///<zone>/<instance-id>``."""
        return f"aws:///{self.zone}/{self.instance_id}"


@dataclass(frozen=True, slots=True)
class InstanceFacts:
    """What an EC2 instance was launched with, which its life does not change: type, zone, capacity type,
    launch time (epoch seconds), AMI, subnet and security groups (ids). No state: whether it still runs is
    :class:`Instance`'s, read fresh.

    Karpenter's AWS provider reads these through its instance provider's cache for drift
    (``[aws]:pkg/cloudprovider/drift.go``: subnet and security group drift; the AMI comes from the NodeClaim's
    ``status.imageID``).
    """

    instance_id: str
    instance_type: str
    zone: str
    capacity_type: str
    launch_time: float
    image_id: str = ""
    subnet_id: str = ""
    security_group_ids: tuple[str, ...] = ()

    @classmethod
    def of(cls, instance: Instance) -> InstanceFacts:
        """The facts of a described ``instance`` (its state left behind)."""
        return cls(
            instance_id=instance.instance_id,
            instance_type=instance.instance_type,
            zone=instance.zone,
            capacity_type=instance.capacity_type,
            launch_time=instance.launch_time,
            image_id=instance.image_id,
            subnet_id=instance.subnet_id,
            security_group_ids=instance.security_group_ids,
        )


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """A reference to a Kubernetes object, for Events (``kind`` Pod, Node, NodeClaim, ...)."""

    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    api_version: str = "v1"


@dataclass(frozen=True, slots=True)
class PodEvent:
    """One item of :meth:`Cluster.watch_pods`.

    ``type`` is ``SYNCED`` (a fresh list: ``pods`` is every matching pod, the whole state),
    ``ADDED``, ``MODIFIED`` or ``DELETED`` (``pods`` holds the one pod; DELETED also when the pod
    stopped matching the selector, e.g. got bound). ``resource_version`` is where a later watch
    resumes (the list's, or the pod's after this change).
    """

    type: Literal["SYNCED", "ADDED", "MODIFIED", "DELETED"]
    pods: tuple[Pod, ...]
    resource_version: str


EvictionOutcome = Literal["evicted", "blocked", "gone"]
"""Result of one eviction: accepted (201), refused by a PodDisruptionBudget (429), or already gone (404)."""


class CloudProvider(Protocol):
    """The EC2 side: catalogue, launch, list and terminate instances (Karpenter's CloudProvider)."""

    def instance_types(self, *, nodeclass: EC2NodeClass | None = None) -> list[InstanceType]:
        """All instance types with offerings (prices in USD/hour, availability per zone).

        Returns every type, even those with no available offering (Karpenter contract).
        """
        ...

    def create(self, *, request: LaunchRequest) -> LaunchResult:
        """Launch one instance for a NodeClaim with CreateFleet ``instant``.

        Raises ``InsufficientCapacityError`` when every override hit a capacity error,
        ``NodeClassNotReadyError`` when the EC2NodeClass does not resolve, ``LaunchError`` otherwise.
        """
        ...

    def list_instances(self) -> list[Instance]:
        """Instances tagged for this cluster that are not terminated."""
        ...

    def get_instance(self, *, instance_id: str) -> Instance | None:
        """One instance by id (any tags), or None when EC2 does not know it."""
        ...

    def get_instances(self, *, instance_ids: Sequence[str]) -> dict[str, Instance]:
        """Several instances by id (any tags), in as few calls as the provider can (EC2: one
        ``DescribeInstances`` per 200 ids); ids EC2 does not know are left out."""
        ...

    def instance_facts(self, *, instance_ids: Sequence[str]) -> dict[str, InstanceFacts]:
        """The launch facts of instances by id (any tags): those the provider already described answered from its
        cache, only the others read (EC2: one ``DescribeInstances`` per 200 ids); ids EC2 does not know are left
        out. For what a launch fixed (drift's subnet and security groups), never for whether an instance still runs.
        Raises ``LaunchError`` (or the client's error) when EC2 cannot be read."""
        ...

    def terminate(self, *, instance_ids: Sequence[str]) -> None:
        """Terminate instances; already-terminated or unknown ids are not an error.

        Raises ``TerminationError`` naming each instance that could not be terminated (the others were),
        or another ``LaunchError`` when nothing could be told apart.
        """
        ...

    def mark_unavailable(self, *, offerings: Sequence[UnavailableOffering]) -> None:
        """Mark offerings unavailable for the next plans (Karpenter's unavailable-offerings cache, 3 minutes),
        shared with the other functions through the state table when there is one; never raises."""
        ...


class CapacityReservations(Protocol):
    """The capacity reservations EC2 holds for the account (Karpenter's ``capacityreservation.Provider``)."""

    def capacity_reservations(self, *, nodeclass: EC2NodeClass) -> list[CapacityReservation]:
        """The active reservations ``nodeclass``'s ``capacityReservationSelectorTerms`` select, with the instances
        each can take now. Raises ``NodeClassNotReadyError`` when the node class does not resolve."""
        ...

    def describe_capacity_reservations(self, *, ids: Sequence[str]) -> list[CapacityReservation]:
        """The active reservations among ``ids`` (ended or unknown ones are left out). Raises ``LaunchError``
        when EC2 cannot be asked."""
        ...


@runtime_checkable
class NodeClassReadiness(Protocol):
    """What EC2 says of an EC2NodeClass's parts, for its status (Karpenter's ``nodeclass`` controller,
    :mod:`nodesmith.core.nodeclass_status`)."""

    def nodeclass_parts(self, *, nodeclass: EC2NodeClass) -> ResolvedParts:
        """One :class:`~nodesmith.core.nodeclass_status.Check` per dependent condition (``SubnetsReady``,
        ``SecurityGroupsReady``, ``AMIsReady``, ``InstanceProfileReady``, ``ValidationSucceeded``, and
        ``CapacityReservationsReady`` with the ``ReservedCapacity`` gate) and what each part resolved to
        (:class:`~nodesmith.core.nodeclass_status.ResolvedParts`). A part that does not resolve is a failed
        check, never an error; raises ``NodesmithError`` only when EC2 could not be asked."""
        ...


class Cluster(Protocol):
    """The Kubernetes side: read a snapshot, manage NodeClaims, cordon, taint, evict, delete."""

    def list_pods(self, *, node_name: str | None = None) -> list[Pod]:
        """All pods, or only those bound to ``node_name`` (field selector ``spec.nodeName``)."""
        ...

    def list_nodes(self) -> list[Node]:
        """All nodes."""
        ...

    def cordoned_node_names(self) -> set[str]:
        """The names of the cordoned nodes (``spec.unschedulable``; a field selector, so a small answer)."""
        ...

    def list_daemonsets(self) -> list[DaemonSet]:
        """All DaemonSets, each as a template pod."""
        ...

    def list_pdbs(self) -> list[PodDisruptionBudget]:
        """All PodDisruptionBudgets."""
        ...

    def list_nodepools(self) -> list[NodePool]:
        """All ``karpenter.sh/v1`` NodePools."""
        ...

    def list_ec2nodeclasses(self) -> list[EC2NodeClass]:
        """All ``karpenter.k8s.aws/v1`` EC2NodeClasses."""
        ...

    def patch_ec2nodeclass_status(self, *, name: str, status: Mapping[str, Any]) -> EC2NodeClass:
        """Merge ``status`` (Karpenter JSON, e.g. ``{"capacityReservations": [...]}``) into the EC2NodeClass's
        status subresource; returns the EC2NodeClass as written. ``NotFoundError`` if it is gone."""
        ...

    def list_nodeclaims(self) -> list[NodeClaim]:
        """All ``karpenter.sh/v1`` NodeClaims."""
        ...

    def volume_context(self) -> VolumeContext:
        """Every PersistentVolumeClaim, PersistentVolume and StorageClass (core/v1, storage.k8s.io/v1),
        for volume topology (``[core]:pkg/controllers/provisioning/scheduling/volumetopology.go``).

        Raises ``KubernetesError`` when they cannot be listed.
        """
        ...

    def get_nodeclaim(self, *, name: str) -> NodeClaim | None:
        """One ``karpenter.sh/v1`` NodeClaim by name, or None when there is none.

        Raises ``KubernetesError`` when the API call fails or the NodeClaim cannot be read.
        """
        ...

    def create_nodeclaim(self, *, nodeclaim: NodeClaim) -> NodeClaim:
        """Create a NodeClaim; raises ``ConflictError`` if it exists."""
        ...

    def update_nodeclaim_status(self, *, nodeclaim: NodeClaim) -> NodeClaim:
        """Write ``nodeclaim.status`` through the status subresource."""
        ...

    def update_nodepool_status(self, *, name: str, status: Mapping[str, Any]) -> None:
        """Merge ``status`` (Kubernetes JSON) into the NodePool's status subresource.

        Raises ``NotFoundError`` if it is gone, ``KubernetesError`` on other failures.
        """
        ...

    def label_nodeclaim(self, *, name: str, labels: Mapping[str, str]) -> None:
        """Merge ``labels`` into the NodeClaim's labels (a merge patch: no resourceVersion precondition).

        Raises ``NotFoundError`` if it is gone, ``KubernetesError`` on other failures.
        """
        ...

    def annotate_nodeclaim(
        self, *, name: str, annotations: Mapping[str, str], resource_version: str | None = None
    ) -> None:
        """Merge ``annotations`` into the NodeClaim's annotations (a merge patch), only if it is still at
        ``resource_version`` when one is given.

        Raises ``NotFoundError`` if it is gone, ``ConflictError`` if it changed since ``resource_version``,
        ``KubernetesError`` on other failures.
        """
        ...

    def delete_nodeclaim(self, *, name: str) -> None:
        """DELETE a NodeClaim; a missing one is not an error. With a finalizer (``karpenter.sh/termination``) it
        stays, with a ``deletionTimestamp``, until :meth:`remove_nodeclaim_finalizer`."""
        ...

    def remove_nodeclaim_finalizer(self, *, name: str, finalizer: str) -> None:
        """Remove ``finalizer`` from the NodeClaim (a deleting one then goes); absent or gone is not an error.

        Raises ``KubernetesError`` (``ConflictError`` after repeated conflicts) when the write fails.
        """
        ...

    def get_node(self, *, name: str) -> Node | None:
        """One node by name, or None."""
        ...

    def taint_and_cordon(self, *, node_name: str, taint: Taint | None) -> bool:
        """Add ``taint`` (None: none, a plain cordon) and set ``spec.unschedulable``, remembering on the node whether
        the cordon is Nodesmith's (it was not cordoned before); idempotent. Returns False if the node is gone."""
        ...

    def label_node(self, *, node_name: str, labels: Mapping[str, str], finalizers: Sequence[str] = ()) -> None:
        """Merge ``labels`` into the node's labels and add ``finalizers`` to its finalizers (a set)."""
        ...

    def evict(self, *, pod: Pod, grace_period_seconds: int | None = None) -> EvictionOutcome:
        """Evict through the Eviction API (policy/v1): 'evicted', 'blocked' on 429 (PDB), 'gone' on 404."""
        ...

    def delete_pod(self, *, pod: Pod, grace_period_seconds: int | None = None) -> None:
        """Delete a pod directly (bypasses PodDisruptionBudgets): only for deadlines."""
        ...

    def delete_node(self, *, name: str) -> None:
        """DELETE a Node object; a missing one is not an error (one with a finalizer stays until it is removed)."""
        ...

    def remove_node_finalizer(self, *, name: str, finalizer: str) -> None:
        """Remove ``finalizer`` from the Node (a deleting one then goes); absent or gone is not an error.

        Raises ``KubernetesError`` (``ConflictError`` after repeated conflicts) when the write fails.
        """
        ...

    def record_event(self, *, ref: ObjectRef, reason: str, message: str, type_: str = "Normal") -> None:
        """Post a Kubernetes Event on ``ref`` (best effort: failures are logged, not raised)."""
        ...

    def watch_pods(
        self, *, resource_version: str = "", unscheduled_only: bool = True, timeout_seconds: int = 60
    ) -> Iterator[PodEvent]:
        """Pod changes as they happen (the Kubernetes watch API), only unbound pods when ``unscheduled_only``.

        With ``resource_version`` "" the stream starts with one ``SYNCED`` event (a list and its
        resourceVersion); otherwise it resumes after that version. It ends after about
        ``timeout_seconds``; call again with the last event's ``resource_version``. Raises
        ``KubernetesError`` with ``status`` 410 when that version is too old (list again with ""),
        and ``KubernetesError`` for any other failure.
        """
        ...

    def untaint_and_uncordon(self, *, node_name: str, taint_key: str) -> bool:
        """Remove every taint with key ``taint_key`` and clear ``spec.unschedulable`` when :meth:`taint_and_cordon`
        set it (a cordon that was there before stays); idempotent.

        Returns False if the node is gone. Undoes :meth:`taint_and_cordon` when a disruption is
        abandoned (Karpenter removes ``karpenter.sh/disrupted`` when a command fails).
        """
        ...


class NodeOverlays(Protocol):
    """``karpenter.sh/v1alpha1`` NodeOverlays (feature gate ``NodeOverlay``): read, and their conditions written."""

    def list_nodeoverlays(self) -> list[NodeOverlay]:
        """Every NodeOverlay that validates (an invalid one is skipped and logged)."""
        ...

    def patch_nodeoverlay_status(
        self, *, name: str, conditions: list[dict[str, object]], resource_version: str | None = None
    ) -> None:
        """Write ``status.conditions`` (Kubernetes JSON) of overlay ``name``; with ``resource_version``,
        ``ConflictError`` when the overlay changed since it was read; ``NotFoundError`` when it is gone."""
        ...


@runtime_checkable
class NodeClassFinalizers(Protocol):
    """The Kubernetes side of an EC2NodeClass's finalization (its ``karpenter.k8s.aws/termination`` finalizer)."""

    def add_ec2nodeclass_finalizer(self, *, name: str, finalizer: str) -> bool:
        """Add ``finalizer`` to the EC2NodeClass unless it has it or is being deleted; False when it is gone.
        Raises ``KubernetesError``."""
        ...

    def remove_ec2nodeclass_finalizer(self, *, name: str, finalizer: str) -> None:
        """Remove ``finalizer`` from the EC2NodeClass (gone or without it: nothing to do). Raises
        ``KubernetesError``."""
        ...


@runtime_checkable
class LaunchTemplateCleanup(Protocol):
    """The EC2 side of an EC2NodeClass's finalization: its launch templates."""

    def delete_launch_templates(self, *, nodeclass_name: str) -> list[str]:
        """Delete this cluster's launch templates of the EC2NodeClass ``nodeclass_name``; returns their names.
        Raises ``LaunchError``."""
        ...
