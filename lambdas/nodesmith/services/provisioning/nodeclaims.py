"""NodeClaims from scheduler plans, and the CreateFleet request and status that go with them.

Mirrors Karpenter's ``NodeClaimTemplate.ToNodeClaim`` (``[core]:pkg/controllers/provisioning/
scheduling/nodeclaimtemplate.go``) and the launch lifecycle (``[core]:pkg/controllers/nodeclaim/
lifecycle/launch.go``):

* name ``<nodepool>-<5 chars>`` (Kubernetes ``generateName`` alphabet), here derived from a hash of
  the plan and the pass time so a retried pass produces the same name;
* labels = template labels + ``karpenter.sh/nodepool`` + labels implied by single-valued ``In``
  requirements; annotations = template annotations + ``karpenter.sh/nodepool-hash(-version)`` and,
  given the EC2NodeClass, ``karpenter.k8s.aws/ec2nodeclass-hash(-version)`` — the hashes drift
  detection compares (:mod:`nodesmith.core.disruption.drift_basis`);
* requirements = the plan's, with ``node.kubernetes.io/instance-type In [...]`` cheapest first and
  ``karpenter.sh/nodepool In [<pool>]``;
* after launch: ``status.providerID``, ``imageID``, ``capacity``, ``allocatable`` and
  ``Launched=True``; Registered/Initialized start ``Unknown`` (their transition time starts the
  15-minute registration liveness clock); then the labels of :func:`launched_labels` (instance type,
  zone, capacity type and id).

Instances are tagged as Karpenter tags them (``[aws]:pkg/utils/utils.go GetTags``) so orphan
garbage collection can find them.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import TYPE_CHECKING

from nodesmith.core.api.common import (
    NodeSelectorRequirementWithMinValues,
    ObjectMeta,
    OwnerReference,
    Taint,
    is_restricted_label,
)
from nodesmith.core.api.nodeclaim import (
    CONDITION_INITIALIZED,
    CONDITION_LAUNCHED,
    CONDITION_REGISTERED,
    NodeClaim,
    NodeClaimResources,
    NodeClaimSpec,
)
from nodesmith.core.capacityreservations import reservation_labels
from nodesmith.core.disruption.drift_basis import (
    NODECLASS_HASH_ANNOTATION,
    NODECLASS_HASH_VERSION,
    NODECLASS_HASH_VERSION_ANNOTATION,
    NODEPOOL_HASH_VERSION,
    ec2nodeclass_hash,
    nodepool_hash,
)
from nodesmith.core.errors import InsufficientCapacityError
from nodesmith.core.ports import LaunchRequest, LaunchResult
from nodesmith.core.requirements import (
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    LABEL_ZONE,
    Requirements,
)
from nodesmith.core.resources import format_quantity
from nodesmith.core.scheduling.instancetypes import OfferingFilter
from nodesmith.core.tenancy import LABEL_INSTANCE_TENANCY, tenancy_of
from nodesmith.core.termination import TERMINATION_FINALIZER
from nodesmith.services.provisioning.capacity import to_rfc3339

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Mapping

    from nodesmith.core import model as core_model
    from nodesmith.core.api.ec2nodeclass import EC2NodeClass
    from nodesmith.core.api.nodepool import NodePool
    from nodesmith.core.model import InstanceType, NodeSelectorRequirement
    from nodesmith.core.scheduling.types import NodeClaimPlan

__all__ = [
    "ANNOTATION_NODEPOOL_HASH",
    "ANNOTATION_NODEPOOL_HASH_VERSION",
    "NODECLASS_HASH_VERSION",
    "NODEPOOL_HASH_VERSION",
    "TAG_CLUSTER_PREFIX",
    "TAG_NODECLAIM",
    "build_nodeclaim",
    "client_token",
    "ec2nodeclass_hash",
    "instance_tags",
    "launch_request",
    "launched_labels",
    "mark_launched",
    "nodeclaim_name",
    "nodepool_hash",
]

ANNOTATION_NODEPOOL_HASH = "karpenter.sh/nodepool-hash"
ANNOTATION_NODEPOOL_HASH_VERSION = "karpenter.sh/nodepool-hash-version"
TAG_CLUSTER_PREFIX = "kubernetes.io/cluster/"
TAG_NODECLAIM = "karpenter.sh/nodeclaim"
TAG_NODEPOOL = "karpenter.sh/nodepool"
TAG_NODECLASS = "karpenter.k8s.aws/ec2nodeclass"
TAG_EKS_CLUSTER = "eks:eks-cluster-name"

_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
"""Kubernetes' ``utilrand.String`` alphabet (no vowels, no confusable digits), as ``generateName`` uses."""


def nodeclaim_name(*, nodepool: str, seed: str, taken: Collection[str] = ()) -> str:
    """``<nodepool>-<5 chars>`` from a hash of ``seed``; re-hashed with a counter while the name is in ``taken``."""
    counter = 0
    while True:
        digest = hashlib.sha256(f"{seed}|{counter}".encode()).digest()
        suffix = "".join(_NAME_ALPHABET[b % len(_NAME_ALPHABET)] for b in digest[:5])
        name = f"{nodepool}-{suffix}"
        if name not in taken:
            return name
        counter += 1


def plan_seed(plan: NodeClaimPlan, *, now: float, index: int) -> str:
    """Deterministic seed of a plan for :func:`nodeclaim_name`: pool, pod ids, pass time, position."""
    pods = ",".join(sorted(p.uid or p.key for p in plan.pods))
    return f"{plan.nodepool}|{pods}|{now:.3f}|{index}"


def client_token(*, name: str, uid: str) -> str:
    """CreateFleet ``ClientToken`` for a NodeClaim (idempotency; at most 64 ASCII characters)."""
    return "nodesmith-" + hashlib.sha256(f"{name}|{uid}".encode()).hexdigest()[:48]


def _api_taint(taint: core_model.Taint) -> Taint:
    return Taint(key=taint.key, value=taint.value or None, effect=taint.effect)


def _requirements(plan: NodeClaimPlan) -> list[NodeSelectorRequirementWithMinValues]:
    """The plan's requirements for the NodeClaim spec: instance types cheapest first, the NodePool
    pinned, restricted keys (``kubernetes.io/hostname``) dropped as Karpenter does."""
    out: list[NodeSelectorRequirementWithMinValues] = [
        NodeSelectorRequirementWithMinValues(key=LABEL_NODEPOOL, operator="In", values=[plan.nodepool])
    ]
    type_min_values: int | None = None
    for req in plan.requirements:
        if req.key == LABEL_INSTANCE_TYPE and req.operator == "In":
            type_min_values = req.min_values
            continue
        if req.key == LABEL_NODEPOOL or is_restricted_label(req.key):
            continue
        out.append(
            NodeSelectorRequirementWithMinValues(
                key=req.key, operator=req.operator, values=list(req.values), min_values=req.min_values
            )
        )
    names = [it.name for it in plan.instance_types]
    if names:
        out.append(
            NodeSelectorRequirementWithMinValues(
                key=LABEL_INSTANCE_TYPE, operator="In", values=names, min_values=type_min_values
            )
        )
    return out


def _implied_labels(requirements: Iterable[NodeSelectorRequirement]) -> dict[str, str]:
    reqs = Requirements.from_node_selector_requirements(requirements)
    return {k: v for k, v in reqs.labels().items() if not is_restricted_label(k)}


def build_nodeclaim(
    *, plan: NodeClaimPlan, nodepool: NodePool, name: str, nodeclass: EC2NodeClass | None = None
) -> NodeClaim:
    """The NodeClaim object for ``plan`` (not yet created), with Karpenter's ``karpenter.sh/termination``
    finalizer, so a NodeClaim deleted by anyone is drained and its instance terminated before it goes.

    The NodePool hash (:func:`~nodesmith.core.disruption.drift_basis.nodepool_hash`, version
    :data:`NODEPOOL_HASH_VERSION`) is always stamped; the EC2NodeClass hash
    (:func:`~nodesmith.core.disruption.drift_basis.ec2nodeclass_hash`) when ``nodeclass`` is given.
    Without these, ``NodePoolDrifted`` / ``NodeClassDrift`` can never be detected.

    Raises ``pydantic.ValidationError`` if the plan carries something the NodeClaim CRD refuses
    (the caller reports it and skips the plan).
    """
    template = nodepool.spec.template
    requirements = _requirements(plan)
    labels = _implied_labels(r.to_core() for r in requirements)
    labels.update(plan.labels)
    labels.update(template.metadata.labels)
    labels[LABEL_NODEPOOL] = plan.nodepool
    annotations = dict(template.metadata.annotations)
    annotations[ANNOTATION_NODEPOOL_HASH] = nodepool_hash(nodepool)
    annotations[ANNOTATION_NODEPOOL_HASH_VERSION] = NODEPOOL_HASH_VERSION
    if nodeclass is not None:
        annotations[NODECLASS_HASH_ANNOTATION] = ec2nodeclass_hash(nodeclass)
        annotations[NODECLASS_HASH_VERSION_ANNOTATION] = NODECLASS_HASH_VERSION
    owners: list[OwnerReference] = []
    if nodepool.metadata.uid:
        owners.append(
            OwnerReference(
                api_version="karpenter.sh/v1",
                kind="NodePool",
                name=nodepool.name,
                uid=nodepool.metadata.uid,
                block_owner_deletion=True,
            )
        )
    taints = [_api_taint(t) for t in plan.taints] if plan.taints else list(template.spec.taints)
    startup = (
        [_api_taint(t) for t in plan.startup_taints] if plan.startup_taints else list(template.spec.startup_taints)
    )
    return NodeClaim(
        metadata=ObjectMeta(
            name=name,
            labels=labels,
            annotations=annotations,
            owner_references=owners,
            finalizers=[TERMINATION_FINALIZER],
        ),
        spec=NodeClaimSpec(
            taints=taints,
            startup_taints=startup,
            requirements=requirements,
            resources=NodeClaimResources(
                requests={k: format_quantity(k, v) for k, v in sorted(plan.requests.items()) if k != "nodes"}
            ),
            node_class_ref=template.spec.node_class_ref,
            expire_after=template.spec.expire_after,
            termination_grace_period=template.spec.termination_grace_period,
        ),
    )


def instance_tags(*, nodeclaim: NodeClaim, nodeclass: EC2NodeClass, cluster_name: str) -> dict[str, str]:
    """Tags for the instance: the EC2NodeClass ``spec.tags`` plus Karpenter's ownership tags."""
    tags = dict(nodeclass.spec.tags)
    tags[TAG_CLUSTER_PREFIX + cluster_name] = "owned"
    tags[TAG_EKS_CLUSTER] = cluster_name
    tags[TAG_NODEPOOL] = nodeclaim.nodepool_name or ""
    tags[TAG_NODECLAIM] = nodeclaim.name
    tags[TAG_NODECLASS] = nodeclass.name
    return tags


def _instance_type_names(nodeclaim: NodeClaim) -> list[str]:
    for req in nodeclaim.spec.requirements:
        if req.key == LABEL_INSTANCE_TYPE and req.operator == "In":
            return list(req.values)
    return []


def launch_request(
    *,
    nodeclaim: NodeClaim,
    nodeclass: EC2NodeClass,
    catalogue: Mapping[str, InstanceType],
    cluster_name: str,
    unavailable: Collection[tuple[str, str, str]] = (),
) -> LaunchRequest:
    """The CreateFleet request for ``nodeclaim``: its instance types in order (cheapest first) that
    still have an available offering within the NodeClaim's zone and capacity-type requirements. Reserved offerings
    the NodeClaim's capacity-reservation requirements rule out are taken off the types passed on.

    ``unavailable`` holds ``(instance type, zone, capacity type)`` that failed earlier in this
    pass (on top of what the catalogue already marks unavailable).

    Raises
    ------
    InsufficientCapacityError
        When no listed type has an available compatible offering left.
    """
    reqs = Requirements.from_node_selector_requirements(nodeclaim.requirements_core())
    zone_req, ct_req = reqs.get(LABEL_ZONE), reqs.get(LABEL_CAPACITY_TYPE)
    offers = OfferingFilter(reqs)
    names = _instance_type_names(nodeclaim) or sorted(catalogue)
    types: list[InstanceType] = []
    zones: set[str] = set()
    capacity_types: set[str] = set()
    for name in names:
        it = catalogue.get(name)
        if it is None:
            continue
        if any(o.reservation_id and not offers.allows(o) for o in it.offerings):
            it = replace(it, offerings=tuple(o for o in it.offerings if not o.reservation_id or offers.allows(o)))
        usable = [
            o
            for o in it.offerings
            if o.available
            and zone_req.has(o.zone)
            and ct_req.has(o.capacity_type)
            and (name, o.zone, o.capacity_type) not in unavailable
        ]
        if not usable:
            continue
        types.append(it)
        zones.update(o.zone for o in usable)
        capacity_types.update(o.capacity_type for o in usable)
    if not types:
        raise InsufficientCapacityError(
            f"NodeClaim {nodeclaim.name}: no available offering left among {len(names)} instance types"
        )
    return LaunchRequest(
        nodeclaim_name=nodeclaim.name,
        nodepool_name=nodeclaim.nodepool_name or "",
        nodeclass=nodeclass,
        instance_types=tuple(types),
        capacity_types=frozenset(capacity_types),
        zones=frozenset(zones),
        labels=dict(nodeclaim.metadata.labels),
        taints=nodeclaim.taints_core(),
        startup_taints=nodeclaim.startup_taints_core(),
        client_token=client_token(name=nodeclaim.name, uid=nodeclaim.metadata.uid or ""),
        tags=instance_tags(nodeclaim=nodeclaim, nodeclass=nodeclass, cluster_name=cluster_name),
        tenancy=tenancy_of(reqs),
    )


def _quantities(resources: Mapping[str, int]) -> dict[str, str]:
    return {k: format_quantity(k, v) for k, v in sorted(resources.items()) if k != "nodes"}


def launched_labels(result: LaunchResult) -> dict[str, str]:
    """The labels a launched NodeClaim gets: its instance's type, zone and capacity type, as Karpenter's launch
    sets them (``[core]:pkg/controllers/nodeclaim/lifecycle/launch.go`` ``PopulateNodeClaimDetails``), its tenancy
    (``karpenter.k8s.aws/instance-tenancy``, as the AWS provider labels it), and for an instance in a capacity
    reservation its id, type and ``-interruptible`` (the reserved offering's labels)."""
    labels = {
        LABEL_INSTANCE_TYPE: result.instance_type,
        LABEL_ZONE: result.zone,
        LABEL_CAPACITY_TYPE: result.capacity_type,
        LABEL_INSTANCE_TENANCY: result.tenancy,
    }
    labels.update(
        reservation_labels(
            reservation_id=result.reservation_id,
            reservation_type=result.reservation_type,
            interruptible=result.reservation_interruptible,
        )
    )
    return labels


def mark_launched(
    *,
    nodeclaim: NodeClaim,
    result: LaunchResult,
    catalogue: Mapping[str, InstanceType],
    now: float,
) -> NodeClaim:
    """A copy of ``nodeclaim`` with the launch written to its status.

    ``providerID``, ``imageID``, ``capacity`` and ``allocatable`` (of the launched type, from the
    catalogue: cpu, memory, pods, ephemeral-storage, ...), ``Launched=True``, and
    ``Registered``/``Initialized`` ``Unknown`` (``now`` is epoch seconds).
    """
    out = nodeclaim.model_copy(deep=True)
    out.status.provider_id = result.provider_id
    out.status.image_id = result.image_id or None
    it = catalogue.get(result.instance_type)
    if it is not None:
        out.status.capacity = _quantities(it.capacity)
        out.status.allocatable = _quantities(it.allocatable)
    stamp = to_rfc3339(now)
    out.set_condition(CONDITION_LAUNCHED, "True", "Launched", "", stamp)
    if out.condition(CONDITION_REGISTERED) is None:
        out.set_condition(CONDITION_REGISTERED, "Unknown", "AwaitingReconciliation", "", stamp)
    if out.condition(CONDITION_INITIALIZED) is None:
        out.set_condition(CONDITION_INITIALIZED, "Unknown", "AwaitingReconciliation", "", stamp)
    return out
