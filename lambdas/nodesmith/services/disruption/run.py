"""One disruption pass's view of the cluster and the node actions its steps share.

:class:`DisruptionPass` reads the snapshot a pass decides on (Nodes, pods, NodePools,
EC2NodeClasses and their catalogues, instances, the :class:`~nodesmith.core.disruption.ClusterNode`
views of :mod:`.disruption_state`) and carries out what every step needs: writing a NodeClaim
condition, posting (deduplicated) Events, and draining then terminating a node. The steps
themselves live in :mod:`.disruption_inflight` (commands already started) and
:mod:`.disruption_command` (expirations and the new command); :func:`~nodesmith.services.disruption.service.disrupt`
runs them in order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodesmith.core.do_not_disrupt import INVALID_ANNOTATION_REASON, do_not_disrupt, invalid_annotation_message
from nodesmith.core.errors import KubernetesError, NodeClassNotReadyError
from nodesmith.core.labels import LABEL_NODEPOOL
from nodesmith.core.ports import InstanceFacts, ObjectRef
from nodesmith.services.breakdown import disruption_reason
from nodesmith.services.disruption.outcome import DisruptionOutcome
from nodesmith.services.disruption.state import cluster_nodes, write_condition
from nodesmith.services.provisioning.capacity import disruption_volume_topology, instance_id_of
from nodesmith.services.provisioning.inputs import take_snapshot
from nodesmith.services.provisioning.lifecycle import nodeclaim_ref
from nodesmith.services.provisioning.overlays import nodepool_catalogues
from nodesmith.services.termination.requests import request_termination

if TYPE_CHECKING:
    from nodesmith.core.api.ec2nodeclass import EC2NodeClass
    from nodesmith.core.api.nodeclaim import NodeClaim
    from nodesmith.core.disruption import ClusterNode, DisruptionSettings
    from nodesmith.core.disruption.memo import NodeMemo
    from nodesmith.core.model import InstanceType, Node, NodeSelectorRequirement
    from nodesmith.core.ports import CloudProvider, Instance
    from nodesmith.services.ports import Ports
    from nodesmith.services.provisioning.inputs import Snapshot

__all__ = ["EVENT_DEDUPE_SECONDS", "DisruptionPass", "drift_facts"]

EVENT_DEDUPE_SECONDS = 600.0
"""An identical rejection Event (node, reason, message) is not posted again within this many seconds."""


def drift_facts(*, cloud: CloudProvider, snap: Snapshot) -> dict[str, InstanceFacts]:
    """The launch facts (subnet, security groups, AMI) of the instances behind ``snap``'s Nodes that have a NodeClaim,
    by instance id: from the snapshot when it listed the fleet, else through ``cloud.instance_facts`` (its cache; EC2
    is read, 200 ids a call, only for instances the container never described). The fleet is never listed for
    them: whether an instance still runs is garbage collection's, on its own cadence."""
    if snap.every_instance:
        return {iid: InstanceFacts.of(i) for iid, i in snap.instances.items()}
    claimed = {nc.status.provider_id for nc in snap.nodeclaims if nc.status.provider_id}
    ids = sorted({iid for n in snap.nodes if n.provider_id in claimed and (iid := instance_id_of(n.provider_id))})
    return cloud.instance_facts(instance_ids=ids) if ids else {}


def _node_ref(node: str) -> ObjectRef:
    return ObjectRef(kind="Node", name=node)


class DisruptionPass:
    """The state of one :func:`~nodesmith.services.disruption.service.disrupt` call and its shared node actions.

    ``now`` is the pass time (epoch seconds); ``recent_events`` maps deduplicated Event keys to when
    they were posted; ``ports.queue`` takes the termination requests (None: nodes are only marked for deletion,
    and the reconcile pass's sweep sends their requests once there is a queue). What the pass did accumulates
    in :attr:`out`.
    """

    def __init__(
        self, *, ports: Ports, now: float, settings: DisruptionSettings, recent_events: dict[str, float]
    ) -> None:
        self.ports = ports
        self.cluster, self.cloud, self.cluster_name, self.now = ports.cluster, ports.cloud, ports.cluster_name, now
        self.settings, self.recent_events, self.queue = settings, recent_events, ports.queue
        self.out = DisruptionOutcome()

    # -- snapshot ----------------------------------------------------------------------------------

    def snapshot(self, snap: Snapshot | None = None, *, kept: dict[str, ClusterNode] | None = None) -> None:
        """Take what the pass decides on from ``snap`` (the reconcile pass's snapshot as it left the cluster,
        :attr:`~nodesmith.services.provisioning.outcome.ReconcileOutcome.snapshot`), reading only what it lacks
        (PodDisruptionBudgets; the drift facts of the nodes' instances when it did not list the fleet,
        :func:`drift_facts`); without ``snap``, list everything. A node class that is not ready is reported in
        ``out.errors``. ``kept`` are the views a long-lived caller keeps between passes
        (:func:`~nodesmith.services.disruption.state.cluster_nodes`)."""
        cluster, cloud = self.cluster, self.cloud
        if snap is None:
            snap = take_snapshot(cluster=cluster, cloud=cloud)
        self.nodes: list[Node] = snap.nodes
        self.pods = snap.pods
        self.daemonsets = snap.daemonsets
        self.pdbs = snap.pdbs if snap.pdbs is not None else cluster.list_pdbs()
        self.nodepools = [p for p in snap.nodepools if p.metadata.deletion_timestamp is None]
        self.nodeclasses: dict[str, EC2NodeClass] = dict(snap.nodeclasses)
        self.instances: dict[str, Instance] = snap.instances
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
        self.pool_catalogues = nodepool_catalogues(
            overlays=self.ports.overlays,
            nodepools=self.nodepools,
            catalogues=self.catalogues,
            now=self.now,
            write_status=False,
        )
        self.out.errors.extend(self.pool_catalogues.errors)
        self.views, self.claims = cluster_nodes(
            cluster=cluster,
            nodes=self.nodes,
            pods=self.pods,
            nodeclaims=snap.nodeclaims,
            facts=drift_facts(cloud=cloud, snap=snap),
            now=self.now,
            errors=self.out.errors,
            kept=kept,
        )
        self.by_name: dict[str, ClusterNode] = {v.name: v for v in self.views}

    def pool_types(self) -> dict[str, list[InstanceType]]:
        """Each NodePool's own catalogue (Karpenter's ``GetInstanceTypes(nodePool)``: its EC2NodeClass's types,
        NodeOverlays applied when the gate is on); NodePools sharing a catalogue share a list."""
        lists: dict[int, list[InstanceType]] = {}
        out: dict[str, list[InstanceType]] = {}
        for pool, catalogue in self.pool_catalogues.by_pool.items():
            if id(catalogue) not in lists:
                lists[id(catalogue)] = list(catalogue.values())
            out[pool] = lists[id(catalogue)]
        return out

    def volume_requirements(self) -> dict[str, tuple[NodeSelectorRequirement, ...]]:
        """The node requirements of the pods' PersistentVolumeClaims, so a simulated move keeps a pod
        in its volume's zone. Read only when some pod mounts a claim; when the storage objects cannot
        be read, bound pods with claims stay in their node's zone
        (:func:`~nodesmith.services.provisioning.capacity.disruption_volume_topology`)."""
        if not any(p.pvc_names for p in self.pods):
            return {}
        try:
            context = self.cluster.volume_context()
        except KubernetesError as exc:
            self.out.errors.append(f"list PersistentVolumeClaims, PersistentVolumes and StorageClasses: {exc}")
            context = None
        return disruption_volume_topology(pods=self.pods, nodes=self.nodes, context=context)

    def report_invalid_annotations(self, memo: NodeMemo | None = None) -> None:
        """Post ``InvalidDoNotDisruptAnnotation`` (Warning, deduplicated) on each managed node for each running pod
        on it whose ``karpenter.sh/do-not-disrupt`` value is ignored (neither ``"true"`` nor a positive Go
        duration), naming the pod and the value: the pod no longer protects the node, as in Karpenter. With a
        long-lived caller's ``memo``, only the pods its node bases list as annotated are read."""
        for view in self.views:
            if LABEL_NODEPOOL not in view.node.labels:
                continue
            for pod in memo.basis(view).annotated if memo is not None else view.pods:
                if pod.is_terminal or pod.deletion_timestamp is not None:
                    continue
                verdict = do_not_disrupt(pod, now=self.now)
                if verdict.invalid is not None:
                    message = invalid_annotation_message(pod, verdict)
                    self.event(view.name, INVALID_ANNOTATION_REASON, message, warning=True, dedupe=True)

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

    def terminate(self, node_name: str, *, why: str, method: str, drain_bound: float | None = None) -> bool:
        """Request the termination of ``node_name`` (already tainted): its NodeClaim is annotated with Karpenter's
        reason for ``method`` (``Unhealthy``, ``Empty``, ``Drifted``, ``Underutilized``, ``Expired``) and deleted,
        and the request sent to the termination queue, which drains the node through the Eviction API and terminates
        it. ``drain_bound`` (seconds from now) sets the NodeClaim's termination timestamp, the drain's deadline (the
        earlier of it and deletion + ``terminationGracePeriod`` holds). True when requested now or before (the
        NodeClaim was already deleting); a failure goes to ``out.errors``.
        """
        claim = self.claim_of(node_name)
        if claim is None:
            self.out.errors.append(f"terminate {node_name}: no NodeClaim")
            return False
        if claim.metadata.deletion_timestamp is not None:
            return True
        self.event(node_name, "DisruptionTerminating", f"Disrupting Node: {why}")
        try:
            request = request_termination(
                cluster=self.cluster,
                nodeclaim=claim,
                reason=disruption_reason(method),
                now=self.now,
                deadline=None if drain_bound is None else self.now + drain_bound,
            )
        except KubernetesError as exc:
            self.out.errors.append(f"terminate {node_name}: {exc}")
            return False
        problems = self.queue.send(requests=[request]) if self.queue is not None else []
        self.out.errors += [f"send termination request {p}" for p in problems]
        self.out.nodes_terminated.append(node_name)
        return True
