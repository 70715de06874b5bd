"""Instance tenancy (``karpenter.k8s.aws/instance-tenancy``), as Karpenter's AWS provider offers and picks it.

Every instance type can run with ``default`` (shared hardware) or ``dedicated`` tenancy
(``[aws]:pkg/providers/instancetype/types.go``: the requirement ``instance-tenancy In [default, dedicated]``), at the
same price. A NodeClaim launches with ``default`` tenancy unless its requirements rule it out (``getTenancyType``,
``[aws]:pkg/providers/instance/instance.go``), and its Node is labelled with the tenancy it got.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from nodesmith.core.requirement import Requirement

if TYPE_CHECKING:
    from nodesmith.core.requirements import Requirements

__all__ = ["LABEL_INSTANCE_TENANCY", "TENANCIES", "TENANCY_DEDICATED", "TENANCY_DEFAULT", "tenancy_of"]

LABEL_INSTANCE_TENANCY: Final = "karpenter.k8s.aws/instance-tenancy"
TENANCY_DEFAULT: Final = "default"
TENANCY_DEDICATED: Final = "dedicated"
TENANCIES: Final = Requirement(
    LABEL_INSTANCE_TENANCY, complement=False, values=frozenset((TENANCY_DEFAULT, TENANCY_DEDICATED))
)
"""The tenancy requirement every instance type carries."""


def tenancy_of(requirements: Requirements) -> str:
    """The tenancy a NodeClaim with ``requirements`` launches with: ``default`` when they allow it (or say nothing
    of tenancy), else ``dedicated`` when they allow that, else ``default``."""
    if not requirements.has(LABEL_INSTANCE_TENANCY):
        return TENANCY_DEFAULT
    req = requirements.get(LABEL_INSTANCE_TENANCY)
    for tenancy in (TENANCY_DEFAULT, TENANCY_DEDICATED):
        if req.has(tenancy):
            return tenancy
    return TENANCY_DEFAULT
