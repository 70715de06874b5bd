"""Launching one NodeClaim's instance: offerings, launch templates, CreateFleet, capacity errors.

:class:`FleetLauncher` resolves the EC2NodeClass, picks offerings around the unavailable-offerings
cache (:func:`~nodesmith.adapters.aws.fleet.choose_offerings`), ensures one launch template per AMI
with the NodeClaim's labels, taints and the node class's kubelet in nodeadm user data, calls
CreateFleet ``instant`` and hands every capacity error in the answer to ``remember`` (so the next
plan avoids those offerings), retrying once with fresh templates when EC2 says a template vanished. A launch into a
capacity reservation uses a launch template of its own that targets it, takes one off the reservation's available
count when it succeeds, and sets that count to 0 on a capacity error (Karpenter's ``MarkLaunched`` /
``MarkUnavailable``; those errors stay out of the 3-minute unavailable-offerings cache).
The request and answer shapes are in :mod:`nodesmith.adapters.aws.fleet`, the tags in
:mod:`nodesmith.adapters.aws.tags`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from nodesmith.adapters.aws.bootstrap import NodeUserData, node_user_data
from nodesmith.adapters.aws.fleet import (
    FleetChoice,
    build_create_fleet_request,
    capacity_errors,
    choose_offerings,
    client_token,
    read_create_fleet_response,
)
from nodesmith.adapters.aws.instances import NODECLASS_TAG, NODEPOOL_TAG
from nodesmith.adapters.aws.launch_template import JoinCluster, LaunchTemplateSpec
from nodesmith.adapters.aws.nodeclass import field_value
from nodesmith.adapters.aws.nodeclass_spec import ami_family
from nodesmith.adapters.aws.tags import launch_tags, static_tags
from nodesmith.core.capacityreservations import reservation_labels
from nodesmith.core.errors import InsufficientCapacityError, LaunchError
from nodesmith.core.model import CAPACITY_TYPE_RESERVED
from nodesmith.core.ports import LaunchResult
from nodesmith.core.tenancy import LABEL_INSTANCE_TENANCY

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from nodesmith.adapters.aws.capacity_reservations import ReservationAvailability
    from nodesmith.adapters.aws.fleet import Override
    from nodesmith.adapters.aws.launch_template import LaunchTemplates
    from nodesmith.adapters.aws.nodeclass import NodeClassResolver, ResolvedNodeClass
    from nodesmith.core.errors import UnavailableOffering
    from nodesmith.core.model import InstanceType
    from nodesmith.core.ports import LaunchRequest

__all__ = ["CAPACITY_TYPE_LABEL", "TEMPLATE_NOT_FOUND_CODES", "FleetLauncher", "NodeBootstrap"]

LOG = logging.getLogger(__name__)

CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"

TEMPLATE_NOT_FOUND_CODES = ("InvalidLaunchTemplateName.NotFoundException", "InvalidLaunchTemplateId.NotFound")
"""CreateFleet error codes meaning a launch template was deleted behind our cache: recreate it once."""


@dataclass(frozen=True)
class NodeBootstrap:
    """What node user data needs to join the cluster: name, API endpoint, CA (base64) and service CIDR.

    ``cluster_cidr`` is called only when a launch template is written (it may read EKS
    DescribeCluster and raise ``NodeClassNotReadyError``).
    """

    cluster_name: str
    cluster_endpoint: str
    cluster_ca: str
    cluster_cidr: Callable[[], str]


class FleetLauncher:
    """Launch instances with CreateFleet ``instant`` for :meth:`Ec2CloudProvider.create`.

    ``unavailable(type, zone, capacity type)`` tells whether an offering is marked unavailable;
    ``remember`` receives the capacity errors of every CreateFleet answer but a reserved launch's, which go to
    ``reservations``. ``reserved_capacity`` (the ``ReservedCapacity`` gate) makes other launches opt out of open ODCRs.
    """

    def __init__(
        self,
        *,
        ec2: Any,
        nodeclasses: NodeClassResolver,
        launch_templates: LaunchTemplates,
        unavailable: Callable[[str, str, str], bool],
        remember: Callable[[Sequence[UnavailableOffering]], None],
        bootstrap: NodeBootstrap,
        reservations: ReservationAvailability | None = None,
        reserved_capacity: bool = True,
    ) -> None:
        self._ec2 = ec2
        self._reservations = reservations
        self._reserved_capacity = reserved_capacity
        self._nodeclasses = nodeclasses
        self._launch_templates = launch_templates
        self._unavailable = unavailable
        self._remember = remember
        self._bootstrap = bootstrap

    def create(self, *, request: LaunchRequest) -> LaunchResult:
        """Launch one instance for ``request`` with CreateFleet instant (see :mod:`.fleet`).

        Capacity errors go to ``remember``. Raises ``NodeClassNotReadyError``,
        ``InsufficientCapacityError`` (also when no offering is usable) or ``LaunchError``.
        """
        resolved = self._nodeclasses.resolve(nodeclass=request.nodeclass)
        compatibility = resolved.compatibility

        def image_for(it: InstanceType) -> str | None:
            image = compatibility.image_for(it)
            return image.id if image else None

        def choose() -> FleetChoice | None:
            return choose_offerings(
                instance_types=self._without_full_reservations(request.instance_types),
                capacity_types=request.capacity_types,
                zones=request.zones,
                subnets={zone: subnet.id for zone, subnet in resolved.subnets.items()},
                image_for=image_for,
                unavailable=self._unavailable,
            )

        choice, held = self._hold(choose)
        try:
            return self._create(request=request, resolved=resolved, choice=choice)
        finally:
            if held and self._reservations is not None:
                self._reservations.release(held)

    def _hold(self, choose: Callable[[], FleetChoice | None]) -> tuple[FleetChoice | None, list[str]]:
        """The choice, holding a slot of each reservation it targets; overrides of a reservation whose last slot
        another launch of this container holds are left out (and the choice made again when none is left)."""
        for _ in range(3):
            choice = choose()
            if choice is None or choice.capacity_type != CAPACITY_TYPE_RESERVED or self._reservations is None:
                return choice, []
            held = self._reservations.hold(o.reservation_id for o in choice.overrides)
            kept = tuple(o for o in choice.overrides if o.reservation_id in held)
            if kept:
                return replace(choice, overrides=kept), held
        return None, []

    def _create(
        self, *, request: LaunchRequest, resolved: ResolvedNodeClass, choice: FleetChoice | None
    ) -> LaunchResult:
        if choice is None:
            raise InsufficientCapacityError(
                f"NodeClaim {request.nodeclaim_name}: no available offering among {len(request.instance_types)} "
                f"instance type(s) in zones {sorted(request.zones)} for {sorted(request.capacity_types)}"
            )
        tags = launch_tags(cluster_name=self._bootstrap.cluster_name, request=request, resolved=resolved)
        try:
            return self._launch(request=request, resolved=resolved, choice=choice, tags=tags)
        except LaunchError as exc:
            if exc.code not in TEMPLATE_NOT_FOUND_CODES:
                raise
            LOG.info("launch template vanished; recreating it once")
            self._launch_templates.forget()
            return self._launch(request=request, resolved=resolved, choice=choice, tags=tags)

    def _without_full_reservations(self, instance_types: Sequence[InstanceType]) -> Sequence[InstanceType]:
        """``instance_types`` with the reserved offerings of reservations filled since the catalogue was built
        (by this container's launches in the same pass) made unavailable."""
        known = self._reservations
        if known is None:
            return instance_types
        out: list[InstanceType] = []
        for it in instance_types:
            if not any(o.reservation_id and o.available and known.known_full(o.reservation_id) for o in it.offerings):
                out.append(it)
                continue
            offerings = tuple(
                replace(o, available=False) if o.reservation_id and known.known_full(o.reservation_id) else o
                for o in it.offerings
            )
            out.append(replace(it, offerings=offerings))
        return out

    def _launch(
        self, *, request: LaunchRequest, resolved: ResolvedNodeClass, choice: FleetChoice, tags: Mapping[str, str]
    ) -> LaunchResult:
        templates: dict[tuple[str, str], str] = {}
        for override in choice.overrides:
            if override.template_key not in templates:
                templates[override.template_key] = self._ensure_template(
                    request=request, resolved=resolved, override=override, capacity_type=choice.capacity_type
                )
        token = client_token(base=request.client_token or request.nodeclaim_name, choice=choice)
        fleet_request = build_create_fleet_request(
            choice=choice,
            launch_templates=templates,
            tags=tags,
            token=token,
            context=field_value(resolved.spec, "context"),
            prioritized=request.price_overlaid,
        )
        try:
            response = self._ec2.create_fleet(**fleet_request)
        except Exception as exc:
            code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", "")) or type(exc).__name__
            raise LaunchError(f"CreateFleet for NodeClaim {request.nodeclaim_name} failed: {exc}", code=code) from exc
        subnet_zones = {s.id: s.zone for s in resolved.subnets.values()}
        errors = capacity_errors(response, choice=choice, subnet_zones=subnet_zones)
        if choice.capacity_type == CAPACITY_TYPE_RESERVED:
            self._reservations_full(choice, errors)
        else:
            self._remember(errors)
        launched = read_create_fleet_response(response, choice=choice, subnet_zones=subnet_zones)
        if launched.reservation_id and self._reservations is not None:
            self._reservations.mark_launched(launched.reservation_id)
        price = next(
            (
                o.price
                for o in choice.overrides
                if o.instance_type == launched.instance_type and o.zone == launched.zone
            ),
            0.0,
        )
        LOG.info(
            "launched %s (%s, %s, %s) for NodeClaim %s",
            launched.instance_id,
            launched.instance_type,
            launched.zone,
            launched.capacity_type,
            request.nodeclaim_name,
        )
        return LaunchResult(
            instance_id=launched.instance_id,
            instance_type=launched.instance_type,
            zone=launched.zone,
            capacity_type=launched.capacity_type,
            image_id=launched.image_id,
            price=price,
            launch_template_name=templates.get((launched.image_id, launched.reservation_id), ""),
            capacity_errors=launched.capacity_errors,
            reservation_id=launched.reservation_id,
            reservation_type=launched.reservation_type,
            reservation_interruptible=launched.reservation_interruptible,
            tenancy=request.tenancy,
        )

    def _reservations_full(self, choice: FleetChoice, errors: Sequence[UnavailableOffering]) -> None:
        """The reservations of the overrides EC2 answered a capacity error for can take no instance now."""
        failed = {(e.instance_type, e.zone) for e in errors}
        ids = {o.reservation_id for o in choice.overrides if (o.instance_type, o.zone) in failed and o.reservation_id}
        if ids and self._reservations is not None:
            LOG.info("capacity reservations %s are full", ", ".join(sorted(ids)))
            self._reservations.mark_unavailable(ids)

    def _ensure_template(
        self, *, request: LaunchRequest, resolved: ResolvedNodeClass, override: Override, capacity_type: str
    ) -> str:
        """The launch template for one AMI (and reservation): labels/taints of the NodeClaim, the node class's kubelet;
        a reserved launch's also the reservation's labels, and it targets the reservation.

        ``maxPods`` is only written when the EC2NodeClass sets it; otherwise nodeadm derives the
        same ENI-limited value per instance type at boot.
        """
        cluster = self._bootstrap.cluster_name
        labels = {
            **request.labels,
            NODEPOOL_TAG: request.nodepool_name,
            NODECLASS_TAG: resolved.name,
            CAPACITY_TYPE_LABEL: capacity_type,
            LABEL_INSTANCE_TENANCY: request.tenancy,
        }
        labels.update(
            reservation_labels(
                reservation_id=override.reservation_id,
                reservation_type=override.reservation_type,
                interruptible=override.reservation_interruptible,
            )
        )
        try:
            user_data = node_user_data(
                ami_family(resolved.spec),
                NodeUserData(
                    cluster=JoinCluster(
                        name=cluster,
                        endpoint=self._bootstrap.cluster_endpoint,
                        ca=self._bootstrap.cluster_ca,
                        cidr=self._bootstrap.cluster_cidr(),
                    ),
                    labels=labels,
                    taints=(*request.taints, *request.startup_taints),
                    kubelet=field_value(resolved.spec, "kubelet") or {},
                    custom_user_data=field_value(resolved.spec, "userData"),
                    instance_store_policy=resolved.instance_store_policy,
                ),
            )
        except ValueError as exc:
            raise LaunchError(f"user data for EC2NodeClass {resolved.name}: {exc}", code="InvalidUserData") from exc
        spec = LaunchTemplateSpec(
            cluster_name=cluster,
            nodeclass_name=resolved.name,
            image_id=override.image_id,
            instance_profile=resolved.instance_profile,
            security_group_ids=tuple(g.id for g in resolved.security_groups),
            user_data=user_data,
            capacity_type=capacity_type,
            reservation_id=override.reservation_id,
            reservation_type=override.reservation_type,
            open_reservations=not self._reserved_capacity,
            tenancy=request.tenancy,
            spec=resolved.spec,
            tags=static_tags(
                cluster_name=cluster, nodeclass_name=resolved.name, extra=field_value(resolved.spec, "tags") or {}
            ),
        )
        try:
            return self._launch_templates.ensure(spec=spec)
        except Exception as exc:
            code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", "")) or type(exc).__name__
            raise LaunchError(f"launch template for EC2NodeClass {resolved.name}: {exc}", code=code) from exc
