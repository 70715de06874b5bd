"""Resolve an EC2NodeClass against EC2: subnets, security groups, AMIs and the instance profile.

Semantics follow Karpenter's AWS provider (``pkg/providers/subnet``, ``securitygroup``,
``amifamily/ami.go``, ``al2023.go``, ``instanceprofile``):

* selector terms are ORed; inside a term every tag must match (ANDed); a tag value ``"*"`` only
  requires the key; ``id`` (and ``name`` for security groups) select exactly.
* per zone the subnet with the most available IPv4 addresses is used (ties: lowest id).
* AMIs: ``alias: al2023@latest`` / ``al2023@v20240625`` reads the EKS-published SSM parameters
  ``/aws/service/eks/optimized-ami/<k8s>/amazon-linux-2023/<x86_64|arm64>/<variant>/recommended/image_id``
  (pinned: ``.../<variant>/amazon-eks-node-al2023-<arch>-<variant>-<k8s>-<version>/image_id``) for
  the ``standard``, ``nvidia`` (x86_64, arm64) and ``neuron`` (x86_64) variants, then DescribeImages for
  their names and creation dates (an id EC2 does not list as available is dropped); other terms
  (``id``, ``tags``, ``name``, ``owner``, ``ssmParameter``) go through DescribeImages/GetParameter
  and the newest image per architecture wins.
* instance profile: ``spec.instanceProfile`` as is; with ``spec.role``, the provider's configured
  profile, else one created for the role (``nodesmith_<cluster>_<hash>``).
* capacity reservations (feature gate ``ReservedCapacity``, on by default as in Karpenter):
  ``capacityReservationSelectorTerms`` through DescribeCapacityReservations
  (:mod:`nodesmith.adapters.aws.capacity_reservations`); with the gate off the terms are ignored.

Results are cached per EC2NodeClass spec for ``ttl_seconds`` (60 s, Karpenter's discovery refresh).
Whatever does not resolve is named in one :class:`NodeClassNotReadyError`; :meth:`NodeClassResolver.resolution`
instead reports each part, resolved or not, for the class's status.

The pieces live by concern: this module holds the resolver and what it returns (:class:`ResolvedNodeClass`; its
:class:`Subnet`, :class:`SecurityGroup` and :class:`Image` are core types, :mod:`nodesmith.core.nodeclass_parts`);
the AMI lookups, AMI compatibility and alias naming are in :mod:`nodesmith.adapters.aws.amis`, spec reading, tag
filters and block devices in :mod:`nodesmith.adapters.aws.nodeclass_spec`. Their public names are re-exported here.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nodesmith.adapters.aws.amis import (
    AmiCompatibility,
    AmiLookup,
    Image,
    required_variant,
    ssm_alias_parameter,
)
from nodesmith.adapters.aws.bootstrap import SUPPORTED_AMI_FAMILIES, unsupported_kubelet
from nodesmith.adapters.aws.capacity_reservations import ReservationAvailability, describe_capacity_reservations
from nodesmith.adapters.aws.config import DEFAULT_LAUNCH, SYSTEM_CLOCKS, AwsClients, Clocks, NodeLaunchSettings
from nodesmith.adapters.aws.nodeclass_spec import (
    GIB,
    ami_family,
    block_device_mappings,
    error_code,
    field_value,
    nodeclass_json,
    root_volume_bytes,
    tag_filters,
)
from nodesmith.core.errors import NodeClassNotReadyError
from nodesmith.core.instancetypes import KubeletSettings
from nodesmith.core.nodeclass_parts import SecurityGroup, Subnet
from nodesmith.core.nodeclass_status import (
    AMIS_READY,
    CAPACITY_RESERVATIONS_READY,
    INSTANCE_PROFILE_READY,
    SECURITY_GROUPS_READY,
    SUBNETS_READY,
    VALIDATION_SUCCEEDED,
    Check,
    ResolvedParts,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from nodesmith.core.capacityreservations import CapacityReservation

__all__ = [
    "AmiCompatibility",
    "Image",
    "NodeClassResolver",
    "ResolvedNodeClass",
    "SecurityGroup",
    "Subnet",
    "block_device_mappings",
    "field_value",
    "nodeclass_json",
    "required_variant",
    "root_volume_bytes",
    "ssm_alias_parameter",
]


@dataclass(frozen=True, slots=True)
class ResolvedNodeClass:
    """An EC2NodeClass resolved against EC2.

    ``subnets`` maps zone -> the subnet launches use there; ``spec`` is the node class spec as
    Karpenter JSON (camelCase) for the launch template; ``root_volume_bytes`` the root EBS size;
    ``capacity_reservations`` the active reservations its ``capacityReservationSelectorTerms`` select (counts as
    described; :class:`ReservationAvailability` holds the current ones); ``selected_subnets`` every subnet the
    ``subnetSelectorTerms`` selected (for ``status.subnets``), not only the one per zone launches use.
    """

    name: str
    subnets: Mapping[str, Subnet]
    security_groups: tuple[SecurityGroup, ...]
    images: tuple[Image, ...]
    instance_profile: str
    spec: Mapping[str, Any] = field(default_factory=dict)
    kubelet: KubeletSettings | None = None
    root_volume_bytes: int = 20 * GIB
    capacity_reservations: tuple[CapacityReservation, ...] = ()
    selected_subnets: tuple[Subnet, ...] = ()

    @property
    def compatibility(self) -> AmiCompatibility:
        """The node class's compatibility predicate (AMIs, Nitro, nested virtualization) for the catalogue and
        launches."""
        cpu = field_value(self.spec, "cpuOptions") or {}
        return AmiCompatibility(
            self.images,
            ami_family(self.spec),
            nitro_only=field_value(self.spec, "connectionTracking") is not None,
            nested_virtualization=field_value(cpu, "nestedVirtualization") == "enabled",
        )

    @property
    def zones(self) -> frozenset[str]:
        """Zones the node class has a subnet in."""
        return frozenset(self.subnets)

    @property
    def instance_store_policy(self) -> str | None:
        """``spec.instanceStorePolicy`` (``RAID0``) or None."""
        value = self.spec.get("instanceStorePolicy")
        return str(value) if value else None


@dataclass(slots=True)
class _Parts:
    """Each part of one resolution; ``images`` / ``profile`` None when the part could not be told."""

    subnets: list[Subnet] = field(default_factory=list)
    groups: list[SecurityGroup] = field(default_factory=list)
    images: list[Image] | None = None
    profile: str | None = None
    reservations: list[CapacityReservation] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    failed: dict[str, tuple[str, str]] = field(default_factory=dict)


def _terms_text(terms: Sequence[Mapping[str, Any]]) -> str:
    return json.dumps(list(terms), sort_keys=True, separators=(",", ":"))


class NodeClassResolver:
    """Resolve EC2NodeClasses with boto3 clients: ``clients.ec2`` and ``clients.ssm`` (required), ``clients.iam``
    for role-based instance profiles.

    ``kubernetes_version`` (``"1.31"`` or a callable returning it) selects alias AMIs; ``launch`` gives the
    instance profile used for node classes whose ``role`` is ``launch.node_role`` and the ``ReservedCapacity``
    feature gate. A resolution is reused for ``ttl_seconds`` (``clocks.monotonic``); capacity reservation end
    dates are compared with ``clocks.wall``. ``reservations`` receives the counts each describe of capacity
    reservations reads. Thread-safe: one resolution runs at a time, and a caller that finds one under way waits for
    it and reads its result. Raises ``ValueError`` when ``clients`` lacks ``ec2`` or ``ssm``.
    """

    def __init__(
        self,
        *,
        clients: AwsClients,
        cluster_name: str,
        kubernetes_version: str | Callable[[], str],
        launch: NodeLaunchSettings = DEFAULT_LAUNCH,
        ttl_seconds: float = 60.0,
        clocks: Clocks = SYSTEM_CLOCKS,
        reservations: ReservationAvailability | None = None,
    ) -> None:
        if clients.ec2 is None or clients.ssm is None:
            raise ValueError("NodeClassResolver needs clients.ec2 and clients.ssm")
        self._ec2 = clients.ec2
        self._ssm = clients.ssm
        self._iam = clients.iam
        self._cluster = cluster_name
        self._k8s_version = kubernetes_version
        self._amis = AmiLookup(ec2=self._ec2, ssm=self._ssm, kubernetes_version=self.kubernetes_version)
        self._instance_profile = launch.instance_profile
        self._profile_role = launch.node_role.rsplit("/", 1)[-1] if launch.node_role else None
        self._ttl = ttl_seconds
        self._clock = clocks.monotonic
        self._wall = clocks.wall
        self._reserved_capacity = launch.reserved_capacity
        self.reservations = reservations if reservations is not None else ReservationAvailability(clock=self._clock)
        self._lock = threading.Lock()
        self._resolving = threading.Lock()
        self._cache: dict[str, tuple[float, ResolvedNodeClass]] = {}
        self._profiles: dict[str, str] = {}

    def kubernetes_version(self) -> str:
        """The cluster's Kubernetes minor version (``"1.31"``)."""
        return self._k8s_version() if callable(self._k8s_version) else self._k8s_version

    def resolve(self, *, nodeclass: Any, fresh_for: float = 0.0) -> ResolvedNodeClass:
        """Resolve ``nodeclass`` (model or manifest dict); cached per spec for the TTL.

        ``fresh_for`` (seconds) resolves again when the cached result would expire within that
        long (refresh ahead, off the launch path). Raises ``NodeClassNotReadyError`` naming every
        selector that matched nothing, and ``QuantityError`` for an invalid volume size.
        """
        name, spec = nodeclass_json(nodeclass)
        found = self._lookup(name, spec, fresh_for=fresh_for)
        if isinstance(found, ResolvedNodeClass):
            return found
        raise NodeClassNotReadyError(
            f"EC2NodeClass {name or '?'} is not ready: " + "; ".join(found.problems), problems=found.failed
        )

    def resolution(self, *, nodeclass: Any) -> ResolvedParts:
        """What each part of ``nodeclass`` (model or manifest dict) resolved to, for its status
        (:mod:`nodesmith.core.nodeclass_status`): the readiness checks and every selected subnet, the security
        groups, the AMIs and the instance profile, even when another part did not resolve. An unsupported alias or
        an AMI lookup that failed, and an instance profile that could not be made, are ``None`` (not told).
        Resolves as :meth:`resolve` does (the same cache), so a ready class costs no EC2 call within the TTL. Raises
        ``NodeClassNotReadyError`` only when it does not name the part that failed, ``QuantityError`` for an invalid
        volume size.
        """
        name, spec = nodeclass_json(nodeclass)
        found = self._lookup(name, spec)
        if isinstance(found, ResolvedNodeClass):
            return ResolvedParts(
                checks=self._checks({}),
                subnets=found.selected_subnets,
                security_groups=found.security_groups,
                images=found.images,
                instance_profile=found.instance_profile,
            )
        return ResolvedParts(
            checks=self._checks(found.failed),
            subnets=tuple(found.subnets),
            security_groups=tuple(found.groups),
            images=None if found.images is None else tuple(found.images),
            instance_profile=found.profile,
        )

    def checks(self, *, nodeclass: Any) -> list[Check]:
        """One readiness check per part of ``nodeclass`` (model or manifest dict), in Karpenter's condition types:
        ``SubnetsReady``, ``SecurityGroupsReady``, ``AMIsReady``, ``InstanceProfileReady``, ``ValidationSucceeded``
        (the ``kubelet`` settings the AMI family can apply) and, with the ``ReservedCapacity`` gate,
        ``CapacityReservationsReady`` (:mod:`nodesmith.core.nodeclass_status`): the
        checks of :meth:`resolution`, which raises what this raises.
        """
        return list(self.resolution(nodeclass=nodeclass).checks)

    def _checks(self, failed: Mapping[str, tuple[str, str]]) -> tuple[Check, ...]:
        types = [SUBNETS_READY, SECURITY_GROUPS_READY, AMIS_READY, INSTANCE_PROFILE_READY, VALIDATION_SUCCEEDED]
        if self._reserved_capacity:
            types.append(CAPACITY_RESERVATIONS_READY)
        out = []
        for type_ in types:
            reason, message = failed.get(type_, ("", ""))
            out.append(Check(type=type_, ok=type_ not in failed, reason=reason, message=message))
        return tuple(out)

    def invalidate(self) -> None:
        """Forget cached resolutions (after a launch failed on a stale subnet or AMI)."""
        with self._lock:
            self._cache.clear()

    @staticmethod
    def _key(name: str, spec: Mapping[str, Any]) -> str:
        return name + "\x00" + json.dumps(spec, sort_keys=True, default=str)

    def _lookup(self, name: str, spec: Mapping[str, Any], *, fresh_for: float = 0.0) -> ResolvedNodeClass | _Parts:
        """The resolution of ``name``/``spec``: from the cache (see :meth:`_cached`), else read now and remembered
        when every part resolved; the parts read when one did not. One read runs at a time: a caller that finds one
        under way waits for it and takes its cached result instead of reading again."""
        hit = self._cached(name, spec, fresh_for=fresh_for)
        if hit is not None:
            return hit
        with self._resolving:
            hit = self._cached(name, spec, fresh_for=fresh_for)
            if hit is not None:
                return hit
            parts = self._parts(name, spec)
            return parts if parts.problems else self._remember(name, spec, parts)

    def _cached(self, name: str, spec: Mapping[str, Any], *, fresh_for: float = 0.0) -> ResolvedNodeClass | None:
        hit = self._cache.get(self._key(name, spec))
        if hit and self._clock() + fresh_for < hit[0]:
            return hit[1]
        return None

    def _remember(self, name: str, spec: Mapping[str, Any], parts: _Parts) -> ResolvedNodeClass:
        by_zone: dict[str, Subnet] = {}
        for subnet in sorted(parts.subnets, key=lambda s: (-s.available_ips, s.id)):
            by_zone.setdefault(subnet.zone, subnet)
        resolved = ResolvedNodeClass(
            name=name,
            subnets=by_zone,
            security_groups=tuple(parts.groups),
            images=tuple(parts.images or ()),
            instance_profile=parts.profile or "",
            spec=dict(spec),
            kubelet=KubeletSettings.from_kubelet(field_value(spec, "kubelet"), ami_family=ami_family(spec)),
            root_volume_bytes=root_volume_bytes(spec),
            capacity_reservations=tuple(parts.reservations),
            selected_subnets=tuple(parts.subnets),
        )
        now = self._clock()
        with self._lock:
            self._cache = {k: v for k, v in self._cache.items() if now < v[0]}
            self._cache[self._key(name, spec)] = (now + self._ttl, resolved)
        return resolved

    def _parts(self, name: str, spec: Mapping[str, Any]) -> _Parts:
        parts = _Parts()
        problems, failed = parts.problems, parts.failed
        subnet_terms = list(field_value(spec, "subnetSelectorTerms") or [])
        sg_terms = list(field_value(spec, "securityGroupSelectorTerms") or [])
        ami_terms = list(field_value(spec, "amiSelectorTerms") or [])
        parts.subnets = self.subnets(subnet_terms) if subnet_terms else []
        if not parts.subnets:
            problems.append(f"no subnet matched subnetSelectorTerms {_terms_text(subnet_terms)}")
            failed[SUBNETS_READY] = (
                "SubnetsNotFound",
                f"SubnetSelector did not match any Subnets: subnetSelectorTerms {_terms_text(subnet_terms)}",
            )
        parts.groups = self.security_groups(sg_terms) if sg_terms else []
        if not parts.groups:
            problems.append(f"no security group matched securityGroupSelectorTerms {_terms_text(sg_terms)}")
            failed[SECURITY_GROUPS_READY] = (
                "SecurityGroupsNotFound",
                "SecurityGroupSelector did not match any SecurityGroups: "
                f"securityGroupSelectorTerms {_terms_text(sg_terms)}",
            )
        parts.images = []
        family = ami_family(spec)
        if family not in SUPPORTED_AMI_FAMILIES:
            message = (
                f"amiFamily {family}: Nodesmith bootstraps {', '.join(SUPPORTED_AMI_FAMILIES)} nodes only, and a "
                f"{family} node launched without its own bootstrap would never join the cluster"
            )
            parts.images = None
            problems.append(message)
            failed[AMIS_READY] = ("UnsupportedAMIFamily", message)
        elif ami_terms:
            try:
                parts.images = self.images(ami_terms)
            except NodeClassNotReadyError as exc:
                parts.images = None
                problems.append(str(exc))
                failed[AMIS_READY] = exc.problems.get(AMIS_READY, ("AMINotFound", str(exc)))
        if parts.images == []:
            problems.append(f"no AMI matched amiSelectorTerms {_terms_text(ami_terms)}")
            failed[AMIS_READY] = (
                "AMINotFound",
                f"AMISelector did not match any AMIs: amiSelectorTerms {_terms_text(ami_terms)}",
            )
        if kubelet_problem := unsupported_kubelet(family, field_value(spec, "kubelet")):
            problems.append(kubelet_problem)
            failed[VALIDATION_SUCCEEDED] = ("UnsupportedKubeletConfiguration", kubelet_problem)
        try:
            parts.profile = self.instance_profile(spec)
        except NodeClassNotReadyError as exc:
            # neither role nor instanceProfile: Karpenter writes the (empty) spec.instanceProfile
            unset = not field_value(spec, "role") and not field_value(spec, "instanceProfile")
            parts.profile = "" if unset else None
            problems.append(str(exc))
            failed[INSTANCE_PROFILE_READY] = exc.problems.get(
                INSTANCE_PROFILE_READY, ("InstanceProfileCreationFailed", str(exc))
            )
        reservation_terms = list(field_value(spec, "capacityReservationSelectorTerms") or [])
        if self._reserved_capacity and reservation_terms:
            described_at = self._clock()
            try:
                parts.reservations = describe_capacity_reservations(
                    ec2=self._ec2, terms=reservation_terms, now=self._wall()
                )
            except NodeClassNotReadyError as exc:
                problems.append(str(exc))
                failed[CAPACITY_RESERVATIONS_READY] = ("CapacityReservationsNotFound", str(exc))
            self.reservations.observe(parts.reservations, described_at=described_at)
        return parts

    # -- subnets and security groups -------------------------------------------------------------

    def subnets(self, terms: Sequence[Mapping[str, Any]]) -> list[Subnet]:
        """Every available subnet matching any term (DescribeSubnets once per term)."""
        found: dict[str, Subnet] = {}
        for term in terms:
            filters: list[dict[str, Any]] = [{"Name": "state", "Values": ["available"]}]
            if term_id := field_value(term, "id"):
                filters.append({"Name": "subnet-id", "Values": [term_id]})
            filters += tag_filters(field_value(term, "tags") or {})
            for page in self._ec2.get_paginator("describe_subnets").paginate(Filters=filters):
                for s in page.get("Subnets", []):
                    found[s["SubnetId"]] = Subnet(
                        id=s["SubnetId"],
                        zone=s["AvailabilityZone"],
                        zone_id=s.get("AvailabilityZoneId", ""),
                        available_ips=int(s.get("AvailableIpAddressCount", 0)),
                    )
        return list(found.values())

    def security_groups(self, terms: Sequence[Mapping[str, Any]]) -> list[SecurityGroup]:
        """Every security group matching any term (by id, name or tags)."""
        found: dict[str, SecurityGroup] = {}
        for term in terms:
            filters: list[dict[str, Any]] = []
            if term_id := field_value(term, "id"):
                filters.append({"Name": "group-id", "Values": [term_id]})
            if term_name := field_value(term, "name"):
                filters.append({"Name": "group-name", "Values": [term_name]})
            filters += tag_filters(field_value(term, "tags") or {})
            if not filters:
                continue
            for page in self._ec2.get_paginator("describe_security_groups").paginate(Filters=filters):
                for g in page.get("SecurityGroups", []):
                    found[g["GroupId"]] = SecurityGroup(id=g["GroupId"], name=g.get("GroupName", ""))
        return sorted(found.values(), key=lambda g: g.id)

    # -- AMIs ------------------------------------------------------------------------------------

    def images(self, terms: Sequence[Mapping[str, Any]]) -> list[Image]:
        """AMIs for the terms (:meth:`AmiLookup.images <nodesmith.adapters.aws.amis.AmiLookup.images>`)."""
        return self._amis.images(terms)

    # -- instance profile ------------------------------------------------------------------------

    def instance_profile(self, spec: Mapping[str, Any]) -> str:
        """Instance profile name for the node class (see the module docstring)."""
        if profile := field_value(spec, "instanceProfile"):
            return str(profile)
        role = field_value(spec, "role")
        if not role:
            message = "neither spec.role nor spec.instanceProfile is set"
            raise NodeClassNotReadyError(
                message, problems={INSTANCE_PROFILE_READY: ("InstanceProfileNotFound", message)}
            )
        if self._instance_profile and self._profile_role in (None, str(role).rsplit("/", 1)[-1]):
            return self._instance_profile
        if self._iam is None:
            raise NodeClassNotReadyError(f"spec.role {role!r}: no instance profile configured and no IAM client")
        with self._lock:
            if role in self._profiles:
                return self._profiles[role]
            name = self._ensure_profile(str(role))
            self._profiles[role] = name
            return name

    def _ensure_profile(self, role: str) -> str:
        role_name = role.rsplit("/", 1)[-1]
        digest = hashlib.sha256(f"{self._cluster}/{role_name}".encode()).hexdigest()[:16]
        name = f"nodesmith_{self._cluster}_{digest}"[:128]
        assert self._iam is not None
        try:
            self._iam.create_instance_profile(
                InstanceProfileName=name,
                Tags=[{"Key": f"kubernetes.io/cluster/{self._cluster}", "Value": "owned"}],
            )
        except Exception as exc:
            if error_code(exc) != "EntityAlreadyExists":
                raise NodeClassNotReadyError(f"spec.role {role!r}: cannot create instance profile: {exc}") from exc
        profile = self._iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
        if role_name not in [r["RoleName"] for r in profile.get("Roles", [])]:
            for existing in profile.get("Roles", []):
                self._iam.remove_role_from_instance_profile(InstanceProfileName=name, RoleName=existing["RoleName"])
            try:
                self._iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=role_name)
            except Exception as exc:
                raise NodeClassNotReadyError(
                    f"spec.role {role!r}: cannot add it to instance profile {name}: {exc}"
                ) from exc
        return name
