"""What drift judges a node against: the static hashes Nodesmith stamps on NodeClaims, what an EC2NodeClass
resolves to, and the per-NodePool :class:`DriftBasis` that bundles them for :func:`~.drift.drift_of`.

* :func:`nodepool_hash` — Karpenter ``NodePool.Hash`` (``[core]:pkg/apis/v1/nodepool.go``), stamped as
  ``karpenter.sh/nodepool-hash`` with ``karpenter.sh/nodepool-hash-version`` :data:`NODEPOOL_HASH_VERSION`.
* :func:`ec2nodeclass_hash` — Karpenter ``EC2NodeClass.Hash`` (``[aws]:pkg/apis/v1/ec2nodeclass.go``), stamped as
  ``karpenter.k8s.aws/ec2nodeclass-hash`` with its version annotation :data:`NODECLASS_HASH_VERSION`.
* :class:`NodeClassResolution` — the AMIs, subnets, security groups and capacity reservations the node class's
  selector terms resolve to now (the dynamic drift checks of ``[aws]:pkg/cloudprovider/drift.go``).

Hashes are decimal strings: the first 64 bits of sha256 over canonical JSON; lists Karpenter hashes as sets
(hashstructure ``SlicesAsSets``) are sorted and deduplicated first. A hash stamped with another version is not
comparable (:func:`~.drift.drift_of` skips it, as Karpenter does).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from nodesmith.core.requirements import RequirementError, Requirements

if TYPE_CHECKING:
    from nodesmith.core.api.ec2nodeclass import EC2NodeClass
    from nodesmith.core.api.nodepool import NodePool
    from nodesmith.core.model import NodeSelectorRequirement

__all__ = [
    "NODECLASS_HASH_ANNOTATION",
    "NODECLASS_HASH_VERSION",
    "NODECLASS_HASH_VERSION_ANNOTATION",
    "NODEPOOL_HASH_ANNOTATION",
    "NODEPOOL_HASH_VERSION",
    "NODEPOOL_HASH_VERSION_ANNOTATION",
    "DriftBasis",
    "NodeClassResolution",
    "ResolvedAMI",
    "drift_basis",
    "ec2nodeclass_hash",
    "nodepool_hash",
    "resolution_from_nodeclass",
]

NODEPOOL_HASH_ANNOTATION: Final = "karpenter.sh/nodepool-hash"
NODEPOOL_HASH_VERSION_ANNOTATION: Final = "karpenter.sh/nodepool-hash-version"
NODEPOOL_HASH_VERSION: Final = "nodesmith-v1"
"""Version stamped next to :func:`nodepool_hash` values; distinct from Karpenter's ``v3`` so a
cluster migrated from Karpenter is not seen as entirely drifted."""
NODECLASS_HASH_ANNOTATION: Final = "karpenter.k8s.aws/ec2nodeclass-hash"
NODECLASS_HASH_VERSION_ANNOTATION: Final = "karpenter.k8s.aws/ec2nodeclass-hash-version"
NODECLASS_HASH_VERSION: Final = "nodesmith-v1"


def _digest(value: Any) -> str:
    """Decimal of the first 8 bytes of sha256 over canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return str(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big"))


def _as_set(items: list[Any]) -> list[Any]:
    """A list hashed as a set (hashstructure ``SlicesAsSets``): sorted by canonical JSON, deduplicated."""
    seen = {json.dumps(i, sort_keys=True, separators=(",", ":")): i for i in items}
    return [seen[k] for k in sorted(seen)]


def nodepool_hash(nodepool: NodePool) -> str:
    """Static-drift hash of ``spec.template`` without ``requirements`` (Karpenter ``NodePool.Hash``).

    Covers template labels, annotations, taints, startup taints (both as sets), nodeClassRef,
    expireAfter and terminationGracePeriod, with defaults applied (writing ``expireAfter: 720h``
    explicitly hashes like leaving it out). ``weight``, ``limits`` and ``disruption`` never drift.
    Returns a decimal string (sha256 of stable JSON, first 64 bits).
    """
    template = nodepool.spec.template.model_dump(by_alias=True, exclude_none=True, mode="json")
    spec = template.get("spec", {})
    spec.pop("requirements", None)
    for key in ("taints", "startupTaints"):
        if key in spec:
            spec[key] = _as_set(spec[key])
    return _digest(template)


_NODECLASS_HASH_IGNORED = (
    "subnetSelectorTerms",
    "securityGroupSelectorTerms",
    "capacityReservationSelectorTerms",
    "amiSelectorTerms",
    "ipPrefixCount",
    "amiFamily",
)


def ec2nodeclass_hash(nodeclass: EC2NodeClass) -> str:
    """Static-drift hash of an EC2NodeClass (Karpenter ``EC2NodeClass.Hash``, ``[aws]:pkg/apis/v1/ec2nodeclass.go``).

    ``spec`` without the selector terms (subnets, security groups, AMIs, capacity reservations,
    which drift dynamically), ``ipPrefixCount`` and the literal ``amiFamily``, plus the *resolved*
    AMI family (so ``amiFamily: AL2023`` next to an ``al2023@latest`` alias does not drift). Lists
    hash as sets. Changes to userData, tags, role/instanceProfile, kubelet, blockDeviceMappings,
    metadataOptions, ... change the hash. Returns a decimal string.
    """
    spec = nodeclass.spec.model_dump(by_alias=True, exclude_none=True, mode="json")
    for key in _NODECLASS_HASH_IGNORED:
        spec.pop(key, None)
    for key, value in list(spec.items()):
        if isinstance(value, list):
            spec[key] = _as_set(value)
    return _digest({"spec": spec, "amiFamily": nodeclass.ami_family})


@dataclass(frozen=True, slots=True)
class ResolvedAMI:
    """An AMI the node class resolves to, with the requirements (arch, GPU, ...) it is meant for."""

    id: str
    requirements: tuple[NodeSelectorRequirement, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeClassResolution:
    """What an EC2NodeClass's selector terms resolve to now; None for anything unknown.

    ``amis`` keep the node class's order (newest first, as ``status.amis``).
    """

    amis: tuple[ResolvedAMI, ...] | None = None
    subnet_ids: frozenset[str] | None = None
    security_group_ids: frozenset[str] | None = None
    capacity_reservation_ids: frozenset[str] | None = None


def resolution_from_nodeclass(nodeclass: EC2NodeClass) -> NodeClassResolution:
    """The resolution an EC2NodeClass states: its selector terms when they are all ``id`` terms
    (nothing to look up), else its ``status`` (amis, subnets, securityGroups), else unknown."""
    from nodesmith.core.model import NodeSelectorRequirement

    spec, status = nodeclass.spec, nodeclass.status
    amis: tuple[ResolvedAMI, ...] | None = None
    if all(t.id for t in spec.ami_selector_terms):
        amis = tuple(ResolvedAMI(id=t.id) for t in spec.ami_selector_terms if t.id)
    elif status is not None and status.amis:
        resolved: list[ResolvedAMI] = []
        for ami in status.amis:
            reqs = tuple(
                NodeSelectorRequirement(
                    key=str(r.get("key", "")),
                    operator=str(r.get("operator", "")),
                    values=tuple(str(v) for v in r.get("values") or ()),
                )
                for r in ami.requirements
            )
            resolved.append(ResolvedAMI(id=ami.id, requirements=reqs))
        amis = tuple(resolved)
    subnets: frozenset[str] | None = None
    if all(t.id for t in spec.subnet_selector_terms):
        subnets = frozenset(t.id for t in spec.subnet_selector_terms if t.id)
    elif status is not None and status.subnets:
        subnets = frozenset(s.id for s in status.subnets)
    groups: frozenset[str] | None = None
    if all(t.id for t in spec.security_group_selector_terms):
        groups = frozenset(t.id for t in spec.security_group_selector_terms if t.id)
    elif status is not None and status.security_groups:
        groups = frozenset(g.id for g in status.security_groups)
    reservations: frozenset[str] | None = None
    if status is not None and status.capacity_reservations:
        reservations = frozenset(r.id for r in status.capacity_reservations)
    return NodeClassResolution(
        amis=amis, subnet_ids=subnets, security_group_ids=groups, capacity_reservation_ids=reservations
    )


@dataclass(frozen=True, slots=True)
class DriftBasis:
    """What :func:`~.drift.drift_of` compares every node of one NodePool and EC2NodeClass against, worked out once per
    pass rather than once per node (:func:`drift_basis`): the NodePool's static hash (:func:`nodepool_hash`) and
    requirements (None when they cannot be read: such a NodePool never drifts its nodes on requirements), the
    EC2NodeClass's static hash (:func:`ec2nodeclass_hash`, None without a node class) and its resolution (the
    one given, else :func:`resolution_from_nodeclass`; None when unknown). ``key`` holds all of it by value (with
    the NodePool's and node class's names, which the drift messages carry): two bases with equal keys judge every
    node alike."""

    nodepool_hash: str
    requirements: Requirements | None
    nodeclass_hash: str | None
    resolution: NodeClassResolution | None
    key: tuple[object, ...] = ()


def drift_basis(
    nodepool: NodePool, nodeclass: EC2NodeClass | None, resolution: NodeClassResolution | None
) -> DriftBasis:
    """The :class:`DriftBasis` of ``nodepool`` and ``nodeclass`` (``resolution``: what the node class resolves to
    now, None to take what it states)."""
    core: tuple[NodeSelectorRequirement, ...] | None
    try:
        core = nodepool.requirements_core()
        requirements: Requirements | None = Requirements.from_node_selector_requirements(core)
    except RequirementError:
        core, requirements = None, None
    if resolution is None and nodeclass is not None:
        resolution = resolution_from_nodeclass(nodeclass)
    pool_hash = nodepool_hash(nodepool)
    class_hash = ec2nodeclass_hash(nodeclass) if nodeclass is not None else None
    return DriftBasis(
        nodepool_hash=pool_hash,
        requirements=requirements,
        nodeclass_hash=class_hash,
        resolution=resolution,
        key=(nodepool.name, pool_hash, core, nodeclass.name if nodeclass is not None else None, class_hash, resolution),
    )
