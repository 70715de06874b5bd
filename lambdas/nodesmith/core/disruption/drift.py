"""Drift: a node no longer matches what its NodePool and EC2NodeClass would launch today.

Reasons, checked in Karpenter's order (first match wins):

1. ``NodePoolDrifted`` — the NodePool's static hash (:func:`~.drift_basis.nodepool_hash`) differs from the
   NodeClaim's ``karpenter.sh/nodepool-hash`` annotation, compared only when the NodeClaim's
   ``karpenter.sh/nodepool-hash-version`` is :data:`~.drift_basis.NODEPOOL_HASH_VERSION` (hashes of another
   version — e.g. Karpenter's own ``v3`` hashstructure values — are not comparable, exactly as
   Karpenter skips mismatched versions). ``[core]:pkg/controllers/nodeclaim/disruption/drift.go
   areStaticFieldsDrifted``.
2. ``RequirementsDrifted`` — the node's labels no longer satisfy the NodePool requirements
   (semantic: adding values never drifts). ``areRequirementsDrifted``. The labels are the
   NodeClaim's and Node's plus its instance type's well-known labels; without a NodeClaim (a
   snapshot) a requirement on a key the node does not carry at all is not taken as drift.
3. ``InstanceTypeNotFound`` — on NodeClaims older than 1 h: the type is not in the catalogue, or
   has no offering in the node's zone and capacity type (availability ignored; reserved nodes also
   match on-demand offerings). ``instanceTypeNotFound``.
4. ``NodeClassDrift`` — the EC2NodeClass hash (:func:`~.drift_basis.ec2nodeclass_hash`) differs from the
   NodeClaim's ``karpenter.k8s.aws/ec2nodeclass-hash`` (same version rule).
   ``[aws]:pkg/cloudprovider/drift.go areStaticFieldsDrifted``.
5. ``AMIDrift`` — the instance's image is not the AMI the node class resolves *for this instance
   type* today (the first resolved AMI whose requirements the type satisfies; ``isAMIDrifted`` /
   ``amifamily.MapToInstanceTypes``).
6. ``SecurityGroupDrift`` — the instance's security groups are not exactly the resolved set.
7. ``SubnetDrift`` — the instance's subnet is not among the resolved subnets.
8. ``CapacityReservationDrift`` — the node's ``karpenter.k8s.aws/capacity-reservation-id`` is no longer among the
   reservations the node class selects (``status.capacityReservations``; ``[aws]:pkg/cloudprovider/drift.go``).

A check whose inputs are unknown (no hash annotation, no image id, nothing resolved) is skipped:
unknown is never drift; reservations are known when the status lists at least one. Placement group drift is not
modelled. What a node is compared against (hashes, the node class's resolution) is worked out once per NodePool in
:mod:`.drift_basis`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from nodesmith.core.disruption.candidates import node_facts
from nodesmith.core.disruption.drift_basis import (
    NODECLASS_HASH_ANNOTATION,
    NODECLASS_HASH_VERSION,
    NODECLASS_HASH_VERSION_ANNOTATION,
    NODEPOOL_HASH_ANNOTATION,
    NODEPOOL_HASH_VERSION,
    NODEPOOL_HASH_VERSION_ANNOTATION,
    drift_basis,
)
from nodesmith.core.disruption.simulation import simulate
from nodesmith.core.disruption.types import METHOD_DRIFT, Decision, Rejection
from nodesmith.core.requirements import (
    LABEL_CAPACITY_TYPE,
    LABEL_ZONE,
    RequirementError,
    Requirements,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from nodesmith.core.api.ec2nodeclass import EC2NodeClass
    from nodesmith.core.api.nodepool import NodePool
    from nodesmith.core.disruption.candidates import Candidate
    from nodesmith.core.disruption.drift_basis import DriftBasis, NodeClassResolution, ResolvedAMI
    from nodesmith.core.disruption.simulation import SimulationContext
    from nodesmith.core.disruption.types import ClusterNode
    from nodesmith.core.model import InstanceType

__all__ = [
    "AMI_DRIFT",
    "CAPACITY_RESERVATION_DRIFT",
    "DRIFT_REASONS",
    "INSTANCE_TYPE_NOT_FOUND",
    "NODECLASS_DRIFT",
    "NODEPOOL_DRIFTED",
    "REQUIREMENTS_DRIFTED",
    "SECURITY_GROUP_DRIFT",
    "SUBNET_DRIFT",
    "Drift",
    "drift_command",
    "drift_of",
]

NODEPOOL_DRIFTED: Final = "NodePoolDrifted"
REQUIREMENTS_DRIFTED: Final = "RequirementsDrifted"
INSTANCE_TYPE_NOT_FOUND: Final = "InstanceTypeNotFound"
NODECLASS_DRIFT: Final = "NodeClassDrift"
AMI_DRIFT: Final = "AMIDrift"
SECURITY_GROUP_DRIFT: Final = "SecurityGroupDrift"
SUBNET_DRIFT: Final = "SubnetDrift"
CAPACITY_RESERVATION_DRIFT: Final = "CapacityReservationDrift"
DRIFT_REASONS: Final = (
    NODEPOOL_DRIFTED,
    REQUIREMENTS_DRIFTED,
    INSTANCE_TYPE_NOT_FOUND,
    NODECLASS_DRIFT,
    AMI_DRIFT,
    SECURITY_GROUP_DRIFT,
    SUBNET_DRIFT,
    CAPACITY_RESERVATION_DRIFT,
)

_RESERVED = "reserved"
_ON_DEMAND = "on-demand"
_RESERVATION_ID_LABEL = "karpenter.k8s.aws/capacity-reservation-id"


@dataclass(frozen=True, slots=True)
class Drift:
    """Why a node drifted: ``reason`` is one of :data:`DRIFT_REASONS`, ``message`` says what differs."""

    reason: str
    message: str


def _static_hash_drift(
    annotations: Mapping[str, str], *, key: str, version_key: str, version: str, current: str
) -> str | None:
    stamped = annotations.get(key)
    if stamped is None or annotations.get(version_key) != version:
        return None
    return None if stamped == current else stamped


def _requirements_drift(labels: Mapping[str, str], pool_reqs: Requirements | None, *, strict: bool) -> str | None:
    if pool_reqs is None:
        return None  # a NodePool we cannot read never drifts its nodes
    node_reqs = Requirements.from_labels(labels)
    allow = frozenset() if strict else frozenset(k for k in pool_reqs if not node_reqs.has(k))
    return node_reqs.compatible(pool_reqs, allow_undefined=allow)


def _type_not_found(
    it: InstanceType | None, type_name: str | None, zone: str | None, capacity_type: str | None
) -> str | None:
    if type_name is None:
        return "node has no instance-type label"
    if it is None:
        return f"instance type {type_name} is no longer offered"
    wanted = {capacity_type, _ON_DEMAND} if capacity_type == _RESERVED else {capacity_type}
    for offering in it.offerings:
        if (zone is None or offering.zone == zone) and (capacity_type is None or offering.capacity_type in wanted):
            return None
    return f"instance type {type_name} has no {capacity_type or ''} offering in {zone or 'any zone'}".replace("  ", " ")


def _ami_for(it: InstanceType | None, amis: tuple[ResolvedAMI, ...]) -> str | None:
    """The first resolved AMI whose requirements the instance type satisfies (``MapToInstanceTypes``)."""
    labels = Requirements.from_labels(it.labels) if it is not None else None
    for ami in amis:
        if not ami.requirements or labels is None:
            return ami.id
        try:
            reqs = Requirements.from_node_selector_requirements(ami.requirements)
        except RequirementError:
            continue
        if labels.compatible(reqs) is None:
            return ami.id
    return None


def drift_of(
    *,
    node: ClusterNode,
    nodepool: NodePool,
    nodeclass: EC2NodeClass | None,
    resolution: NodeClassResolution | None,
    instance_types: Mapping[str, InstanceType],
    now: float,
    instance_type_min_age: float = 3600.0,
    basis: DriftBasis | None = None,
) -> Drift | None:
    """The first drift reason of ``node`` against ``nodepool`` and ``nodeclass``, or None.

    ``resolution`` is what the node class resolves to now (from the cloud); None takes what
    ``nodeclass`` itself states (:func:`~.drift_basis.resolution_from_nodeclass`). ``instance_types`` is the
    catalogue by name; ``now`` epoch seconds; ``instance_type_min_age`` seconds before
    ``InstanceTypeNotFound`` is considered. ``basis`` is :func:`~.drift_basis.drift_basis` of the same ``nodepool``,
    ``nodeclass`` and ``resolution`` when the caller already has it (None: worked out here).
    """
    if basis is None:
        basis = drift_basis(nodepool, nodeclass, resolution)
    nc = node.nodeclaim
    facts = node_facts(node, catalogue=instance_types)
    annotations: dict[str, str] = dict(node.node.annotations)
    if nc is not None:
        annotations.update(nc.metadata.annotations)
    stamped = _static_hash_drift(
        annotations,
        key=NODEPOOL_HASH_ANNOTATION,
        version_key=NODEPOOL_HASH_VERSION_ANNOTATION,
        version=NODEPOOL_HASH_VERSION,
        current=basis.nodepool_hash,
    )
    if stamped is not None:
        return Drift(NODEPOOL_DRIFTED, f'NodePool "{nodepool.name}" template changed since the node was launched')
    labels: dict[str, str] = dict(facts.instance_type.labels) if facts.instance_type is not None else {}
    if nc is not None:
        labels.update(nc.metadata.labels)
    labels.update(node.node.labels)
    conflict = _requirements_drift(labels, basis.requirements, strict=nc is not None)
    if conflict is not None:
        return Drift(
            REQUIREMENTS_DRIFTED, f'node labels no longer satisfy NodePool "{nodepool.name}" requirements: {conflict}'
        )
    if facts.created is not None and now - facts.created > instance_type_min_age:
        missing = _type_not_found(
            facts.instance_type, facts.instance_type_name, labels.get(LABEL_ZONE), labels.get(LABEL_CAPACITY_TYPE)
        )
        if missing is not None:
            return Drift(INSTANCE_TYPE_NOT_FOUND, missing)
    if nodeclass is not None and basis.nodeclass_hash is not None:
        stamped = _static_hash_drift(
            annotations,
            key=NODECLASS_HASH_ANNOTATION,
            version_key=NODECLASS_HASH_VERSION_ANNOTATION,
            version=NODECLASS_HASH_VERSION,
            current=basis.nodeclass_hash,
        )
        if stamped is not None:
            return Drift(NODECLASS_DRIFT, f'EC2NodeClass "{nodeclass.name}" changed since the node was launched')
    return _provider_drift(node, facts.instance_type, basis.resolution, nodeclass)


def _provider_drift(
    node: ClusterNode, it: InstanceType | None, resolution: NodeClassResolution | None, nodeclass: EC2NodeClass | None
) -> Drift | None:
    if resolution is None:
        return None
    name = f'EC2NodeClass "{nodeclass.name}"' if nodeclass is not None else "the EC2NodeClass"
    image = node.image_id or (node.nodeclaim.status.image_id if node.nodeclaim is not None else None)
    if image and resolution.amis:
        want = _ami_for(it, resolution.amis)
        if want is not None and want != image:
            return Drift(AMI_DRIFT, f"instance runs {image}, {name} now resolves {want} for this instance type")
    if (
        node.security_group_ids is not None
        and resolution.security_group_ids
        and node.security_group_ids != resolution.security_group_ids
    ):
        have = ", ".join(sorted(node.security_group_ids))
        want_sgs = ", ".join(sorted(resolution.security_group_ids))
        return Drift(SECURITY_GROUP_DRIFT, f"instance security groups [{have}] differ from {name}'s [{want_sgs}]")
    if node.subnet_id and resolution.subnet_ids and node.subnet_id not in resolution.subnet_ids:
        return Drift(SUBNET_DRIFT, f"instance subnet {node.subnet_id} is not among {name}'s subnets")
    labels = dict(node.nodeclaim.metadata.labels) if node.nodeclaim is not None else {}
    labels.update(node.node.labels)
    reservation = labels.get(_RESERVATION_ID_LABEL)
    if reservation and resolution.capacity_reservation_ids and reservation not in resolution.capacity_reservation_ids:
        return Drift(CAPACITY_RESERVATION_DRIFT, f"capacity reservation {reservation} is no longer selected by {name}")
    return None


def _drift_order(item: tuple[Candidate, Drift]) -> tuple[bool, float, str]:
    """Empty nodes first, then by when the drift was noticed (NodeClaim ``Drifted`` transition,
    else the node's creation), then by name (``[core]:pkg/controllers/disruption/drift.go``)."""
    c, _ = item
    since = c.facts.created or 0.0
    nc = c.cluster_node.nodeclaim
    cond = nc.condition("Drifted") if nc is not None else None
    if cond is not None and cond.status == "True":
        since = _timestamp(cond.last_transition_time) or since
    return (not c.is_empty, since, c.name)


def _timestamp(value: str | None) -> float | None:
    from nodesmith.core.objects import parse_timestamp

    try:
        return parse_timestamp(value)
    except ValueError:
        return None


def drift_command(
    ctx: SimulationContext, drifted: Sequence[tuple[Candidate, Drift]], *, budgets: Mapping[str, int]
) -> tuple[Decision | None, list[Rejection]]:
    """One drifted node replaced (or deleted when its pods fit elsewhere), Karpenter's ``Drift.ComputeCommands``.

    The first drifted candidate (empty ones first, then oldest drift) within its NodePool's
    ``Drifted`` budget whose pods all schedule — on other initialized nodes or on any number of
    new NodeClaims built from the *current* NodePool and node class — is chosen. Candidates whose
    pods block graceful disruption are only eligible when ``terminationGracePeriod`` bounds the
    drain (Karpenter's eventual class).
    """
    rejected: list[Rejection] = []
    for c, drift in sorted(drifted, key=_drift_order):
        if c.pod_block is not None and not c.termination_grace_period:
            rejected.append(Rejection(c.name, f"{drift.reason}, but {c.pod_block}", METHOD_DRIFT))
            continue
        if budgets.get(c.nodepool.name, 0) <= 0:
            rejected.append(
                Rejection(
                    c.name, f'{drift.reason}, but NodePool "{c.nodepool.name}" Drifted budget exhausted', METHOD_DRIFT
                )
            )
            continue
        sim = simulate(ctx, [c], consolidation=False)
        if not sim.all_scheduled:
            rejected.append(Rejection(c.name, f"{drift.reason}, but {sim.explain_failures()}", METHOD_DRIFT))
            continue
        if sim.uninitialized is not None:
            rejected.append(
                Rejection(
                    c.name,
                    f"{drift.reason}, but its pods would land on uninitialized node {sim.uninitialized}",
                    METHOD_DRIFT,
                )
            )
            continue
        claims = sim.new_nodeclaims
        after = sum(nc.price_per_hour for nc in claims)
        how = f"replace with {len(claims)} new NodeClaim(s)" if claims else "its pods fit on other nodes"
        return (
            Decision(
                method=METHOD_DRIFT,
                nodes=(c.name,),
                cause=drift.reason,
                reason=f"{c.name} drifted ({drift.reason}: {drift.message}); {how}",
                nodepools=(c.nodepool.name,),
                replacements=claims,
                cost_before=c.price,
                cost_after=after,
                pods=tuple(sorted(sim.moved)),
                placements=tuple(sorted(sim.placements.items())),
                rejected=tuple(rejected),
            ),
            rejected,
        )
    return None, rejected
