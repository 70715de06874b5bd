"""Locate a batch's interrupted instances: from the NodeClaims we launched them for, else from EC2.

Karpenter's interruption controller never asks EC2 where an interrupted instance is: it maps the
message's instance id to a NodeClaim through its informer cache (NodeClaims by providerID), and an
instance no NodeClaim names is not the cluster's (``[aws]:pkg/controllers/interruption/controller.go``).
A Lambda has no informer, so a batch asks the API server for exactly its NodeClaims: those labelled
``nodesmith.dev/instance-id`` with one of its ids (one list; the launch writes that label with the
instance's type, zone and capacity type, :func:`~nodesmith.services.nodeclaims.launched_labels`).
Everything the cordon needs of an instance -- its type, zone and capacity type (the offering to mark
unavailable), its NodeClaim, its node's name, that it is ours -- is fixed at launch, so the NodeClaim
answers it. Only its state is not: the NodeClaim answers for warnings sent while the instance still runs
(spot interruption warnings before their deadline, rebalance recommendations, scheduled changes), the
same trust a continuation gives the instances it carries. Every other instance -- named in a state-change
event, past its warning's deadline, or without a labelled NodeClaim (launched before the label, or by
Karpenter) -- is described in one ``DescribeInstances`` call for the batch, as before.

At 1,000 simultaneous interruptions in ``bench/interruptions.py`` that describe was the largest single
cost of the cordon phase: moto spent most of its CPU serialising the ~100 responses, and the
invocations parsing them; the NodeClaim list selects 10 small objects.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from nodesmith.core.interruption import MessageKind
from nodesmith.core.labels import LABEL_CAPACITY_TYPE, LABEL_INSTANCE_ID, LABEL_INSTANCE_TYPE, LABEL_ZONE
from nodesmith.core.ports import Instance
from nodesmith.services.capacity import from_rfc3339
from nodesmith.services.interrupt import NODECLAIM_TAG, NODEPOOL_TAG, cluster_tag

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nodesmith.core.api.nodeclaim import NodeClaim
    from nodesmith.core.ports import CloudProvider, Cluster
    from nodesmith.services.interrupt_batch_run import BatchEntry

__all__ = ["RUNNING_KINDS", "instance_from_nodeclaim", "locate_instances"]

LOG = logging.getLogger(__name__)

RUNNING_KINDS = frozenset(
    {MessageKind.SPOT_INTERRUPTED, MessageKind.REBALANCE_RECOMMENDATION, MessageKind.SCHEDULED_CHANGE}
)
"""Messages EC2 sends while the instance still runs (a warning ahead of the interruption, a recommendation,
a notice of planned maintenance): before their deadline, the instance's NodeClaim stands in for describing it."""


def instance_from_nodeclaim(claim: NodeClaim, cluster_name: str) -> Instance | None:
    """The instance ``claim`` launched, as far as the NodeClaim knows it; None when it lacks a launch label.

    Type, zone and capacity type come from the launch labels, the id from ``nodesmith.dev/instance-id``
    (matching ``status.providerID``), the private DNS name from ``status.nodeName`` (the node name EKS gives
    it; empty before registration), the launch time from the NodeClaim's creation (epoch seconds, created just
    before the launch), the image from ``status.imageID``. The state is ``running``: use it only for
    :data:`RUNNING_KINDS` messages before their deadline. The tags are those we launched it with that the
    handler reads: our cluster's (the NodeClaim is in our cluster), ``karpenter.sh/nodeclaim`` and
    ``karpenter.sh/nodepool``.
    """
    labels = claim.metadata.labels
    instance_id = labels.get(LABEL_INSTANCE_ID, "")
    facts = (labels.get(LABEL_INSTANCE_TYPE), labels.get(LABEL_ZONE), labels.get(LABEL_CAPACITY_TYPE))
    if not instance_id or not all(facts) or claim.status.provider_id != f"aws:///{facts[1]}/{instance_id}":
        return None
    instance_type, zone, capacity_type = (str(f) for f in facts)
    tags = {cluster_tag(cluster_name): "owned", NODECLAIM_TAG: claim.name}
    if claim.nodepool_name:
        tags[NODEPOOL_TAG] = claim.nodepool_name
    return Instance(
        instance_id=instance_id,
        instance_type=instance_type,
        zone=zone,
        capacity_type=capacity_type,
        state="running",
        launch_time=from_rfc3339(claim.metadata.creation_timestamp) or 0.0,
        private_dns_name=claim.status.node_name or "",
        image_id=claim.status.image_id or "",
        tags=tags,
    )


def _from_nodeclaims(cluster: Cluster, cluster_name: str, instance_ids: Sequence[str]) -> dict[str, Instance]:
    """Those of ``instance_ids`` a labelled NodeClaim answers for (one list); none when the list fails."""
    if not instance_ids:
        return {}
    try:
        claims = cluster.nodeclaims_for_instances(instance_ids=list(dict.fromkeys(instance_ids)))
    except Exception as exc:
        LOG.warning("listing the batch's NodeClaims failed, describing their instances instead: %s", exc)
        return {}
    found = {iid: instance_from_nodeclaim(claim, cluster_name) for iid, claim in claims.items()}
    return {iid: inst for iid, inst in found.items() if inst is not None}


def _describe(cloud: CloudProvider, instance_ids: Sequence[str]) -> dict[str, Instance | None] | None:
    """Every instance of ``instance_ids`` in one call (``get_instances``: one DescribeInstances); ids EC2 does
    not know map to None. None (look them up one by one) when there are none or the call fails."""
    if not instance_ids:
        return None
    try:
        found = cloud.get_instances(instance_ids=list(dict.fromkeys(instance_ids)))
    except Exception as exc:
        LOG.warning("describing the batch's instances failed, looking them up one by one: %s", exc)
        return None
    return {iid: found.get(iid) for iid in instance_ids}


def locate_instances(
    *, cloud: CloudProvider, cluster: Cluster, cluster_name: str, acting: Sequence[BatchEntry], now: float
) -> dict[str, Instance | None] | None:
    """The batch's instances by id (None: EC2 does not know it), or None (look each up) when none is known.

    In order: those a continuation carries (located by the invocation before it); for :data:`RUNNING_KINDS`
    messages, those a labelled NodeClaim answers for (:func:`instance_from_nodeclaim`, one list); the rest
    described in one call. Both shortcuts hold only before the message's deadline (``now``, epoch seconds):
    after it EC2 may have taken the instance back, and described afresh it is seen gone, so its node is
    removed at once instead of drained. A failing list or describe is logged and falls back (to the describe,
    or to one lookup per instance).
    """

    def in_time(e: BatchEntry) -> bool:
        return e.item.message.deadline is None or now < e.item.message.deadline

    located: dict[str, Instance | None] = {
        i.instance_id: i
        for e in acting
        if e.item.continuation is not None and in_time(e)
        for i in e.item.continuation.instances
    }
    running = [iid for e in acting if e.item.message.kind in RUNNING_KINDS and in_time(e) for iid in e.instance_ids()]
    located.update(_from_nodeclaims(cluster, cluster_name, [iid for iid in running if iid not in located]))
    described = _describe(cloud, [iid for e in acting for iid in e.instance_ids() if iid not in located])
    if not located:
        return described
    return {**(described or {}), **located}
