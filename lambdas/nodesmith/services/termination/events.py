"""Kubernetes Events the drain posts, with the reasons Karpenter users already search for.

Karpenter's terminator (``[core]:pkg/controllers/node/termination/terminator/events/events.go``,
reasons in ``[core]:pkg/events/reason.go``, ``karpenter-v1.md`` §5) posts:

* ``Evicted`` (Normal) on a pod whose eviction the API server accepted: ``Evicted pod: <why>``;
* ``Disrupted`` (Normal) on a pod deleted directly because the node's deadline left no time for
  its grace period (this bypasses its PodDisruptionBudget and ``karpenter.sh/do-not-disrupt``);
* ``FailedDraining`` (Warning) on a node whose drain could not finish: ``Failed to drain node, ...``;
* ``InvalidDoNotDisruptAnnotation`` (Warning) on the node of a pod evicted although it carries a
  ``karpenter.sh/do-not-disrupt`` value Karpenter ignores (``[core]:pkg/utils/pod/events.go`` posts it on
  the pod; here the node's Events name the pod and the value, so ``kubectl describe node`` says why it
  went).

Events are best effort: the port already promises not to raise, and a
:class:`~nodesmith.core.errors.KubernetesError` that escapes anyway is swallowed here, because an
Event must never fail a drain.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from nodesmith.core.do_not_disrupt import INVALID_ANNOTATION_REASON, invalid_annotation_message
from nodesmith.core.errors import KubernetesError
from nodesmith.core.ports import ObjectRef

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nodesmith.core.do_not_disrupt import DoNotDisrupt
    from nodesmith.core.model import Pod
    from nodesmith.core.ports import Cluster

__all__ = [
    "DISRUPTED",
    "EVICTED",
    "FAILED_DRAINING",
    "node_failed_to_drain",
    "node_invalid_do_not_disrupt",
    "pod_evicted",
    "pod_force_deleted",
    "pod_ref",
]

EVICTED = "Evicted"
DISRUPTED = "Disrupted"
FAILED_DRAINING = "FailedDraining"
_MAX_NAMED = 5  # pods named in a FailedDraining message


def pod_ref(pod: Pod) -> ObjectRef:
    """The Event target for ``pod`` (namespaced ``v1`` Pod)."""
    return ObjectRef(kind="Pod", name=pod.name, namespace=pod.namespace, uid=pod.uid)


def _post(cluster: Cluster, *, ref: ObjectRef, reason: str, message: str, type_: str = "Normal") -> None:
    with contextlib.suppress(KubernetesError):
        cluster.record_event(ref=ref, reason=reason, message=message, type_=type_)


def pod_evicted(cluster: Cluster, pod: Pod) -> None:
    """``Evicted`` on ``pod``: the Eviction API accepted it while its node drains."""
    where = f"node {pod.node_name} is draining" if pod.node_name else "its node is draining"
    _post(cluster, ref=pod_ref(pod), reason=EVICTED, message=f"Evicted pod: {where}")


def pod_force_deleted(cluster: Cluster, pod: Pod, *, grace_period_seconds: int, why: str) -> None:
    """``Disrupted`` on ``pod``: deleted directly with ``grace_period_seconds`` because of the node's deadline."""
    _post(
        cluster,
        ref=pod_ref(pod),
        reason=DISRUPTED,
        message=(
            f"Deleting the pod ({why}); granted {grace_period_seconds}s of its "
            f"{pod.termination_grace_period_seconds}s terminationGracePeriodSeconds. This bypasses the "
            "pod's PodDisruptionBudget and the karpenter.sh/do-not-disrupt annotation."
        ),
    )


def node_failed_to_drain(cluster: Cluster, node_name: str, *, remaining: int, blocked: Sequence[str] = ()) -> None:
    """``FailedDraining`` (Warning) on the node: ``remaining`` pods have not left it yet.

    ``blocked`` names pods (``namespace/name``) whose eviction a PodDisruptionBudget refused; the
    first few are quoted so ``kubectl describe node`` says which pod holds the node.
    """
    message = f"Failed to drain node, {remaining} pod(s) are waiting to be evicted"
    if blocked:
        named = ", ".join(blocked[:_MAX_NAMED]) + (", ..." if len(blocked) > _MAX_NAMED else "")
        message += f" (blocked by a PodDisruptionBudget: {named})"
    _post(cluster, ref=ObjectRef(kind="Node", name=node_name), reason=FAILED_DRAINING, message=message, type_="Warning")


def node_invalid_do_not_disrupt(cluster: Cluster, node_name: str, pod: Pod, verdict: DoNotDisrupt) -> None:
    """``InvalidDoNotDisruptAnnotation`` (Warning) on the node: ``pod``'s do-not-disrupt value was ignored."""
    _post(
        cluster,
        ref=ObjectRef(kind="Node", name=node_name),
        reason=INVALID_ANNOTATION_REASON,
        message=invalid_annotation_message(pod, verdict),
        type_="Warning",
    )
