"""NodeOverlays (feature gate ``NodeOverlay``) in a pass: read them, apply them to each NodePool's catalogue
(:func:`~nodesmith.core.overlay.apply_overlays`), and write each overlay's ``ValidationSucceeded``/``Ready``.

This is the one place a pass turns its EC2NodeClass catalogues into the NodePool catalogues scheduling and
consolidation read (Karpenter's overlay decorator on ``GetInstanceTypes(nodePool)``,
``[core]:pkg/cloudprovider/overlay/cloudprovider.go``). The provisioning pass and the disruption pass both
call :func:`nodepool_catalogues`; only the provisioning pass writes statuses (the disruption pass of the same
invocation finds nothing to change).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nodesmith.core.errors import KubernetesError
from nodesmith.core.overlay import OverlayResult, apply_overlays, status_conditions

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from nodesmith.core.api.nodepool import NodePool
    from nodesmith.core.model import InstanceType
    from nodesmith.core.ports import NodeOverlays
    from nodesmith.core.scheduling.types import NodeClaimPlan

__all__ = [
    "ANNOTATION_CAPACITY_OVERLAY_APPLIED",
    "ANNOTATION_PRICE_OVERLAY_APPLIED",
    "PoolCatalogues",
    "nodepool_catalogues",
]

ANNOTATION_PRICE_OVERLAY_APPLIED = "karpenter.sh/price-overlay-applied"
"""On a NodeClaim one of whose instance types a NodeOverlay priced (value ``"true"``)."""
ANNOTATION_CAPACITY_OVERLAY_APPLIED = "karpenter.sh/capacity-overlay-applied"
"""On a NodeClaim one of whose instance types a NodeOverlay gave extended resources (value ``"true"``)."""


@dataclass(slots=True)
class PoolCatalogues:
    """Each NodePool's instance types by name (overlays applied), the overlays' evaluation, and what went wrong.

    ``by_pool`` holds the NodePools whose EC2NodeClass catalogue is known. ``evaluated`` is False when the
    overlays could not be read: as in Karpenter (``UnevaluatedNodePoolError``), NodePools then wait, rather than
    provision or consolidate at prices the overlays would change. ``overlays`` is None with the gate off.
    ``errors`` are one line each (unreadable overlays, failed status writes).
    """

    by_pool: dict[str, Mapping[str, InstanceType]]
    evaluated: bool = True
    overlays: OverlayResult | None = None
    errors: list[str] = field(default_factory=list)

    def for_launch(
        self, nodepools: Sequence[NodePool], catalogues: Mapping[str, Mapping[str, InstanceType]]
    ) -> dict[tuple[str, str], Mapping[str, InstanceType]]:
        """The NodePool catalogues NodeOverlays changed, by ``(NodePool, EC2NodeClass)``, for the launcher."""
        if self.overlays is None:
            return {}
        out: dict[tuple[str, str], Mapping[str, InstanceType]] = {}
        for np in nodepools:
            ref = np.spec.template.spec.node_class_ref.name
            own = self.by_pool.get(np.name)
            if own is not None and own is not catalogues.get(ref):
                out[(np.name, ref)] = own
        return out

    def price_overlaid(self) -> frozenset[tuple[str, str]]:
        """``(NodePool, instance type)`` pairs whose offering prices a NodeOverlay set."""
        return frozenset(self.overlays.price_overlays) if self.overlays is not None else frozenset()

    def annotations(self, plan: NodeClaimPlan) -> dict[str, str]:
        """Karpenter's ``karpenter.sh/price-overlay-applied`` / ``capacity-overlay-applied: "true"`` for the
        NodeClaim of ``plan`` when a NodeOverlay changed one of its instance types
        (``[core]:pkg/scheduling/nodeclaimtemplate.go``)."""
        if self.overlays is None:
            return {}
        keys = [(plan.nodepool, it.name) for it in plan.instance_types]
        out: dict[str, str] = {}
        if any(k in self.overlays.price_overlays for k in keys):
            out[ANNOTATION_PRICE_OVERLAY_APPLIED] = "true"
        if any(k in self.overlays.capacity_overlays for k in keys):
            out[ANNOTATION_CAPACITY_OVERLAY_APPLIED] = "true"
        return out


def nodepool_catalogues(
    *,
    overlays: NodeOverlays | None,
    nodepools: Sequence[NodePool],
    catalogues: Mapping[str, Mapping[str, InstanceType]],
    now: float,
    write_status: bool = True,
) -> PoolCatalogues:
    """Each NodePool's catalogue: its EC2NodeClass's (``catalogues``, by node class name), NodeOverlays applied.

    ``overlays`` None (gate off): the node class catalogues as they are. Otherwise the overlays are listed and
    applied; with ``write_status`` each overlay whose conditions change gets them written
    (:func:`~nodesmith.core.overlay.status_conditions`, ``now`` epoch seconds), guarded by the
    ``resourceVersion`` read. Raises nothing: failures are in the result's ``errors``.
    """
    plain: dict[str, Mapping[str, InstanceType]] = {}
    for np in nodepools:
        catalogue = catalogues.get(np.spec.template.spec.node_class_ref.name)
        if catalogue is not None:
            plain[np.name] = catalogue
    if overlays is None:
        return PoolCatalogues(by_pool=plain)
    try:
        listed = overlays.list_nodeoverlays()
    except KubernetesError as exc:
        return PoolCatalogues(
            by_pool={},
            evaluated=False,
            errors=[f"list NodeOverlays: {exc}; NodePools wait for the overlays' evaluation"],
        )
    lists: dict[int, list[InstanceType]] = {}
    types = {name: lists.setdefault(id(c), list(c.values())) for name, c in plain.items()}
    result = apply_overlays(
        overlays=listed, nodepools=[np for np in nodepools if np.name in types], instance_types=types
    )
    shared: dict[int, Mapping[str, InstanceType]] = {}
    by_pool: dict[str, Mapping[str, InstanceType]] = {}
    for name, overlaid in result.instance_types.items():
        if id(overlaid) not in shared:
            untouched = next((c for c in plain.values() if lists.get(id(c)) is overlaid), None)
            shared[id(overlaid)] = untouched if untouched is not None else {it.name: it for it in overlaid}
        by_pool[name] = shared[id(overlaid)]
    out = PoolCatalogues(by_pool=by_pool, overlays=result)
    if write_status:
        for overlay in listed:
            verdict = result.verdicts.get(overlay.name)
            conditions = None if verdict is None else status_conditions(overlay=overlay, verdict=verdict, now=now)
            if conditions is None:
                continue
            try:
                overlays.patch_nodeoverlay_status(
                    name=overlay.name,
                    conditions=[c.model_dump(by_alias=True, exclude_none=True) for c in conditions],
                    resource_version=overlay.metadata.resource_version,
                )
            except KubernetesError as exc:
                out.errors.append(f"write NodeOverlay {overlay.name} status: {exc}")
    return out
