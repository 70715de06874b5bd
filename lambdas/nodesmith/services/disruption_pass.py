"""One disruption pass's view of the cluster and the node actions its steps share.

:class:`DisruptionPass` reads the snapshot a pass decides on (Nodes, pods, NodePools,
EC2NodeClasses and their catalogues, instances, the :class:`~nodesmith.core.disruption.ClusterNode`
views of :mod:`.disruption_state`) and carries out what every step needs: writing a NodeClaim
condition, posting (deduplicated) Events, and draining then terminating a node. The steps
themselves live in :mod:`.disruption_inflight` (commands already started) and
:mod:`.disruption_command` (expirations and the new command); :func:`~nodesmith.services.disruption.disrupt`
runs them in order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodesmith.core.errors import KubernetesError, LaunchError, NodeClassNotReadyError
from nodesmith.core.ports import ObjectRef

from .breakdown import disruption_reason, pool_key
from .capacity import disruption_volume_topology, instance_id_of
from .disruption_outcome import DisruptionOutcome
from .disruption_state import cluster_nodes, write_condition
from .drain import drain_node
from .lifecycle import nodeclaim_ref

if TYPE_CHECKING:
    from collections.abc import Callable

    from nodesmith.core.api.ec2nodeclass import EC2NodeClass
    from nodesmith.core.api.nodeclaim import NodeClaim
    from nodesmith.core.disruption import ClusterNode, DisruptionSettings
    from nodesmith.core.model import InstanceType, Node, NodeSelectorRequirement
    from nodesmith.core.ports import CloudProvider, Cluster, Instance

__all__ = ["DRAIN_BUDGET_SECONDS", "EVENT_DEDUPE_SECONDS", "DisruptionPass"]

DRAIN_BUDGET_SECONDS = 60.0
"""How long one pass drains a node before leaving the rest to the next pass (seconds)."""

EVENT_DEDUPE_SECONDS = 600.0
"""An identical rejection Event (node, reason, message) is not posted again within this many seconds."""


def _node_ref(node: str) -> ObjectRef:
    return ObjectRef(kind="Node", name=node)


class DisruptionPass:
    """The state of one :func:`~nodesmith.services.disruption.disrupt` call and its shared node actions.

    ``now`` is the pass time (epoch seconds); ``recent_events`` maps deduplicated Event keys to when
    they were posted; ``drain_budget`` bounds one node's drain (seconds); ``sleep``/``clock`` are the
    drain's. What the pass did accumulates in :attr:`out`.
    """

    def __init__(
        self,
        *,
        cluster: Cluster,
        cloud: CloudProvider,
        cluster_name: str,
        now: float,
        settings: DisruptionSettings,
        recent_events: dict[str, float],
        drain_budget: float,
        sleep: Callable[[float], None],
        clock: Callable[[], float],
    ) -> None:
        self.cluster, self.cloud, self.cluster_name, self.now = cluster, cloud, cluster_name, now
        self.settings, self.recent_events = settings, recent_events
        self.drain_budget = drain_budget
        self.sleep, self.clock = sleep, clock
        self.out = DisruptionOutcome()

    # -- snapshot ----------------------------------------------------------------------------------

    def snapshot(self) -> None:
        """List everything the pass decides on; a node class that is not ready is reported in ``out.errors``."""
        cluster, cloud = self.cluster, self.cloud
        self.nodes: list[Node] = cluster.list_nodes()
        self.pods = cluster.list_pods()
        self.daemonsets = cluster.list_daemonsets()
        self.pdbs = cluster.list_pdbs()
        self.nodepools = [p for p in cluster.list_nodepools() if p.metadata.deletion_timestamp is None]
        self.nodeclasses: dict[str, EC2NodeClass] = {nc.name: nc for nc in cluster.list_ec2nodeclasses()}
        self.instances: dict[str, Instance] = {i.instance_id: i for i in cloud.list_instances()}
        self.catalogues: dict[str, dict[str, InstanceType]] = {}
        for name in sorted(self.nodeclasses):
            try:
                self.catalogues[name] = {it.name: it for it in cloud.instance_types(nodeclass=self.nodeclasses[name])}
            except NodeClassNotReadyError as exc:
                self.out.errors.append(f"EC2NodeClass {name}: {exc}")
        merged: dict[str, InstanceType] = {}
        for name in sorted(self.catalogues):
            for type_name, it in self.catalogues[name].items():
                merged.setdefault(type_name, it)
        self.catalogue = merged
        self.views, self.claims = cluster_nodes(
            cluster=cluster,
            nodes=self.nodes,
            pods=self.pods,
            nodeclaims=cluster.list_nodeclaims(),
            instances=self.instances,
            now=self.now,
            errors=self.out.errors,
        )
        self.by_name: dict[str, ClusterNode] = {v.name: v for v in self.views}

    def pool_types(self) -> dict[str, list[InstanceType]]:
        """Each NodePool's own EC2NodeClass catalogue (Karpenter's ``GetInstanceTypes(nodePool)``);
        NodePools of one node class share a list."""
        lists = {name: list(catalogue.values()) for name, catalogue in self.catalogues.items()}
        refs = {np.name: np.spec.template.spec.node_class_ref.name for np in self.nodepools}
        return {pool: lists[ref] for pool, ref in refs.items() if ref in lists}

    def volume_requirements(self) -> dict[str, tuple[NodeSelectorRequirement, ...]]:
        """The node requirements of the pods' PersistentVolumeClaims, so a simulated move keeps a pod
        in its volume's zone. Read only when some pod mounts a claim; when the storage objects cannot
        be read, bound pods with claims stay in their node's zone
        (:func:`~nodesmith.services.capacity.disruption_volume_topology`)."""
        if not any(p.pvc_names for p in self.pods):
            return {}
        try:
            context = self.cluster.volume_context()
        except KubernetesError as exc:
            self.out.errors.append(f"list PersistentVolumeClaims, PersistentVolumes and StorageClasses: {exc}")
            context = None
        return disruption_volume_topology(pods=self.pods, nodes=self.nodes, context=context)

    # -- shared node actions -----------------------------------------------------------------------

    def claim_of(self, node: str) -> NodeClaim | None:
        """The NodeClaim of ``node`` as last written by this pass, or None."""
        view = self.by_name.get(node)
        if view is None or view.nodeclaim is None:
            return None
        return self.claims.get(view.nodeclaim.name, view.nodeclaim)

    def set_condition(self, node: str, condition: str, status: str, reason: str, message: str) -> None:
        """Write ``condition`` on the NodeClaim of ``node`` (none: nothing); a failed write goes to ``out.errors``."""
        claim = self.claim_of(node)
        if claim is None:
            return
        try:
            self.claims[claim.name] = write_condition(
                cluster=self.cluster,
                nodeclaim=claim,
                condition=condition,
                status=status,
                reason=reason,
                message=message,
                now=self.now,
            )
        except KubernetesError as exc:
            self.out.errors.append(f"write {condition} of NodeClaim {claim.name}: {exc}")

    def event(self, node: str, reason: str, message: str, *, warning: bool = False, dedupe: bool = False) -> None:
        """Post an Event on ``node`` and, unless ``dedupe``, on its NodeClaim too.

        With ``dedupe`` an identical Event (node, reason, message) posted less than
        :data:`EVENT_DEDUPE_SECONDS` ago is skipped.
        """
        key = f"{node}|{reason}|{message}"
        if dedupe:
            seen = self.recent_events.get(key)
            if seen is not None and self.now - seen < EVENT_DEDUPE_SECONDS:
                return
            self.recent_events[key] = self.now
        self.cluster.record_event(
            ref=_node_ref(node), reason=reason, message=message, type_="Warning" if warning else "Normal"
        )
        claim = self.claim_of(node)
        if claim is not None and not dedupe:
            self.cluster.record_event(
                ref=nodeclaim_ref(claim), reason=reason, message=message, type_="Warning" if warning else "Normal"
            )

    def terminate(self, node_name: str, *, why: str, method: str) -> bool:
        """Drain ``node_name`` (already tainted) and, when drained, terminate it. True when gone.

        Counted in ``terminated_by`` under Karpenter's reason for ``method`` (``Empty``, ``Drifted``, ...).
        """
        node = next((n for n in self.nodes if n.name == node_name), None)
        claim = self.claim_of(node_name)
        if node is not None:
            result = drain_node(
                cluster=self.cluster,
                node=node,
                now=self.now,
                deadline=None,
                budget_seconds=self.drain_budget,
                sleep=self.sleep,
                clock=self.clock,
            )
            self.out.pods_evicted += result.evicted
            if not result.complete:
                self.event(node_name, "DisruptionBlocked", f"Draining: {result.reason}", warning=True, dedupe=True)
                return False
        self.event(node_name, "DisruptionTerminating", f"Disrupting Node: {why}")
        try:
            inst = instance_id_of(node.provider_id if node is not None else None) or instance_id_of(
                claim.status.provider_id if claim is not None else None
            )
            if inst:
                self.cloud.terminate(instance_ids=[inst])
            self.cluster.delete_node(name=node_name)
            if claim is not None:
                self.cluster.delete_nodeclaim(name=claim.name)
        except (KubernetesError, LaunchError) as exc:
            self.out.errors.append(f"terminate {node_name}: {exc}")
            return False
        self.out.nodes_terminated.append(node_name)
        key = (disruption_reason(method), *pool_key(nodeclaim=claim, labels=node.labels if node is not None else None))
        self.out.terminated_by[key] = self.out.terminated_by.get(key, 0) + 1
        return True
