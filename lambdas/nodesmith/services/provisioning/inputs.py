"""What a reconcile pass reads before it solves: the snapshot of the cluster and our instances
(:func:`take_snapshot`), each EC2NodeClass's instance-type catalogue (:func:`nodeclass_catalogues`,
:func:`merged_catalogue`, :func:`without_offerings`) and the NodePools it may use (:func:`usable_pools`).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from nodesmith.core.errors import NodeClassNotReadyError
from nodesmith.services.provisioning.capacity import instance_id_of

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from nodesmith.core.api.ec2nodeclass import EC2NodeClass
    from nodesmith.core.api.nodeclaim import NodeClaim
    from nodesmith.core.api.nodepool import NodePool
    from nodesmith.core.model import DaemonSet, InstanceType, Node, Pod, PodDisruptionBudget
    from nodesmith.core.ports import CloudProvider, Cluster, Instance
    from nodesmith.services.provisioning.outcome import ReconcileOutcome

__all__ = [
    "Snapshot",
    "lists_every_instance",
    "merged_catalogue",
    "nodeclass_catalogues",
    "provisioning_instances",
    "take_snapshot",
    "usable_pools",
    "without_offerings",
]


@dataclass(slots=True)
class Snapshot:
    """What a pass reads, once: the cluster's lists and our EC2 instances by id; ``every_instance`` is False
    when ``instances`` holds only those provisioning uses (:func:`provisioning_instances`). ``pdbs`` are the
    PodDisruptionBudgets, None when not read (provisioning does not need them; the disruption pass lists them).

    One snapshot serves the whole invocation: provisioning and garbage collection decide on it, and the
    reconcile pass hands it on, as it left the cluster (:attr:`ReconcileOutcome.snapshot
    <nodesmith.services.provisioning.outcome.ReconcileOutcome.snapshot>`), to the disruption pass, so pods,
    Nodes and NodeClaims are listed and decoded once per invocation.
    """

    nodes: list[Node]
    pods: list[Pod]
    daemonsets: list[DaemonSet]
    nodepools: list[NodePool]
    nodeclasses: dict[str, EC2NodeClass]
    nodeclaims: list[NodeClaim]
    instances: dict[str, Instance]
    every_instance: bool = True
    pdbs: list[PodDisruptionBudget] | None = None


def take_snapshot(
    *,
    cluster: Cluster,
    cloud: CloudProvider,
    every_instance: bool = True,
    fleet: Callable[[], Sequence[Instance]] | None = None,
) -> Snapshot:
    """Read everything a pass needs; EC2's DescribeInstances runs alongside the Kubernetes lists.

    The instance list is the slowest read (and grows with the fleet), so it no longer waits for the
    six lists in front of it on the way to CreateFleet. An instance launched meanwhile without its
    NodeClaim in the snapshot is covered by the orphan grace period, as before.

    ``every_instance=False`` (provisioning only, :func:`~nodesmith.services.provisioning.reconcile.provision_leaving`)
    reads just the instances provisioning uses (:func:`provisioning_instances`) instead of the fleet. ``fleet``
    gives the fleet listing when one is already under way (default: ``cloud.list_instances``).
    """
    fleet = fleet or cloud.list_instances
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="snapshot") as pool:
        listing = pool.submit(fleet) if every_instance else None
        nodes = cluster.list_nodes()  # before pods: a pod bound meanwhile is seen bound, never double-counted
        pods = cluster.list_pods()
        daemonsets = cluster.list_daemonsets()
        nodepools = cluster.list_nodepools()
        nodeclasses = {nc.name: nc for nc in cluster.list_ec2nodeclasses()}
        nodeclaims = cluster.list_nodeclaims()
        instances = (
            {i.instance_id: i for i in listing.result()}
            if listing is not None
            else provisioning_instances(cloud=cloud, nodes=nodes, nodeclaims=nodeclaims, fleet=fleet)
        )
    return Snapshot(
        nodes=nodes,
        pods=pods,
        daemonsets=daemonsets,
        nodepools=nodepools,
        nodeclasses=nodeclasses,
        nodeclaims=nodeclaims,
        instances=instances,
        every_instance=listing is not None or lists_every_instance(nodeclaims),
    )


def lists_every_instance(nodeclaims: Sequence[NodeClaim]) -> bool:
    """True when :func:`provisioning_instances` must list every instance: some live NodeClaim has no
    providerID (never launched, or launched by a pass that died before writing its status)."""
    return any(not nc.status.provider_id for nc in nodeclaims if nc.metadata.deletion_timestamp is None)


def provisioning_instances(
    *,
    cloud: CloudProvider,
    nodes: Sequence[Node],
    nodeclaims: Sequence[NodeClaim],
    fleet: Callable[[], Sequence[Instance]] | None = None,
) -> dict[str, Instance]:
    """The instances a provisioning pass reads, by id: those of NodeClaims launched but not registered.

    Provisioning takes an in-flight NodeClaim's zone, type and capacity type from its instance
    (:func:`~nodesmith.services.provisioning.capacity.inflight_node`); a registered node carries them as labels,
    and its price only matters to consolidation. So this describes only the in-flight instances (one
    ``DescribeInstances`` per 200 ids, through the provider's ``get_instances``) instead of listing the whole
    fleet. A NodeClaim never launched (a pass that
    died between creating it and CreateFleet) needs the instance that carries its name, found only
    by listing: then every instance is listed.
    Terminated instances are left out, as :meth:`~nodesmith.core.ports.CloudProvider.list_instances` does.
    ``fleet`` gives the fleet listing (default: ``cloud.list_instances``).
    """
    if lists_every_instance(nodeclaims):
        return {i.instance_id: i for i in (fleet or cloud.list_instances)()}
    live = [nc for nc in nodeclaims if nc.metadata.deletion_timestamp is None]
    registered = {n.provider_id for n in nodes if n.provider_id}
    ids = sorted(
        {
            iid
            for nc in live
            if nc.status.provider_id not in registered and (iid := instance_id_of(nc.status.provider_id))
        }
    )
    if not ids:
        return {}
    found = cloud.get_instances(instance_ids=ids)
    return {iid: inst for iid, inst in found.items() if inst.state != "terminated"}


def nodeclass_catalogues(
    *, cloud: CloudProvider, nodeclasses: Mapping[str, EC2NodeClass], wanted: set[str], out: ReconcileOutcome
) -> dict[str, dict[str, InstanceType]]:
    """Instance types per EC2NodeClass name; a NodeClass that does not resolve is reported and left out.

    Each node class gets its own catalogue (Karpenter's ``GetInstanceTypes(nodePool)``: allocatable
    from its kubelet and AMI family, offerings in its subnets' zones). Node classes whose specs are
    identical share one computation (and one catalogue object) within the pass.
    """
    catalogues: dict[str, dict[str, InstanceType]] = {}
    by_spec: dict[str, dict[str, InstanceType]] = {}
    for name in sorted(wanted):
        nodeclass = nodeclasses.get(name)
        if nodeclass is None:
            continue
        key = nodeclass.spec.model_dump_json(by_alias=True, exclude_none=True)
        hit = by_spec.get(key)
        if hit is not None:
            catalogues[name] = hit
            continue
        try:
            catalogues[name] = by_spec[key] = {it.name: it for it in cloud.instance_types(nodeclass=nodeclass)}
        except NodeClassNotReadyError as exc:
            out.errors.append(f"EC2NodeClass {name}: {exc}")
    return catalogues


def merged_catalogue(catalogues: Mapping[str, Mapping[str, InstanceType]]) -> dict[str, InstanceType]:
    """All node classes' types by name (the first NodeClass by name wins): labels and prices of
    launched instances, whatever their node class. The solver gets each NodePool's own catalogue."""
    merged: dict[str, InstanceType] = {}
    for name in sorted(catalogues):
        for type_name, it in catalogues[name].items():
            merged.setdefault(type_name, it)
    return merged


def without_offerings(
    catalogue: Mapping[str, InstanceType], unavailable: set[tuple[str, str, str]]
) -> list[InstanceType]:
    """The catalogue with the offerings that failed in this pass marked unavailable."""
    if not unavailable:
        return list(catalogue.values())
    out: list[InstanceType] = []
    for it in catalogue.values():
        if not any((it.name, o.zone, o.capacity_type) in unavailable for o in it.offerings):
            out.append(it)
            continue
        offerings = tuple(
            replace(o, available=False) if (it.name, o.zone, o.capacity_type) in unavailable else o
            for o in it.offerings
        )
        out.append(replace(it, offerings=offerings))
    return out


def usable_pools(snap: Snapshot, catalogues: Mapping[str, object], out: ReconcileOutcome) -> list[NodePool]:
    """The NodePools a pass provisions for: not being deleted, not static (``replicas``), and with a
    resolved EC2NodeClass that is not being deleted (the unresolved ones are reported in ``out.errors``)."""
    pools: list[NodePool] = []
    for np in snap.nodepools:
        ref = np.spec.template.spec.node_class_ref
        if np.metadata.deletion_timestamp or np.spec.replicas is not None:
            continue
        nodeclass = snap.nodeclasses.get(ref.name)
        if nodeclass is not None and nodeclass.metadata.deletion_timestamp:
            continue  # its finalization waits for its NodeClaims to go: no new ones
        if ref.name not in catalogues:
            out.errors.append(f'NodePool {np.name}: EC2NodeClass "{ref.name}" not found or not ready')
            continue
        pools.append(np)
    return pools
