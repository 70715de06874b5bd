"""Write each NodePool's status (nodes, resources, readiness conditions) at the end of a pass.

The status comes from :func:`nodesmith.core.nodepool_status.nodepool_status` over the pass's snapshot;
it is written (a merge patch on the status subresource) only when it changed, so a quiet cluster costs
no writes. A failed write is reported in ``out.errors`` and retried by the next pass, as Karpenter's
counter and readiness controllers requeue.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodesmith.core.errors import KubernetesError
from nodesmith.core.nodepool_status import nodepool_status, status_changed

if TYPE_CHECKING:
    from nodesmith.core.ports import Cluster
    from nodesmith.services.provisioning.inputs import Snapshot
    from nodesmith.services.provisioning.outcome import ReconcileOutcome

__all__ = ["update_nodepool_statuses"]


def update_nodepool_statuses(*, cluster: Cluster, snap: Snapshot, now: float, out: ReconcileOutcome) -> int:
    """Write the status of every NodePool of ``snap`` whose status changed; returns how many were written."""
    written = 0
    for pool in snap.nodepools:
        ref = pool.spec.template.spec.node_class_ref.name
        status = nodepool_status(
            nodepool=pool,
            nodes=snap.nodes,
            nodeclaims=snap.nodeclaims,
            nodeclass=snap.nodeclasses.get(ref),
            now=now,
        )
        if not status_changed(pool, status):
            continue
        try:
            cluster.update_nodepool_status(name=pool.name, status=status)
        except KubernetesError as exc:
            out.errors.append(f"nodepool {pool.name} status: {exc}")
            continue
        written += 1
    return written
