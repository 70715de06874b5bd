"""Voluntary disruption decisions (Karpenter v1 semantics), pure: node repair (v1.15, feature gate
``NodeRepair``: :mod:`.repair`), expiration, drift, emptiness, multi- and single-node consolidation,
disruption budgets, and why every other node stays.

Entry points: :func:`decide` (one pass: expirations + at most one command, Karpenter's loop) and
:func:`plan_disruptions` (every command the loop would start back to back on a snapshot). The
input is a :class:`DisruptionSnapshot`: :class:`ClusterNode` views (Node + pods + NodeClaim + EC2 facts),
the NodePools, EC2NodeClasses, the priced instance catalogue, pending pods, PDBs and DaemonSets; the output is a
:class:`DisruptionPlan` of :class:`Decision` objects. See each module for its Karpenter sources.
"""

from nodesmith.core.disruption.budgets import PoolBudget, budget_mapping
from nodesmith.core.disruption.candidates import Candidate, select_candidates
from nodesmith.core.disruption.decide import DisruptionPlan, decide, still_valid
from nodesmith.core.disruption.drift import drift_of
from nodesmith.core.disruption.drift_basis import (
    NodeClassResolution,
    ResolvedAMI,
    ec2nodeclass_hash,
    nodepool_hash,
    resolution_from_nodeclass,
)
from nodesmith.core.disruption.sequence import plan_disruptions
from nodesmith.core.disruption.types import ClusterNode, Decision, DisruptionSettings, DisruptionSnapshot, Rejection

__all__ = [
    "Candidate",
    "ClusterNode",
    "Decision",
    "DisruptionPlan",
    "DisruptionSettings",
    "DisruptionSnapshot",
    "NodeClassResolution",
    "PoolBudget",
    "Rejection",
    "ResolvedAMI",
    "budget_mapping",
    "decide",
    "drift_of",
    "ec2nodeclass_hash",
    "nodepool_hash",
    "plan_disruptions",
    "resolution_from_nodeclass",
    "select_candidates",
    "still_valid",
]
