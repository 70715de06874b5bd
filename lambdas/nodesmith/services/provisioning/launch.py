"""Launch one NodeClaim: CreateFleet through the cloud port, then write the result to its status.

Follows Karpenter's launch lifecycle (``[core]:pkg/controllers/nodeclaim/lifecycle/launch.go``):

* an instance already tagged with the NodeClaim's name (a previous pass launched it but died before
  writing the status) is adopted instead of launching a second one;
* success -> ``status.providerID/imageID/capacity/allocatable`` and ``Launched=True``, then the
  instance's type, zone, capacity type and id as labels (merge patch, :func:`.nodeclaims.launched_labels`),
  a ``Launched`` Event on the NodeClaim;
* capacity errors, those of a CreateFleet that launched nothing and those listed beside a launched instance
  (``LaunchResult.capacity_errors``), are remembered for the rest of the pass (the provider also caches them for
  3 minutes); a CreateFleet that launched nothing is tried once more on the NodeClaim's offerings left
  (:data:`MAX_LAUNCH_ATTEMPTS`);
* :class:`~nodesmith.core.errors.InsufficientCapacityError` after that -> the NodeClaim is deleted and the caller
  re-solves its pods;
* any other launch error (``LaunchError``, ``NodeClassNotReadyError``) -> the NodeClaim is deleted
  and its pods are reported unschedulable with the error.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from nodesmith.core.errors import (
    ConflictError,
    InsufficientCapacityError,
    KubernetesError,
    LaunchError,
    NodeClassNotReadyError,
)
from nodesmith.core.labels import LABEL_NODEPOOL
from nodesmith.core.ports import CloudProvider, Cluster, Instance, LaunchResult
from nodesmith.core.requirements import Requirements
from nodesmith.core.tenancy import tenancy_of
from nodesmith.core.termination import TERMINATION_FINALIZER
from nodesmith.services.breakdown import Tally, pool_key
from nodesmith.services.provisioning.capacity import offering_price
from nodesmith.services.provisioning.lifecycle import nodeclaim_ref
from nodesmith.services.provisioning.nodeclaims import TAG_NODECLAIM, launch_request, launched_labels, mark_launched

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping, Sequence

    from nodesmith.core.api.ec2nodeclass import EC2NodeClass
    from nodesmith.core.api.nodeclaim import NodeClaim
    from nodesmith.core.errors import UnavailableOffering
    from nodesmith.core.model import InstanceType

__all__ = ["MAX_LAUNCH_ATTEMPTS", "LaunchOutcome", "Launcher"]

MAX_LAUNCH_ATTEMPTS = 2
"""CreateFleet calls for one NodeClaim in a pass: the first, and one more on the offerings its capacity errors
left. Karpenter marks the offerings of a capacity error unavailable and launches again on the others (its
unavailable-offerings cache, ``[aws]:pkg/cache/unavailableofferings.go``, and the launch's retry); a Lambda pass
may be a minute from the next, so the retry happens in the same pass, before the NodeClaim is given up."""

INSUFFICIENT_CAPACITY = "InsufficientCapacity"
"""Failure code when a capacity error names no offering (or no offering was left to try)."""


@dataclass(frozen=True, slots=True)
class LaunchOutcome:
    """One launch: the NodeClaim with its status written and the result, or why it failed.

    ``capacity_error`` is True when the pods should be solved again (offerings exhausted);
    ``message`` says why a failed launch failed.
    """

    nodeclaim: NodeClaim | None
    result: LaunchResult | None = None
    capacity_error: bool = False
    message: str = ""


@dataclass(slots=True)
class Launcher:
    """Launches NodeClaims for one pass and keeps its tallies.

    ``catalogues`` are instance types by name per EC2NodeClass name; ``pool_catalogues`` those of a NodePool
    with its NodeOverlays applied, by ``(NodePool, EC2NodeClass)``: a NodeClaim of that NodePool and node class
    launches from it, as Karpenter's AWS ``Create`` re-applies overlays to NodeClaims carrying
    ``karpenter.sh/nodepool`` (``price_overlays`` names the ``(NodePool, instance type)`` pairs whose prices an
    overlay set: such a launch goes by the overlaid prices); ``instances`` our live
    instances by id (to adopt an instance launched by an interrupted pass). ``unavailable`` collects
    ``(instance type, zone, capacity type)`` that hit capacity errors; ``failures`` counts failed
    launches by EC2 error code; ``launched_by`` counts launches by (NodePool, capacity type of the
    instance). ``elapsed()`` is the seconds since ``now`` (epoch seconds, the pass's time): a NodeClaim's
    ``Launched`` transition is stamped ``now + elapsed()`` as its launch returns, because garbage collection and
    termination give EC2 10 s from that moment to describe the instance, and a pass's CreateFleet can answer
    seconds after the pass began (throttled and retried, or behind other launches). :meth:`launch` may be called
    from several threads at once (a pass launches its
    NodeClaims in parallel); the tallies are updated under ``lock``.
    """

    cluster: Cluster
    cloud: CloudProvider
    cluster_name: str
    now: float
    nodeclasses: Mapping[str, EC2NodeClass]
    catalogues: Mapping[str, Mapping[str, InstanceType]]
    instances: Mapping[str, Instance]
    pool_catalogues: Mapping[tuple[str, str], Mapping[str, InstanceType]] = field(default_factory=dict)
    price_overlays: Collection[tuple[str, str]] = frozenset()
    elapsed: Callable[[], float] = lambda: 0.0
    unavailable: set[tuple[str, str, str]] = field(default_factory=set)
    failures: Counter[str] = field(default_factory=Counter)
    launched: int = 0
    launched_names: list[str] = field(default_factory=list)
    launched_by: Tally = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def adoptable(self, nodeclaim: NodeClaim) -> LaunchResult | None:
        """The launch of ``nodeclaim``'s instance when the pass's instances hold a pending or running one carrying its
        name (``karpenter.sh/nodeclaim``): a pass that launched it died before writing its status. Else None."""
        for inst in self.instances.values():
            if inst.tags.get(TAG_NODECLAIM) == nodeclaim.name and inst.state in ("pending", "running"):
                catalogue = self.catalogues.get(nodeclaim.spec.node_class_ref.name, {})
                return LaunchResult(
                    instance_id=inst.instance_id,
                    instance_type=inst.instance_type,
                    zone=inst.zone,
                    capacity_type=inst.capacity_type,
                    image_id=inst.image_id,
                    price=offering_price(
                        catalogue, instance_type=inst.instance_type, zone=inst.zone, capacity_type=inst.capacity_type
                    ),
                    reservation_id=inst.reservation_id,
                    reservation_type=inst.reservation_type,
                    reservation_interruptible=_interruptible(catalogue, inst.reservation_id),
                    tenancy=tenancy_of(Requirements.from_node_selector_requirements(nodeclaim.requirements_core())),
                )
        return None

    def _delete(self, nodeclaim: NodeClaim) -> None:
        """Delete a NodeClaim whose launch failed, finalizer and all: it has no node to drain, and an instance
        that might carry its name anyway is an orphan the garbage collection terminates (Karpenter's termination
        controller releases a NodeClaim without a providerID at once)."""
        try:
            self.cluster.delete_nodeclaim(name=nodeclaim.name)
            self.cluster.remove_nodeclaim_finalizer(name=nodeclaim.name, finalizer=TERMINATION_FINALIZER)
        except KubernetesError as exc:
            with self.lock:
                self.errors.append(f"delete NodeClaim {nodeclaim.name} after a failed launch: {exc}")

    def _fail(self, nodeclaim: NodeClaim, code: str, message: str, *, capacity: bool) -> LaunchOutcome:
        with self.lock:
            self.failures[code] += 1
        self.cluster.record_event(
            ref=nodeclaim_ref(nodeclaim),
            reason="InsufficientCapacityError" if capacity else "FailedLaunch",
            message=message,
            type_="Warning",
        )
        self._delete(nodeclaim)
        return LaunchOutcome(nodeclaim=None, capacity_error=capacity, message=message)

    def _learn(self, offerings: Sequence[UnavailableOffering]) -> None:
        with self.lock:
            self.unavailable.update((off.instance_type, off.zone, off.capacity_type) for off in offerings)

    def _create(
        self, nodeclaim: NodeClaim, nodeclass: EC2NodeClass, catalogue: Mapping[str, InstanceType]
    ) -> LaunchResult:
        """CreateFleet for ``nodeclaim`` on the offerings not failed in this pass, once more on those left when its
        capacity errors named offerings (:data:`MAX_LAUNCH_ATTEMPTS`). Every capacity error an answer carries,
        with an instance or without, is added to :attr:`unavailable`; a CreateFleet that launched nothing and was
        followed by another is counted in :attr:`failures`. Raises the last CreateFleet's
        ``InsufficientCapacityError`` when none launched (or ``launch_request``'s, when no offering was left to
        try at all), ``NodeClassNotReadyError`` or ``LaunchError``.
        """
        failed: InsufficientCapacityError | None = None
        for attempt in range(1, MAX_LAUNCH_ATTEMPTS + 1):
            with self.lock:
                unavailable = set(self.unavailable)
            try:
                request = launch_request(
                    nodeclaim=nodeclaim,
                    nodeclass=nodeclass,
                    catalogue=catalogue,
                    cluster_name=self.cluster_name,
                    unavailable=unavailable,
                )
                if self.price_overlays and any(
                    (request.nodepool_name, it.name) in self.price_overlays for it in request.instance_types
                ):
                    request = replace(request, price_overlaid=True)
            except InsufficientCapacityError:
                if failed is None:
                    raise
                raise failed from None  # nothing left to try: the last CreateFleet's errors are the NodeClaim's
            if failed is not None:
                with self.lock:  # it failed, and this is another try
                    self.failures[_capacity_code(failed.offerings)] += 1
            try:
                result = self.cloud.create(request=request)
            except InsufficientCapacityError as exc:
                self._learn(exc.offerings)
                if attempt == MAX_LAUNCH_ATTEMPTS or not exc.offerings:
                    raise
                failed = exc
                continue
            self._learn(result.capacity_errors)
            return result
        raise AssertionError("unreachable: the last attempt returns or raises")  # pragma: no cover

    def _write_launch(
        self, nodeclaim: NodeClaim, result: LaunchResult, catalogue: Mapping[str, InstanceType], at: float
    ) -> NodeClaim:
        """Write the launch of ``result`` (at ``at``, epoch seconds) to ``nodeclaim``'s status; returns the NodeClaim
        as written, or as marked when no write succeeded (the error is recorded). A 409 (the NodeClaim changed since
        it was read: a label, a condition) is met by reading it again and writing once more, as Kubernetes
        controllers do: the instance must not be left unrecorded, since a pass that cannot see it yet (EC2's
        eventual consistency) would launch another for the NodeClaim."""
        marked = mark_launched(nodeclaim=nodeclaim, result=result, catalogue=catalogue, now=at)
        try:
            try:
                return self.cluster.update_nodeclaim_status(nodeclaim=marked)
            except ConflictError:
                fresh = self.cluster.get_nodeclaim(name=nodeclaim.name)
                if fresh is None or fresh.metadata.uid != nodeclaim.metadata.uid or fresh.status.provider_id:
                    raise
                return self.cluster.update_nodeclaim_status(
                    nodeclaim=mark_launched(nodeclaim=fresh, result=result, catalogue=catalogue, now=at)
                )
        except KubernetesError as exc:
            # The instance runs and carries the NodeClaim's name: the next pass adopts it.
            with self.lock:
                self.errors.append(f"write launch status of NodeClaim {nodeclaim.name}: {exc}")
            return marked

    def launch(self, nodeclaim: NodeClaim) -> LaunchOutcome:
        """Launch (or adopt) the instance of ``nodeclaim`` and write its status; never raises for launch errors."""
        nodeclass_name = nodeclaim.spec.node_class_ref.name
        nodeclass = self.nodeclasses.get(nodeclass_name)
        pool = nodeclaim.metadata.labels.get(LABEL_NODEPOOL, "")
        catalogue = self.pool_catalogues.get((pool, nodeclass_name)) or self.catalogues.get(nodeclass_name)
        if nodeclass is None or catalogue is None:
            return self._fail(
                nodeclaim,
                "NodeClassNotReady",
                f'EC2NodeClass "{nodeclass_name}" not found or not ready',
                capacity=False,
            )
        result = self.adoptable(nodeclaim)
        if result is None:
            try:
                result = self._create(nodeclaim, nodeclass, catalogue)
            except InsufficientCapacityError as exc:
                code = _capacity_code(exc.offerings)
                return self._fail(nodeclaim, code, f"launching NodeClaim {nodeclaim.name}: {exc}", capacity=True)
            except NodeClassNotReadyError as exc:
                return self._fail(
                    nodeclaim, "NodeClassNotReady", f"launching NodeClaim {nodeclaim.name}: {exc}", capacity=False
                )
            except LaunchError as exc:
                return self._fail(
                    nodeclaim, exc.code or "LaunchError", f"launching NodeClaim {nodeclaim.name}: {exc}", capacity=False
                )
        launched_at = self.now + max(0.0, self.elapsed())  # when CreateFleet answered, not when the pass began
        updated = self._write_launch(nodeclaim, result, catalogue, launched_at)
        labels = launched_labels(result)
        try:  # after the status: the labels' write would fail the status write's resourceVersion precondition
            self.cluster.label_nodeclaim(name=nodeclaim.name, labels=labels)
            updated.metadata.labels.update(labels)  # our own copy (mark_launched's or the server's answer)
        except KubernetesError as exc:
            # Only the interruption handler reads them, and it describes an unlabelled NodeClaim's instance instead.
            with self.lock:
                self.errors.append(f"label launched NodeClaim {nodeclaim.name}: {exc}")
        with self.lock:
            self.launched += 1
            self.launched_names.append(nodeclaim.name)
            self.launched_by[pool_key(nodeclaim=nodeclaim, capacity_type=result.capacity_type)] += 1
        self.cluster.record_event(
            ref=nodeclaim_ref(updated),
            reason="Launched",
            message=(
                f"Status condition transitioned, Type: Launched, Status: True, instance {result.instance_id} "
                f"({result.instance_type}, {result.zone}, {result.capacity_type}, ${result.price:.4f}/h)"
            ),
        )
        return LaunchOutcome(nodeclaim=updated, result=result)


def _capacity_code(offerings: Sequence[UnavailableOffering]) -> str:
    """The most common EC2 error code of ``offerings`` (:data:`INSUFFICIENT_CAPACITY` when they name none)."""
    codes = Counter(off.code for off in offerings if off.code)
    return codes.most_common(1)[0][0] if codes else INSUFFICIENT_CAPACITY


def _interruptible(catalogue: Mapping[str, InstanceType], reservation_id: str) -> bool:
    """Whether the capacity reservation ``reservation_id`` is an interruptible ODCR, as the catalogue's reserved
    offerings say (False when no offering names it: EC2 describes an instance's reservation, not its kind)."""
    if not reservation_id:
        return False
    return any(
        o.reservation_interruptible
        for it in catalogue.values()
        for o in it.offerings
        if o.reservation_id == reservation_id
    )
