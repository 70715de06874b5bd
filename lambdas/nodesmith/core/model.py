"""Core value types: the cluster and the cloud as the pure core sees them.

Adapters turn Kubernetes objects and EC2 responses into these frozen dataclasses at the edge;
everything in ``nodesmith.core`` works on them and never on client objects. Quantities are
integers (see :mod:`nodesmith.core.resources`), prices are USD per hour, times are seconds
since the Unix epoch (floats) and are always passed in, never read from a clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from collections.abc import Mapping

    from nodesmith.core.resources import Resources

__all__ = [
    "CAPACITY_TYPE_ON_DEMAND",
    "CAPACITY_TYPE_RESERVED",
    "CAPACITY_TYPE_SPOT",
    "INSTANCE_GONE_STATES",
    "DaemonSet",
    "Disruption",
    "InstanceType",
    "LabelSelector",
    "LabelSelectorRequirement",
    "Node",
    "NodeCondition",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "Offering",
    "Pod",
    "PodAffinityTerm",
    "PodDisruptionBudget",
    "Taint",
    "Toleration",
    "TopologySpreadConstraint",
    "WeightedNodeSelectorTerm",
    "WeightedPodAffinityTerm",
    "instance_id_of",
]

CAPACITY_TYPE_SPOT = "spot"
CAPACITY_TYPE_ON_DEMAND = "on-demand"
CAPACITY_TYPE_RESERVED = "reserved"
"""Capacity reserved for the account: an On-Demand Capacity Reservation or a Capacity Block for ML (Karpenter v1.3+)."""

TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint (Kubernetes ``core/v1 Taint``). ``effect`` is NoSchedule, PreferNoSchedule or NoExecute."""

    key: str
    effect: str
    value: str = ""


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod toleration (Kubernetes ``core/v1 Toleration``).

    ``key=None`` with ``operator="Exists"`` tolerates every taint; ``effect=None`` matches all
    effects. Matching follows the upstream ``ToleratesTaint`` helper.
    """

    key: str | None = None
    operator: str = "Equal"
    value: str = ""
    effect: str | None = None

    def tolerates(self, taint: Taint) -> bool:
        """True when this toleration tolerates ``taint`` (Kubernetes scheduling semantics)."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key is None or self.key == "":
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.value == taint.value


@dataclass(frozen=True, slots=True)
class NodeSelectorRequirement:
    """One node selector requirement (``key``, ``operator``, ``values``) as in NodePool requirements.

    ``operator`` is one of In, NotIn, Exists, DoesNotExist, Gt, Lt (Kubernetes), plus Gte/Lte
    (Karpenter v1.9+). ``min_values`` is Karpenter's ``minValues`` (None when unset).
    """

    key: str
    operator: str
    values: tuple[str, ...] = ()
    min_values: int | None = None


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """A node selector term: all ``match_expressions`` must hold (AND)."""

    match_expressions: tuple[NodeSelectorRequirement, ...] = ()


@dataclass(frozen=True, slots=True)
class WeightedNodeSelectorTerm:
    """A preferred node affinity term with its weight (1..100)."""

    weight: int
    term: NodeSelectorTerm


@dataclass(frozen=True, slots=True)
class LabelSelectorRequirement:
    """A label selector expression: operator In, NotIn, Exists or DoesNotExist."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A Kubernetes label selector (``matchLabels`` AND ``matchExpressions``)."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[LabelSelectorRequirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """True when ``labels`` satisfy every label and expression (empty selector matches all).

        An unknown operator never matches (the API server would have rejected it).
        """
        if any(labels.get(key) != value for key, value in self.match_labels):
            return False
        return all(_expression_holds(expr, labels) for expr in self.match_expressions)


def _expression_holds(expr: LabelSelectorRequirement, labels: Mapping[str, str]) -> bool:
    """One label selector expression against ``labels`` (Kubernetes ``metav1.LabelSelector`` rules)."""
    present = expr.key in labels
    if expr.operator == "In":
        return present and labels[expr.key] in expr.values
    if expr.operator == "NotIn":
        return not present or labels[expr.key] not in expr.values
    if expr.operator == "Exists":
        return present
    if expr.operator == "DoesNotExist":
        return not present
    return False


@dataclass(frozen=True, slots=True)
class TopologySpreadConstraint:
    """A pod topology spread constraint (Kubernetes ``TopologySpreadConstraint``)."""

    max_skew: int
    topology_key: str
    when_unsatisfiable: str  # DoNotSchedule | ScheduleAnyway
    label_selector: LabelSelector | None = None
    min_domains: int | None = None
    match_label_keys: tuple[str, ...] = ()
    node_affinity_policy: str = "Honor"  # Honor | Ignore
    node_taints_policy: str = "Ignore"  # Honor | Ignore


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    """A pod (anti-)affinity term: pods matching ``label_selector`` in ``namespaces`` on ``topology_key``.

    An empty ``namespaces`` with no namespace selector means the pod's own namespace.
    """

    topology_key: str
    label_selector: LabelSelector | None = None
    namespaces: tuple[str, ...] = ()
    namespace_selector: LabelSelector | None = None


@dataclass(frozen=True, slots=True)
class WeightedPodAffinityTerm:
    """A preferred pod (anti-)affinity term with its weight (1..100)."""

    weight: int
    term: PodAffinityTerm


@dataclass(frozen=True, slots=True)
class Pod:
    """A pod as the scheduler and the drainer see it.

    ``requests`` already follow the Kubernetes rule: max(sum of app containers + restartable
    sidecars, largest init container) + ``spec.overhead``, plus ``pods: 1``. ``unschedulable`` is
    True when kube-scheduler set ``PodScheduled=False, reason=Unschedulable``.
    ``owner_kind`` is the controller owner's kind (``ReplicaSet``, ``DaemonSet``, ``Node`` for
    static pods, ...) or None. ``creation_timestamp``, ``start_time`` (``status.startTime``: when the
    kubelet accepted the pod; None until then) and ``deletion_timestamp`` are epoch seconds.
    """

    namespace: str
    name: str
    uid: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    requests: Resources = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    required_node_affinity: tuple[NodeSelectorTerm, ...] = ()
    preferred_node_affinity: tuple[WeightedNodeSelectorTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    topology_spread: tuple[TopologySpreadConstraint, ...] = ()
    pod_affinity: tuple[PodAffinityTerm, ...] = ()
    preferred_pod_affinity: tuple[WeightedPodAffinityTerm, ...] = ()
    pod_anti_affinity: tuple[PodAffinityTerm, ...] = ()
    preferred_pod_anti_affinity: tuple[WeightedPodAffinityTerm, ...] = ()
    host_ports: tuple[tuple[int, str, str], ...] = ()  # (port, protocol, hostIP)
    pvc_names: tuple[str, ...] = ()
    node_name: str | None = None
    nominated_node_name: str | None = None
    owner_kind: str | None = None
    owner_name: str | None = None
    phase: str = "Pending"
    unschedulable: bool = False
    is_mirror: bool = False
    priority: int = 0
    priority_class_name: str = ""
    creation_timestamp: float = 0.0
    deletion_timestamp: float | None = None
    termination_grace_period_seconds: int = 30
    start_time: float | None = None

    @property
    def key(self) -> str:
        """``namespace/name``, the form used in outputs and reasons."""
        return f"{self.namespace}/{self.name}"

    @property
    def is_daemonset(self) -> bool:
        """True for a pod owned by a DaemonSet (never provisioned for, never evicted by a drain)."""
        return self.owner_kind == "DaemonSet"

    @property
    def is_terminal(self) -> bool:
        """True for a pod that has finished (phase Succeeded or Failed)."""
        return self.phase in ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class DaemonSet:
    """A DaemonSet reduced to what its pods would ask of every node it lands on.

    ``pod`` is a template pod (requests, node selector/affinity, tolerations) used for the
    DaemonSet-overhead calculation.
    """

    namespace: str
    name: str
    pod: Pod


@dataclass(frozen=True, slots=True)
class PodDisruptionBudget:
    """A PodDisruptionBudget (policy/v1) as needed to decide whether an eviction is allowed.

    ``disruptions_allowed`` is ``status.disruptionsAllowed`` when known; ``min_available`` and
    ``max_unavailable`` are kept as written (int or percent string) for simulation.
    """

    namespace: str
    name: str
    selector: LabelSelector
    min_available: int | str | None = None
    max_unavailable: int | str | None = None
    disruptions_allowed: int | None = None


INSTANCE_GONE_STATES = frozenset({"shutting-down", "terminated"})
"""EC2 instance states (``State.Name``) of an instance that is going or gone: its NodeClaim has no instance to
wait for, and an instance in them is never terminated again (EC2 API reference, instance lifecycle)."""


def instance_id_of(provider_id: str | None) -> str | None:
    """The EC2 instance id in a providerID (``aws:///us-east-1a/i-0abc`` -> ``i-0abc``), or None."""
    if not provider_id or not provider_id.startswith("aws://"):
        return None
    tail = provider_id.rsplit("/", 1)[-1]
    return tail if tail.startswith("i-") else None


@dataclass(frozen=True, slots=True)
class NodeCondition:
    """One of a Node's ``status.conditions``: ``type`` (``Ready``, ``KernelReady``, ...), ``status``
    (``True``, ``False``, ``Unknown``) and ``last_transition_time`` (epoch seconds; None when not reported)."""

    type: str
    status: str
    last_transition_time: float | None = None


@dataclass(frozen=True, slots=True)
class Node:
    """A Kubernetes Node as the core sees it.

    ``provider_id`` is ``aws:///<zone>/<instance-id>``. ``allocatable`` is what the kubelet
    reports. ``ready`` mirrors the ``Ready`` condition; ``conditions`` are all of
    ``status.conditions``; ``unschedulable`` is ``spec.unschedulable`` (cordoned). ``finalizers``
    are ``metadata.finalizers``; times are epoch seconds.
    """

    name: str
    provider_id: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    allocatable: Resources = field(default_factory=dict)
    capacity: Resources = field(default_factory=dict)
    unschedulable: bool = False
    ready: bool = False
    creation_timestamp: float = 0.0
    deletion_timestamp: float | None = None
    finalizers: tuple[str, ...] = ()
    conditions: tuple[NodeCondition, ...] = ()

    def condition(self, type_: str) -> NodeCondition | None:
        """The condition of ``type_``, or None when the node does not report it."""
        return next((c for c in self.conditions if c.type == type_), None)

    @property
    def instance_id(self) -> str | None:
        """The EC2 instance id parsed from ``provider_id`` (``aws:///us-east-1a/i-0abc`` -> ``i-0abc``)."""
        return instance_id_of(self.provider_id)


@dataclass(frozen=True, slots=True)
class Offering:
    """Where and how an instance type can be bought: one zone and one capacity type, at a price.

    ``price`` is USD per hour. ``available`` is False when EC2 does not offer the type in the
    zone or when a recent capacity error marked the offering unavailable. ``price_estimated``
    is True when the price is not from the Pricing API, a price table or spot price history.

    A ``reserved`` offering is one capacity reservation's: ``reservation_id`` (``cr-...``), ``reservation_type``
    (``default`` for an On-Demand Capacity Reservation, ``capacity-block``), ``reservation_interruptible`` (an
    interruptible ODCR, whose owner may reclaim its instances) and ``reservation_capacity``, the instances it can
    still take (Karpenter ``[aws]:pkg/providers/instancetype/offering/reserved_capacity_resolver.go``). Other
    offerings leave them empty.
    """

    zone: str
    capacity_type: str
    price: float
    available: bool = True
    zone_id: str = ""
    price_estimated: bool = False
    reservation_id: str = ""
    reservation_type: str = ""
    reservation_interruptible: bool = False
    reservation_capacity: int = 0


@dataclass(frozen=True, slots=True)
class InstanceType:
    """An EC2 instance type with its Karpenter well-known labels, capacity and offerings.

    ``labels`` holds every well-known label that does not vary by offering
    (``node.kubernetes.io/instance-type``, ``kubernetes.io/arch``, ``karpenter.k8s.aws/instance-*``
    ...); zone and capacity type come from ``offerings``. ``capacity`` is the raw machine
    (cpu millicores, memory bytes, pods, GPUs, ephemeral-storage bytes); ``overhead`` is
    kube-reserved + system-reserved + eviction threshold as the EKS AMIs compute them, so
    ``allocatable = capacity - overhead``. ``processor_features`` are EC2's
    ``ProcessorInfo.SupportedFeatures`` (``nested-virtualization``, ``amd-sev-snp``), which no label carries.
    """

    name: str
    labels: Mapping[str, str]
    capacity: Resources
    overhead: Resources
    offerings: tuple[Offering, ...]
    processor_features: frozenset[str] = frozenset()

    @property
    def allocatable(self) -> Resources:
        """``capacity - overhead``, floored at zero per resource."""
        return {k: max(0, v - self.overhead.get(k, 0)) for k, v in self.capacity.items()}

    def cheapest_price(
        self, *, capacity_types: frozenset[str] | None = None, zones: frozenset[str] | None = None
    ) -> float | None:
        """Cheapest available offering price (USD/hour) within the given capacity types and zones, or None."""
        best: float | None = None
        for o in self.offerings:
            if not o.available:
                continue
            if capacity_types is not None and o.capacity_type not in capacity_types:
                continue
            if zones is not None and o.zone not in zones:
                continue
            if best is None or o.price < best:
                best = o.price
        return best


@dataclass(frozen=True, slots=True)
class Disruption:
    """Marks on a node relevant to voluntary disruption (``karpenter.sh/do-not-disrupt`` and friends)."""

    do_not_disrupt: bool = False
    reason: str = ""
