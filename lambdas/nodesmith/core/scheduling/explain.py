"""Building a pod's :class:`~nodesmith.core.scheduling.reasons.Explanation` during a pass.

* **Unschedulable pods** (every one): after the queue stops making progress, each NodePool's
  rejection from the pod's last attempt (its most relaxed form, as Karpenter reports the error of
  the last relaxation) becomes a verdict with its funnel and hints, plus a summary of why the
  existing nodes did not take it. Nothing has been placed since those attempts, so the pass's
  state (limits left, topology counts, node headroom) is the one they saw.
* **Pods asked about** (``SchedulingInput.explain``): just before the pod is placed, every
  NodePool's verdict is recorded: the ones that refused it, the one whose new NodeClaim took it,
  and what the others would have said; the final placement (after re-packing) is added from the
  plan that holds it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from nodesmith.core.scheduling.diagnose import existing_summary, fit_verdict, rejected_verdict
from nodesmith.core.scheduling.nodeclaim import new_nodeclaim
from nodesmith.core.scheduling.reasons import (
    CHOSEN,
    REJECTED,
    WOULD_FIT,
    WOULD_NOT_FIT,
    Explanation,
    NodeSummary,
    PoolVerdict,
    Rejection,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from nodesmith.core.model import NodeSelectorRequirement, Pod
    from nodesmith.core.scheduling.existing import SimExistingNode
    from nodesmith.core.scheduling.nodeclaim import SimNodeClaim, Template
    from nodesmith.core.scheduling.pods import PodData
    from nodesmith.core.scheduling.topology import Topology
    from nodesmith.core.scheduling.types import NodeClaimPlan

__all__ = ["Explainer", "Failure"]

PROBE_HOSTNAME = "hostname-placeholder-explain"
"""Hostname of the NodeClaims opened only to ask a NodePool what it would say (never kept)."""


@dataclass(frozen=True, slots=True)
class Failure:
    """A pod's failed attempt: the pod data it was tried with (after ``relaxed`` steps), each
    NodePool's rejection (weight order), or a pod-level ``error``."""

    data: PodData
    relaxed: tuple[str, ...] = ()
    rejections: tuple[tuple[Template, Rejection], ...] = ()
    error: str = ""


class Explainer:
    """Explanations for one pass (see the module docstring). Verdicts are cached per NodePool, pod
    data and rejection, so a thousand identical unschedulable pods cost one explanation."""

    def __init__(
        self,
        *,
        templates: Sequence[Template],
        skipped: Sequence[tuple[str, Rejection]],
        existing: Sequence[SimExistingNode],
        topology: Topology,
        volumes: Mapping[str, tuple[NodeSelectorRequirement, ...]] | None = None,
    ) -> None:
        self.volumes = volumes or {}
        self.templates = templates
        self.skipped = skipped
        self.existing = existing
        self.topology = topology
        self._traces: dict[str, Explanation] = {}
        self._verdicts: dict[tuple[object, ...], PoolVerdict] = {}
        self._nodes: dict[int, NodeSummary | None] = {}

    def _verdict(
        self, tpl: Template | None, name: str, rejection: Rejection, data: PodData, verdict: str
    ) -> PoolVerdict:
        key = (name, id(data), rejection.stage, rejection.message, verdict)
        hit = self._verdicts.get(key)
        if hit is None:
            hit = rejected_verdict(tpl, name, rejection, data, verdict)
            self._verdicts[key] = hit
        return hit

    def _skipped(self, data: PodData) -> list[PoolVerdict]:
        return [self._verdict(None, name, rejection, data, REJECTED) for name, rejection in self.skipped]

    def _existing(self, pod: Pod, data: PodData) -> NodeSummary | None:
        if id(data) not in self._nodes:
            self._nodes[id(data)] = existing_summary(self.existing, pod, data, self.topology)
        return self._nodes[id(data)]

    def _volumes(self, pod: Pod) -> tuple[str, ...]:
        return tuple(
            f"{r.key} {r.operator} [{', '.join(r.values)}]" if r.values else f"{r.key} {r.operator}"
            for r in self.volumes.get(pod.key, ())
        )

    def failure(self, pod: Pod, failure: Failure, *, original: PodData) -> Explanation:
        """The explanation of a pod no attempt could place (``original``: its unrelaxed pod data)."""
        if failure.error:
            return Explanation(
                pod=pod.key, scheduled=False, relaxed=failure.relaxed, error=failure.error, volumes=self._volumes(pod)
            )
        data = failure.data
        if data is not original:
            self.topology.update(pod, data)  # judge existing nodes with the constraints of the last attempt
        try:
            pools = [self._verdict(tpl, tpl.name, rej, data, REJECTED) for tpl, rej in failure.rejections]
            existing = self._existing(pod, data)
        finally:
            if data is not original:
                self.topology.update(pod, original)
        return Explanation(
            pod=pod.key,
            scheduled=False,
            pools=(*pools, *self._skipped(data)),
            existing=existing,
            relaxed=failure.relaxed,
            volumes=self._volumes(pod),
        )

    def trace(
        self,
        pod: Pod,
        data: PodData,
        relaxed: tuple[str, ...],
        *,
        placed: str,
        chosen: tuple[Template, SimNodeClaim] | None = None,
        rejections: Sequence[tuple[Template, Rejection]] = (),
    ) -> None:
        """Record every NodePool's verdict for a pod about to be placed (``placed`` says where)."""
        refused = {id(tpl): rejection for tpl, rejection in rejections}
        pools: list[PoolVerdict] = []
        for tpl in self.templates:
            if id(tpl) in refused:
                pools.append(self._verdict(tpl, tpl.name, refused[id(tpl)], data, REJECTED))
            elif chosen is not None and chosen[0] is tpl:
                pools.append(fit_verdict(tpl, chosen[1], data, CHOSEN))
            else:
                claim, rejection = new_nodeclaim(tpl, pod, data, self.topology, seq=-1, hostname=PROBE_HOSTNAME)
                if claim is not None:
                    pools.append(fit_verdict(tpl, claim, data, WOULD_FIT))
                elif rejection is not None:
                    pools.append(self._verdict(tpl, tpl.name, rejection, data, WOULD_NOT_FIT))
        existing = None if placed.startswith("existing node") else self._existing(pod, data)
        self._traces[pod.key] = Explanation(
            pod=pod.key,
            scheduled=True,
            placement=placed,
            pools=(*pools, *self._skipped(data)),
            existing=existing,
            relaxed=relaxed,
            volumes=self._volumes(pod),
        )

    def unlaunchable(self, pod: Pod, reason: str, tpl: Template) -> Explanation:
        """A pod whose NodeClaim cannot launch after all (minValues broken by the instance-type cut)."""
        message = reason.removeprefix(f'nodepool "{tpl.name}": ')
        verdict = PoolVerdict(
            nodepool=tpl.name, verdict=REJECTED, stage="minValues", constraint="minValues", message=message
        )
        return Explanation(pod=pod.key, scheduled=False, pools=(verdict,))

    def placed(self, key: str, *, plan: NodeClaimPlan | None = None, node: str | None = None) -> Explanation:
        """A traced pod's explanation with its final placement (a plan to launch, or an existing node)."""
        base = self._traces.get(key) or Explanation(pod=key, scheduled=True)
        if plan is not None:
            types = len(plan.instance_types)
            cheapest = plan.instance_types[0].name if plan.instance_types else "?"
            zone = f" in {plan.zone}" if plan.zone else ""
            where = (
                f"new NodeClaim of nodepool {plan.nodepool} with {len(plan.pods)} pod(s): {cheapest} "
                f"(+{types - 1} larger or dearer types) at {plan.price_per_hour:.4f} USD/hour{zone}"
            )
        else:
            where = f"existing node {node}"
        if base.placement.startswith("NodeClaim planned"):
            where += " (joined a NodeClaim planned in this pass for another pod)"
        return replace(base, placement=where)
