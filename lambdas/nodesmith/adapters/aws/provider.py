"""``Ec2CloudProvider``: the EC2 implementation of :class:`nodesmith.core.ports.CloudProvider`.

Wires the catalogue, prices, EC2NodeClass resolution, launch templates, CreateFleet and instance
operations together, and reads the cluster's configuration (Kubernetes version, service CIDR) from EKS
when not given. Each concern lives in its own module: launching in :mod:`.launch` (request and answer
shapes in :mod:`.fleet`, tags in :mod:`.tags`), instances in :mod:`.instances`, and Karpenter's
unavailable-offerings cache (``pkg/cache/unavailableofferings.go``) in :mod:`.unavailable` (in memory)
and :mod:`.unavailable_shared` (shared through the ``state`` store): a (type, zone, capacity type)
that hit a capacity error is unavailable for 3 minutes, so the next scheduling pass plans around it
(spot -> on-demand, other types, other zones). Capacity reservations the node classes select add ``reserved``
offerings (:mod:`nodesmith.core.capacityreservations`); how many instances each can still take is kept in
:class:`~nodesmith.adapters.aws.capacity_reservations.ReservationAvailability`, not in that cache.

Clients are created lazily from :mod:`nodesmith.adapters.aws.clients` unless injected (tests); the
constructor's parameter objects are in :mod:`.config`.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from nodesmith.adapters.aws import clients as boto_clients
from nodesmith.adapters.aws.capacity_reservations import (
    ReservationAvailability,
    describe_capacity_reservations_by_id,
)
from nodesmith.adapters.aws.catalog import InstanceTypeCatalog
from nodesmith.adapters.aws.config import (
    DEFAULT_CATALOG,
    DEFAULT_LAUNCH,
    NO_CLIENTS,
    SYSTEM_CLOCKS,
    AwsClients,
    CatalogSettings,
    Clocks,
    ClusterConfig,
    NodeLaunchSettings,
)
from nodesmith.adapters.aws.instances import Instances
from nodesmith.adapters.aws.launch import FleetLauncher, NodeBootstrap
from nodesmith.adapters.aws.launch_template import LaunchTemplates
from nodesmith.adapters.aws.nodeclass import NodeClassResolver, ResolvedNodeClass
from nodesmith.adapters.aws.pricing import PricingProvider
from nodesmith.adapters.aws.terminate_batcher import TerminateBatcher
from nodesmith.adapters.aws.unavailable import UNAVAILABLE_OFFERINGS_TTL_SECONDS, UnavailableOfferings
from nodesmith.adapters.aws.unavailable_shared import (
    SHARED_REFRESH_FRACTION,
    SharedWrites,
    remember_unavailable,
    sync_unavailable,
)
from nodesmith.core.capacityreservations import with_reserved_offerings
from nodesmith.core.errors import LaunchError, NodeClassNotReadyError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from nodesmith.core.api.ec2nodeclass import EC2NodeClass
    from nodesmith.core.capacityreservations import CapacityReservation
    from nodesmith.core.errors import UnavailableOffering
    from nodesmith.core.model import InstanceType
    from nodesmith.core.nodeclass_status import ResolvedParts
    from nodesmith.core.ports import Instance, InstanceFacts, LaunchRequest, LaunchResult, StateStore

__all__ = [
    "PREFETCH_AHEAD_SECONDS",
    "UNAVAILABLE_OFFERINGS_TTL_SECONDS",
    "Ec2CloudProvider",
    "UnavailableOfferings",
]

LOG = logging.getLogger(__name__)

RESERVATION_QUERY_TTL_SECONDS = 60.0
"""How long a DescribeCapacityReservations answer by ids is reused (Karpenter's capacity reservation cache)."""

PREFETCH_AHEAD_SECONDS = 20.0
""":meth:`Ec2CloudProvider.prefetch` refreshes caches expiring within this long (twice watch mode's resync)."""


class Ec2CloudProvider:
    """Nodesmith's EC2 cloud provider for the EKS cluster ``cluster`` in AWS region ``region``.

    ``cluster`` is what goes into node user data (its Kubernetes version and service CIDR are read from EKS
    DescribeCluster when not given); ``launch`` the node role, instance profile and ``ReservedCapacity`` gate;
    ``catalog`` the price table and catalogue filter; ``clients`` boto3 clients to use instead of creating them;
    ``clocks`` monotonic and epoch seconds. ``state`` shares the unavailable-offerings cache between containers
    (see :mod:`.unavailable_shared`); an offering that hit a capacity error stays unavailable for
    ``unavailable_ttl_seconds``.
    """

    def __init__(
        self,
        *,
        cluster: ClusterConfig,
        region: str,
        launch: NodeLaunchSettings = DEFAULT_LAUNCH,
        catalog: CatalogSettings = DEFAULT_CATALOG,
        clients: AwsClients = NO_CLIENTS,
        clocks: Clocks = SYSTEM_CLOCKS,
        state: StateStore | None = None,
        unavailable_ttl_seconds: float = UNAVAILABLE_OFFERINGS_TTL_SECONDS,
    ) -> None:
        clock = clocks.monotonic
        self._cluster = cluster.name
        self.reserved_capacity = launch.reserved_capacity
        self.reservations = ReservationAvailability(clock=clock)
        self._clock = clock
        self._described: dict[tuple[str, ...], tuple[float, tuple[CapacityReservation, ...]]] = {}
        self._region = region
        self._node_role = launch.node_role
        self._k8s_version = cluster.kubernetes_version
        self._cidr = cluster.service_cidr
        self._ec2 = clients.ec2 if clients.ec2 is not None else boto_clients.client("ec2", region=region)
        self._ssm = clients.ssm
        self._iam = clients.iam
        self._eks = clients.eks
        pricing = clients.pricing
        if pricing is None and catalog.use_pricing_api:
            pricing = boto_clients.client("pricing", region=boto_clients.pricing_region(region))
        self.unavailable = UnavailableOfferings(ttl_seconds=unavailable_ttl_seconds, clock=clock)
        self._unavailable_ttl = unavailable_ttl_seconds
        self._terminations = TerminateBatcher(send=lambda ids: self.instances.terminate(instance_ids=ids))
        self._shared_writes = SharedWrites(refresh_seconds=unavailable_ttl_seconds * SHARED_REFRESH_FRACTION)
        self.state = state
        self._wall = clocks.wall
        self.prices = PricingProvider(
            ec2=self._ec2, pricing=pricing, region=region, price_table_path=catalog.price_table, clock=clock
        )
        self.catalog = InstanceTypeCatalog(
            ec2=self._ec2,
            pricing=self.prices,
            region=region,
            instance_type_names=catalog.instance_type_names,
            ttl_seconds=catalog.ttl_seconds,
            clock=clock,
        )
        self.nodeclasses = NodeClassResolver(
            clients=AwsClients(
                ec2=self._ec2,
                ssm=_LazyClient(lambda: self._client("ssm")),
                iam=_LazyClient(lambda: self._client("iam")),
            ),
            cluster_name=cluster.name,
            kubernetes_version=self.kubernetes_version,
            launch=launch,
            clocks=clocks,
            reservations=self.reservations,
        )
        self.launch_templates = LaunchTemplates(ec2=self._ec2)
        self.instances = Instances(ec2=self._ec2, cluster_name=cluster.name)
        self._bootstrap = NodeBootstrap(
            cluster_name=cluster.name,
            cluster_endpoint=cluster.endpoint,
            cluster_ca=cluster.ca,
            cluster_cidr=self.cluster_cidr,
        )
        self._cluster_info: dict[str, Any] | None = None

    # -- configuration read from EKS -------------------------------------------------------------

    def _client(self, service: str) -> Any:
        attr = f"_{service}"
        if getattr(self, attr, None) is None:
            setattr(self, attr, boto_clients.client(service, region=self._region))
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
        types = self.catalog.instance_types(
            zones=resolved.zones,
            kubelet=resolved.kubelet,
            root_volume_bytes=resolved.root_volume_bytes,
            instance_store_policy=resolved.instance_store_policy,
            unavailable=self.unavailable.keys(),
            launchable=resolved.compatibility,
        )
        return with_reserved_offerings(
            types, self._current(resolved.capacity_reservations), zones=resolved.zones, now=self._wall()
        )

    def _current(self, reservations: Sequence[CapacityReservation]) -> list[CapacityReservation]:
        return [replace(r, available_count=self.reservations.available(r)) for r in reservations]

    def capacity_reservations(self, *, nodeclass: EC2NodeClass) -> list[CapacityReservation]:
        """The active capacity reservations ``nodeclass`` selects, with the instances each can take now (empty with
        the ``ReservedCapacity`` gate off). Raises ``NodeClassNotReadyError`` when the node class does not resolve."""
        return self._current(self.nodeclasses.resolve(nodeclass=nodeclass).capacity_reservations)

    def nodeclass_parts(self, *, nodeclass: EC2NodeClass) -> ResolvedParts:
        """Readiness checks of ``nodeclass``'s parts and what each resolved to (:meth:`NodeClassResolver.resolution
        <nodesmith.adapters.aws.nodeclass.NodeClassResolver.resolution>`), for its status. Raises ``LaunchError``
        when EC2 could not be asked (throttled, denied, unreachable): the status is then left as it is."""
        try:
            return self.nodeclasses.resolution(nodeclass=nodeclass)
        except (ClientError, BotoCoreError) as exc:
            raise LaunchError(f"resolve EC2NodeClass {nodeclass.name}: {exc}") from exc

    def describe_capacity_reservations(self, *, ids: Sequence[str]) -> list[CapacityReservation]:
        """The active reservations among ``ids`` (one call per id; unknown ids left out), the same set of ids
        described at most once a minute (Karpenter's reservation query cache). Raises ``LaunchError`` when EC2
        refuses."""
        key = tuple(sorted(set(ids)))
        now = self._clock()
        hit = self._described.get(key)
        if hit is not None and now < hit[0]:
            return list(hit[1])
        found = describe_capacity_reservations_by_id(ec2=self._ec2, ids=key, now=self._wall())
        self._described = {k: v for k, v in self._described.items() if now < v[0]}
        self._described[key] = (now + RESERVATION_QUERY_TTL_SECONDS, tuple(found))
        return found

    def create(self, *, request: LaunchRequest) -> LaunchResult:
        """Launch one instance for ``request`` with CreateFleet instant (see :mod:`.launch`, :mod:`.fleet`).

        Capacity errors mark offerings unavailable for 3 minutes. Raises
        ``NodeClassNotReadyError``, ``InsufficientCapacityError`` (also when no offering is
        usable) or ``LaunchError``.
        """
        # Built per call from the current attributes, so a replaced resolver or template store is used.
        launcher = FleetLauncher(
            ec2=self._ec2,
            nodeclasses=self.nodeclasses,
            launch_templates=self.launch_templates,
            unavailable=self.unavailable.is_unavailable,
            remember=self._remember,
            bootstrap=self._bootstrap,
            reservations=self.reservations,
            reserved_capacity=self.reserved_capacity,
        )
        return launcher.create(request=request)

    def _remember(self, errors: Sequence[UnavailableOffering]) -> None:
        remember_unavailable(
            errors,
            local=self.unavailable,
            state=self.state,
            ttl_seconds=self._unavailable_ttl,
            wall_clock=self._wall,
            written=self._shared_writes,
        )

    def sync_unavailable(self) -> int:
        """Merge the state store's unexpired offering marks into the in-memory cache; returns how many.

        A store error is logged and 0 returned (plans then rely on this container's marks only).
        """
        return sync_unavailable(local=self.unavailable, state=self.state, wall_clock=self._wall)

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

    def instance_facts(self, *, instance_ids: Sequence[str]) -> dict[str, InstanceFacts]:
        """The launch facts of instances by id, from this container's cache of every instance it described, the
        others read in one DescribeInstances per 200 ids (:meth:`Instances.facts <.instances.Instances.facts>`)."""
        return self.instances.facts(instance_ids=instance_ids)

    def terminate(self, *, instance_ids: Sequence[str]) -> None:
        """Terminate instances; unknown or already-terminated ids are not an error. ``TerminationError`` names
        the instances EC2 refused (each tried alone); the others were terminated. Calls made by other threads at
        about the same time share one ``TerminateInstances`` request (:mod:`.terminate_batcher`)."""
        self._terminations.terminate(instance_ids)

    def delete_launch_templates(self, *, nodeclass_name: str) -> list[str]:
        """Delete the EC2NodeClass ``nodeclass_name``'s launch templates of this cluster (tagged as
        :meth:`LaunchTemplates.delete_for_nodeclass` says); returns their names. ``LaunchError`` when EC2 refuses."""
        try:
            return self.launch_templates.delete_for_nodeclass(cluster_name=self._cluster, nodeclass_name=nodeclass_name)
        except (ClientError, BotoCoreError) as exc:
            raise LaunchError(f"delete the launch templates of EC2NodeClass {nodeclass_name}: {exc}") from exc


class _LazyClient:
    """Create a boto3 client on first attribute access (IAM is rarely needed)."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        self._factory = factory
        self._client: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._client is None:
            self._client = self._factory()
        return getattr(self._client, name)
