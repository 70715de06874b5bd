"""EC2NodeClass finalization: the ``karpenter.k8s.aws/termination`` finalizer and the launch templates it guards.

Karpenter's AWS provider (``[aws]:pkg/controllers/nodeclass``, its finalizer) puts the finalizer on every
EC2NodeClass; when one is deleted it waits until no NodeClaim refers to it (``spec.nodeClassRef``, deleting ones
included: their instances still run from its launch templates), then deletes the launch templates it created for
the class (tagged ``karpenter.k8s.aws/ec2nodeclass=<name>`` and ``kubernetes.io/cluster/<cluster>=owned``, the tags
its controller policy's ``DeleteLaunchTemplate`` statement requires) and removes the finalizer, so the API server
deletes the class. A deleting EC2NodeClass provisions nothing meanwhile (its NodePools are skipped).

Its status (:func:`update_nodeclass_status`) is that of Karpenter's ``nodeclass`` controller
(``[aws]:pkg/controllers/nodeclass``): the conditions ``SubnetsReady``, ``SecurityGroupsReady``, ``AMIsReady``,
``InstanceProfileReady``, ``ValidationSucceeded`` (and ``CapacityReservationsReady`` with the ``ReservedCapacity``
gate) from resolving the class against EC2 and ``Ready`` over them, and beside them what each part resolved to:
``subnets``, ``securityGroups``, ``amis`` and ``instanceProfile`` (:mod:`nodesmith.core.nodeclass_status`;
``capacityReservations`` is written by :mod:`nodesmith.services.provisioning.reservations`). The status reports; it
does not decide: a class that does not resolve gets no offerings, so nothing launches from it whatever it says.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nodesmith.core.errors import KubernetesError, LaunchError, NodesmithError
from nodesmith.core.nodeclass_status import nodeclass_status, status_changed

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from nodesmith.core.api.ec2nodeclass import EC2NodeClass
    from nodesmith.core.api.nodeclaim import NodeClaim
    from nodesmith.services.ports import Ports

__all__ = [
    "NODECLASS_TERMINATION_FINALIZER",
    "NodeClassOutcome",
    "finalize_nodeclasses",
    "update_nodeclass_status",
]

NODECLASS_TERMINATION_FINALIZER = "karpenter.k8s.aws/termination"
"""The EC2NodeClass finalizer of Karpenter's AWS provider (``[aws]:pkg/apis/v1``, ``TerminationFinalizer``)."""


@dataclass(slots=True)
class NodeClassOutcome:
    """What finalization did: EC2NodeClasses given the finalizer, those released (finalizer removed), those
    waiting on NodeClaims (name -> how many still refer to it), launch templates deleted (names), errors met."""

    finalizer_added: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    waiting: dict[str, int] = field(default_factory=dict)
    templates_deleted: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def finalize_nodeclasses(
    *, ports: Ports, nodeclasses: Sequence[EC2NodeClass], nodeclaims: Sequence[NodeClaim]
) -> NodeClassOutcome:
    """Give each live EC2NodeClass the finalizer; release each deleting one no NodeClaim refers to any more, after
    deleting its launch templates (see the module docstring). Does nothing without ``ports.finalizers`` and
    ``ports.templates``. Errors on one class are reported in ``outcome.errors`` (its finalizer stays, the next pass
    tries again) and do not stop the others.
    """
    out = NodeClassOutcome()
    finalizers, templates = ports.finalizers, ports.templates
    if finalizers is None or templates is None:
        return out
    referring: dict[str, int] = {}
    for claim in nodeclaims:
        name = claim.spec.node_class_ref.name
        referring[name] = referring.get(name, 0) + 1
    for nodeclass in nodeclasses:
        name, meta = nodeclass.name, nodeclass.metadata
        ours = NODECLASS_TERMINATION_FINALIZER in meta.finalizers
        try:
            if meta.deletion_timestamp is None:
                if not ours and finalizers.add_ec2nodeclass_finalizer(
                    name=name, finalizer=NODECLASS_TERMINATION_FINALIZER
                ):
                    out.finalizer_added.append(name)
                continue
            if not ours:
                continue
            if referring.get(name):
                out.waiting[name] = referring[name]
                continue
            out.templates_deleted.extend(templates.delete_launch_templates(nodeclass_name=name))
            finalizers.remove_ec2nodeclass_finalizer(name=name, finalizer=NODECLASS_TERMINATION_FINALIZER)
            out.released.append(name)
        except (KubernetesError, LaunchError) as exc:
            out.errors.append(f"finalize EC2NodeClass {name}: {exc}")
    return out


def update_nodeclass_status(
    *, ports: Ports, nodeclasses: Iterable[EC2NodeClass], now: float
) -> tuple[dict[str, EC2NodeClass], list[str]]:
    """Write the status of each live EC2NodeClass in ``nodeclasses`` whose status changed (see the module
    docstring) at ``now`` (epoch seconds): one merge patch of its ``conditions``, ``subnets``, ``securityGroups``,
    ``amis`` and ``instanceProfile`` (:func:`~nodesmith.core.nodeclass_status.nodeclass_status`); an unchanged class
    costs no write, and a condition whose status stays keeps its ``lastTransitionTime``. Deleting classes are left
    alone, as Karpenter's controller only finalizes them. Does nothing without ``ports.readiness``. Returns the
    classes written, as written, by name, and the errors met (one class's error does not stop the others; the next
    pass tries again); never raises.
    """
    written: dict[str, EC2NodeClass] = {}
    errors: list[str] = []
    readiness = ports.readiness
    if readiness is None:
        return written, errors
    for nodeclass in nodeclasses:
        if nodeclass.metadata.deletion_timestamp is not None:
            continue
        try:
            resolution = readiness.nodeclass_parts(nodeclass=nodeclass)
            status = nodeclass_status(nodeclass=nodeclass, resolution=resolution, now=now)
            if not status_changed(nodeclass, status):
                continue
            written[nodeclass.name] = ports.cluster.patch_ec2nodeclass_status(name=nodeclass.name, status=status)
        except NodesmithError as exc:
            errors.append(f"status of EC2NodeClass {nodeclass.name}: {exc}")
    return written, errors
