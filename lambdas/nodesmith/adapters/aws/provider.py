"""``Ec2CloudProvider``: the EC2 implementation of :class:`nodesmith.core.ports.CloudProvider`.

Wires the catalogue, prices, EC2NodeClass resolution, launch templates, CreateFleet and instance
operations together, with Karpenter's unavailable-offerings cache (``pkg/cache/unavailableofferings.go``):
a (type, zone, capacity type) that hit a capacity error is unavailable for 3 minutes, so the next
scheduling pass plans around it (spot -> on-demand, other types, other zones).

The cache has two layers. The in-memory one lives as long as the Lambda container; with a
``state`` store (:class:`~nodesmith.core.ports.StateStore`, the DynamoDB state table) every mark is
also written there with its expiry in epoch seconds, and :meth:`Ec2CloudProvider.instance_types`
first merges the marks other containers wrote (another reconcile, or the interruption Lambda
marking a spot-interrupted offering). A failing state store is logged and the in-memory layer
keeps working: the shared cache only improves plans.

Clients are created lazily from :mod:`nodesmith.adapters.aws.clients` unless injected (tests).
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

from nodesmith.adapters.aws import clients
from nodesmith.adapters.aws.catalog import InstanceTypeCatalog
from nodesmith.adapters.aws.fleet import (
    FleetChoice,
    build_create_fleet_request,
    capacity_errors,
    choose_offerings,
    client_token,
    read_create_fleet_response,
)
from nodesmith.adapters.aws.instances import NODECLASS_TAG, NODEPOOL_TAG, Instances
from nodesmith.adapters.aws.launch_template import LaunchTemplates, LaunchTemplateSpec, render_user_data
from nodesmith.adapters.aws.nodeclass import NodeClassResolver, ResolvedNodeClass, field_value
from nodesmith.adapters.aws.pricing import PricingProvider
from nodesmith.adapters.aws.unavailable import UNAVAILABLE_OFFERINGS_TTL_SECONDS, UnavailableOfferings
from nodesmith.core.errors import InsufficientCapacityError, LaunchError, NodeClassNotReadyError, UnavailableOffering
from nodesmith.core.model import CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT, InstanceType
from nodesmith.core.ports import Instance, LaunchRequest, LaunchResult

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping, Sequence

    from nodesmith.core.api.ec2nodeclass import EC2NodeClass
    from nodesmith.core.ports import StateStore

__all__ = [
    "PREFETCH_AHEAD_SECONDS",
    "UNAVAILABLE_OFFERINGS_TTL_SECONDS",
    "Ec2CloudProvider",
    "UnavailableOfferings",
]

LOG = logging.getLogger(__name__)

NODECLAIM_TAG = "karpenter.sh/nodeclaim"
EKS_CLUSTER_TAG = "eks:eks-cluster-name"
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"

PREFETCH_AHEAD_SECONDS = 20.0
""":meth:`Ec2CloudProvider.prefetch` refreshes caches expiring within this long (twice watch mode's resync)."""


class Ec2CloudProvider:
    """Nodesmith's EC2 cloud provider.

    ``cluster_endpoint`` / ``cluster_ca`` (base64) / ``cluster_cidr`` (service CIDR) go into node
    user data; ``cluster_cidr`` and ``kubernetes_version`` are read from EKS DescribeCluster when not
    given. ``price_table`` is the on-demand price table path (see :mod:`.pricing`).
    ``instance_profile`` is used for node classes naming ``node_role`` (or any role when
    ``node_role`` is None); other roles get a profile created through IAM.
    ``instance_type_names`` restricts the catalogue (None: all). ``clock`` returns monotonic seconds.
    ``state`` shares the unavailable-offerings cache between containers (see the module docstring);
    ``wall_clock`` returns epoch seconds for its expiries.
    """

    def __init__(
        self,
        *,
        cluster_name: str,
        cluster_endpoint: str,
        cluster_ca: str,
        region: str,
        price_table: str | None = None,
        node_role: str | None = None,
        instance_profile: str | None = None,
        kubernetes_version: str | None = None,
        cluster_cidr: str | None = None,
        use_pricing_api: bool = True,
        instance_type_names: Collection[str] | None = None,
        ec2: Any | None = None,
        ssm: Any | None = None,
        iam: Any | None = None,
        eks: Any | None = None,
        pricing: Any | None = None,
        unavailable_ttl_seconds: float = UNAVAILABLE_OFFERINGS_TTL_SECONDS,
        catalog_ttl_seconds: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        state: StateStore | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._cluster = cluster_name
        self._endpoint = cluster_endpoint
        self._ca = cluster_ca
        self._region = region
        self._node_role = node_role
        self._k8s_version = kubernetes_version
        self._cidr = cluster_cidr
        self._ec2 = ec2 if ec2 is not None else clients.client("ec2", region=region)
        self._ssm = ssm
        self._iam = iam
        self._eks = eks
        if pricing is None and use_pricing_api:
            pricing = clients.client("pricing", region=clients.pricing_region(region))
        self.unavailable = UnavailableOfferings(ttl_seconds=unavailable_ttl_seconds, clock=clock)
        self._unavailable_ttl = unavailable_ttl_seconds
        self.state = state
        self._wall = wall_clock
        self.prices = PricingProvider(
            ec2=self._ec2, pricing=pricing, region=region, price_table_path=price_table, clock=clock
        )
        self.catalog = InstanceTypeCatalog(
            ec2=self._ec2,
            pricing=self.prices,
            region=region,
            instance_type_names=instance_type_names,
            ttl_seconds=catalog_ttl_seconds,
            clock=clock,
        )
        self.nodeclasses = NodeClassResolver(
            ec2=self._ec2,
            ssm=_LazyClient(lambda: self._client("ssm")),
            iam=_LazyClient(lambda: self._client("iam")),
            cluster_name=cluster_name,
            kubernetes_version=self.kubernetes_version,
            instance_profile=instance_profile,
            role_for_profile=node_role,
            clock=clock,
        )
        self.launch_templates = LaunchTemplates(ec2=self._ec2)
        self.instances = Instances(ec2=self._ec2, cluster_name=cluster_name)
        self._cluster_info: dict[str, Any] | None = None

    # -- configuration read from EKS -------------------------------------------------------------

    def _client(self, service: str) -> Any:
        attr = f"_{service}"
        if getattr(self, attr, None) is None:
            setattr(self, attr, clients.client(service, region=self._region))
        return getattr(self, attr)

    def _describe_cluster(self, what: str) -> dict[str, Any]:
        if self._cluster_info is None:
            try:
                self._cluster_info = dict(self._client("eks").describe_cluster(name=self._cluster)["cluster"])
            except Exception as exc:
                raise NodeClassNotReadyError(
                    f"cannot read the {what} of EKS cluster {self._cluster} (DescribeCluster: {exc}); configure it"
                ) from exc
        return self._cluster_info

    def kubernetes_version(self) -> str:
        """The cluster's Kubernetes version (configured, else EKS DescribeCluster)."""
        if not self._k8s_version:
            self._k8s_version = str(self._describe_cluster("Kubernetes version")["version"])
        return self._k8s_version

    def cluster_cidr(self) -> str:
        """The cluster's service IPv4 CIDR for nodeadm (configured, else EKS DescribeCluster)."""
        if not self._cidr:
            network = self._describe_cluster("service CIDR").get("kubernetesNetworkConfig") or {}
            cidr = network.get("serviceIpv4Cidr") or network.get("serviceIpv6Cidr")
            if not cidr:
                raise NodeClassNotReadyError(f"EKS cluster {self._cluster} reports no service CIDR; configure it")
            self._cidr = str(cidr)
        return self._cidr

    # -- CloudProvider ---------------------------------------------------------------------------

    def instance_types(self, *, nodeclass: EC2NodeClass | None = None) -> list[InstanceType]:
        """Every instance type with offerings (USD/hour) for ``nodeclass``'s zones, kubelet and root volume.

        A node class that does not resolve yields every type with no available offering (logged);
        types without a compatible AMI keep their offerings, unavailable. Offerings marked in the
        shared state store are merged into the in-memory cache first.
        """
        self.sync_unavailable()
        universe_blocked = self.unavailable.keys()
        if nodeclass is None:
            return self.catalog.instance_types(unavailable=universe_blocked)
        try:
            resolved = self.nodeclasses.resolve(nodeclass=nodeclass)
        except NodeClassNotReadyError as exc:
            LOG.warning("%s", exc)
            return self.catalog.instance_types(zones=frozenset(), unavailable=universe_blocked)
        return self._instance_types_for(resolved)

    def prefetch(self, *, nodeclass: EC2NodeClass, ahead_seconds: float = PREFETCH_AHEAD_SECONDS) -> list[InstanceType]:
        """:meth:`instance_types` for ``nodeclass`` after refreshing what expires within ``ahead_seconds``.

        The catalogue data (5-minute TTL) and the node class resolution (1 minute) are fetched
        again ahead of their expiry, so a caller that calls this regularly with time to spare (watch
        mode after each resync, every 10 s) keeps them from expiring on the way to CreateFleet.
        ``ahead_seconds`` must exceed that calling interval. Errors as :meth:`instance_types`.
        """
        self.catalog.data(fresh_for=ahead_seconds)
        with contextlib.suppress(NodeClassNotReadyError):  # instance_types reports it
            self.nodeclasses.resolve(nodeclass=nodeclass, fresh_for=ahead_seconds)
        return self.instance_types(nodeclass=nodeclass)

    def _instance_types_for(self, resolved: ResolvedNodeClass) -> list[InstanceType]:
        return self.catalog.instance_types(
            zones=resolved.zones,
            kubelet=resolved.kubelet,
            root_volume_bytes=resolved.root_volume_bytes,
            instance_store_policy=resolved.instance_store_policy,
            unavailable=self.unavailable.keys(),
            launchable=resolved.compatibility,
        )

    def create(self, *, request: LaunchRequest) -> LaunchResult:
        """Launch one instance for ``request`` with CreateFleet instant (see :mod:`.fleet`).

        Capacity errors mark offerings unavailable for 3 minutes. Raises
        ``NodeClassNotReadyError``, ``InsufficientCapacityError`` (also when no offering is
        usable) or ``LaunchError``.
        """
        resolved = self.nodeclasses.resolve(nodeclass=request.nodeclass)
        compatibility = resolved.compatibility

        def image_for(it: InstanceType) -> str | None:
            image = compatibility.image_for(it)
            return image.id if image else None

        choice = choose_offerings(
            instance_types=request.instance_types,
            capacity_types=request.capacity_types,
            zones=request.zones,
            subnets={zone: subnet.id for zone, subnet in resolved.subnets.items()},
            image_for=image_for,
            unavailable=self.unavailable.is_unavailable,
        )
        if choice is None:
            raise InsufficientCapacityError(
                f"NodeClaim {request.nodeclaim_name}: no available offering among {len(request.instance_types)} "
                f"instance type(s) in zones {sorted(request.zones)} for {sorted(request.capacity_types)}"
            )
        tags = self._tags(request=request, resolved=resolved)
        try:
            return self._launch(request=request, resolved=resolved, choice=choice, tags=tags)
        except LaunchError as exc:
            if exc.code not in ("InvalidLaunchTemplateName.NotFoundException", "InvalidLaunchTemplateId.NotFound"):
                raise
            LOG.info("launch template vanished; recreating it once")
            self.launch_templates.forget()
            return self._launch(request=request, resolved=resolved, choice=choice, tags=tags)

    def _launch(
        self, *, request: LaunchRequest, resolved: ResolvedNodeClass, choice: FleetChoice, tags: Mapping[str, str]
    ) -> LaunchResult:
        templates: dict[str, str] = {}
        for image_id in dict.fromkeys(o.image_id for o in choice.overrides):
            templates[image_id] = self._ensure_template(
                request=request, resolved=resolved, image_id=image_id, capacity_type=choice.capacity_type
            )
        token = client_token(base=request.client_token or request.nodeclaim_name, choice=choice)
        fleet_request = build_create_fleet_request(
            choice=choice,
            launch_templates=templates,
            tags=tags,
            token=token,
            context=field_value(resolved.spec, "context"),
        )
        try:
            response = self._ec2.create_fleet(**fleet_request)
        except Exception as exc:
            code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", "")) or type(exc).__name__
            raise LaunchError(f"CreateFleet for NodeClaim {request.nodeclaim_name} failed: {exc}", code=code) from exc
        subnet_zones = {s.id: s.zone for s in resolved.subnets.values()}
        self._remember(capacity_errors(response, choice=choice, subnet_zones=subnet_zones))
        launched = read_create_fleet_response(response, choice=choice, subnet_zones=subnet_zones)
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
            launch_template_name=templates.get(launched.image_id, ""),
        )

    def _ensure_template(
        self, *, request: LaunchRequest, resolved: ResolvedNodeClass, image_id: str, capacity_type: str
    ) -> str:
        """The launch template for one AMI: labels/taints of the NodeClaim, the node class's kubelet.

        ``maxPods`` is only written when the EC2NodeClass sets it; otherwise nodeadm derives the
        same ENI-limited value per instance type at boot.
        """
        labels = {
            **request.labels,
            NODEPOOL_TAG: request.nodepool_name,
            NODECLASS_TAG: resolved.name,
            CAPACITY_TYPE_LABEL: capacity_type,
        }
        kubelet = field_value(resolved.spec, "kubelet") or {}
        user_data = render_user_data(
            cluster_name=self._cluster,
            cluster_endpoint=self._endpoint,
            cluster_ca=self._ca,
            cluster_cidr=self.cluster_cidr(),
            labels=labels,
            taints=(*request.taints, *request.startup_taints),
            kubelet=kubelet,
            custom_user_data=field_value(resolved.spec, "userData"),
        )
        spec = LaunchTemplateSpec(
            cluster_name=self._cluster,
            nodeclass_name=resolved.name,
            image_id=image_id,
            instance_profile=resolved.instance_profile,
            security_group_ids=tuple(g.id for g in resolved.security_groups),
            user_data=user_data,
            capacity_type=capacity_type,
            spec=resolved.spec,
            tags=self._static_tags(nodeclass_name=resolved.name, extra=field_value(resolved.spec, "tags") or {}),
        )
        try:
            return self.launch_templates.ensure(spec=spec)
        except Exception as exc:
            code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", "")) or type(exc).__name__
            raise LaunchError(f"launch template for EC2NodeClass {resolved.name}: {exc}", code=code) from exc

    def _static_tags(self, *, nodeclass_name: str, extra: Mapping[str, str]) -> dict[str, str]:
        static = {
            f"kubernetes.io/cluster/{self._cluster}": "owned",
            EKS_CLUSTER_TAG: self._cluster,
            NODECLASS_TAG: nodeclass_name,
        }
        tags = {k: str(v) for k, v in extra.items() if not _restricted_tag(k)}
        dropped = sorted(set(extra) - set(tags))
        if dropped:
            LOG.warning("EC2NodeClass %s: ignoring restricted tags %s", nodeclass_name, dropped)
        return {**tags, **static}

    def _tags(self, *, request: LaunchRequest, resolved: ResolvedNodeClass) -> dict[str, str]:
        """Instance/volume/fleet tags: node class tags, request tags, then Karpenter's static tags (win)."""
        tags = self._static_tags(nodeclass_name=resolved.name, extra=field_value(resolved.spec, "tags") or {})
        extra = {k: v for k, v in request.tags.items() if not _restricted_tag(k)}
        return {
            **extra,
            **tags,
            NODEPOOL_TAG: request.nodepool_name,
            NODECLAIM_TAG: request.nodeclaim_name,
            "Name": request.nodeclaim_name,
        }

    def _remember(self, errors: Sequence[UnavailableOffering]) -> None:
        shared: list[tuple[str, str, str, str]] = []
        for error in errors:
            if error.code == "AuthFailure.ServiceLinkedRoleCreationNotPermitted":
                self.unavailable.mark_capacity_type(capacity_type=CAPACITY_TYPE_SPOT, reason=error.code)
            elif error.instance_type and error.zone:
                capacity_type = error.capacity_type or CAPACITY_TYPE_ON_DEMAND
                self.unavailable.mark(
                    instance_type=error.instance_type, zone=error.zone, capacity_type=capacity_type, reason=error.code
                )
                shared.append((error.instance_type, error.zone, capacity_type, error.code))
        if self.state is None or not shared:
            return
        expires_at = self._wall() + self._unavailable_ttl
        for instance_type, zone, capacity_type, code in shared:
            try:
                self.state.mark_unavailable(
                    instance_type=instance_type,
                    zone=zone,
                    capacity_type=capacity_type,
                    expires_at=expires_at,
                    reason=code,
                )
            except Exception as exc:  # the shared layer only improves plans; never fail a launch over it
                LOG.warning(
                    "could not share unavailable offering %s/%s/%s: %s", instance_type, zone, capacity_type, exc
                )

    def sync_unavailable(self) -> int:
        """Merge the state store's unexpired offering marks into the in-memory cache; returns how many.

        A store error is logged and 0 returned (plans then rely on this container's marks only).
        """
        if self.state is None:
            return 0
        now = self._wall()
        try:
            marks = self.state.list_unavailable(now=now)
        except Exception as exc:
            LOG.warning("could not read shared unavailable offerings: %s", exc)
            return 0
        for mark in marks:
            self.unavailable.merge(
                instance_type=mark.instance_type,
                zone=mark.zone,
                capacity_type=mark.capacity_type,
                seconds=mark.expires_at - now,
            )
        return len(marks)

    def mark_unavailable(self, *, offerings: Sequence[UnavailableOffering]) -> None:
        """Mark offerings unavailable (e.g. a spot interruption of (type, zone, spot)), here and in the state store."""
        self._remember(offerings)

    def list_instances(self) -> list[Instance]:
        """Our instances that are not terminated (see :mod:`.instances`)."""
        return self.instances.list_all()

    def get_instance(self, *, instance_id: str) -> Instance | None:
        """One instance by id, or None when EC2 does not know it."""
        return self.instances.get(instance_id=instance_id)

    def get_instances(self, *, instance_ids: Sequence[str]) -> dict[str, Instance]:
        """Several instances by id in one DescribeInstances per 200 ids; ids EC2 does not know are absent."""
        return {i.instance_id: i for i in self.instances.describe(instance_ids=instance_ids)}

    def terminate(self, *, instance_ids: Sequence[str]) -> None:
        """Terminate instances; unknown or already-terminated ids are not an error."""
        self.instances.terminate(instance_ids=instance_ids)


def _restricted_tag(key: str) -> bool:
    """Tags an EC2NodeClass may not set (Karpenter ``RestrictedTagPatterns``)."""
    return key.startswith("kubernetes.io/cluster/") or key in (
        EKS_CLUSTER_TAG,
        NODEPOOL_TAG,
        NODECLAIM_TAG,
        NODECLASS_TAG,
    )


class _LazyClient:
    """Create a boto3 client on first attribute access (IAM is rarely needed)."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        self._factory = factory
        self._client: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._client is None:
            self._client = self._factory()
        return getattr(self._client, name)
