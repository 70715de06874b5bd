"""The provisioning scheduler: :func:`solve` turns a :class:`SchedulingInput` into a :class:`SchedulingResult`.

See :mod:`nodesmith.core.scheduling.scheduler` for the algorithm and its Karpenter sources.
"""

from nodesmith.core.scheduling.scheduler import solve
from nodesmith.core.scheduling.types import ExistingNode, NodeClaimPlan, SchedulingInput, SchedulingResult

__all__ = ["ExistingNode", "NodeClaimPlan", "SchedulingInput", "SchedulingResult", "solve"]
