"""Breakdown keys of the counts a pass reports: (NodePool, capacity type) and termination reasons.

The handlers turn these into metric dimensions (``NodePool``, ``CapacityType``, ``Reason``, see
``infra/metric_names.py``), as Karpenter labels its counters ``nodepool`` / ``capacity_type`` /
``reason`` (``karpenter_nodeclaims_created_total``, ``..._disrupted_total``; ``karpenter-v1.md`` §5).

Termination reasons are Karpenter's where it has one (``[core]:pkg/controllers/nodeclaim``:
garbage collection, liveness' launch and registration timeouts; the disruption reasons of
``[core]:pkg/apis/v1`` ``Empty``, ``Drifted``, ``Underutilized``, ``Expired``, and node repair's
``Unhealthy``), spelled in
CloudWatch's CamelCase. Interruptions use Karpenter's interruption event reason
(``SpotInterrupted``, ``InstanceTerminating``, ...; :mod:`nodesmith.services.interrupt`).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from nodesmith.core.labels import LABEL_CAPACITY_TYPE, LABEL_NODEPOOL

if TYPE_CHECKING:
    from collections.abc import Mapping

    from nodesmith.core.api.nodeclaim import NodeClaim

__all__ = [
    "DISRUPTION_REASONS",
    "REASON_GARBAGE_COLLECTED",
    "REASON_LAUNCH_TIMEOUT",
    "REASON_REGISTRATION_TIMEOUT",
    "UNKNOWN",
    "PoolKey",
    "Tally",
    "disruption_reason",
    "pool_key",
]

UNKNOWN = "unknown"
"""Dimension value when a NodePool or capacity type cannot be told (not launched, not ours)."""

REASON_GARBAGE_COLLECTED = "GarbageCollected"
"""The NodeClaim's instance is gone (terminated outside Nodesmith): NodeClaim garbage collection."""
REASON_LAUNCH_TIMEOUT = "LaunchTimeout"
"""Not Launched within the launch TTL of its creation (liveness)."""
REASON_REGISTRATION_TIMEOUT = "RegistrationTimeout"
"""Launched but not Registered within the registration TTL (liveness)."""

DISRUPTION_REASONS: Mapping[str, str] = {
    "repair": "Unhealthy",
    "emptiness": "Empty",
    "drift": "Drifted",
    "expiration": "Expired",
    "multi-node-consolidation": "Underutilized",
    "single-node-consolidation": "Underutilized",
    "consolidation": "Underutilized",
}
"""Disruption method -> Karpenter's disruption reason (``karpenter_nodeclaims_disrupted_total{reason}``)."""

PoolKey = tuple[str, str]
"""``(NodePool, capacity type)``, each :data:`UNKNOWN` when not known."""

Tally = Counter[PoolKey]
"""Counts by :data:`PoolKey`."""


def pool_key(
    *,
    nodeclaim: NodeClaim | None = None,
    labels: Mapping[str, str] | None = None,
    capacity_type: str | None = None,
) -> PoolKey:
    """``(NodePool, capacity type)`` from the first source that has each.

    Order: ``capacity_type`` given (the launched instance's), the NodeClaim's labels, then
    ``labels`` (the Node's: kubelet registers it with the NodeClaim's and the offering's labels).
    """
    claim_labels: Mapping[str, str] = nodeclaim.metadata.labels if nodeclaim is not None else {}
    other = labels or {}
    pool = claim_labels.get(LABEL_NODEPOOL) or other.get(LABEL_NODEPOOL) or UNKNOWN
    kind = capacity_type or claim_labels.get(LABEL_CAPACITY_TYPE) or other.get(LABEL_CAPACITY_TYPE) or UNKNOWN
    return pool, kind


def disruption_reason(method: str) -> str:
    """Karpenter's disruption reason for a disruption ``method`` (the method itself when it has none)."""
    return DISRUPTION_REASONS.get(method, method)
