"""List, get and terminate the cluster's EC2 instances, as core :class:`~nodesmith.core.ports.Instance`.

"Ours" follows Karpenter ``pkg/providers/instance/instance.go`` ``List``: tagged
``kubernetes.io/cluster/<cluster>=owned`` **and** carrying the ``karpenter.sh/nodepool`` and
``karpenter.k8s.aws/ec2nodeclass`` tag keys, so managed node groups (which also carry the cluster
tag) are never listed, hence never garbage-collected. Terminated instances are left out of lists.

Every DescribeInstances answer also fills a per-container cache of each instance's launch facts
(:class:`~nodesmith.core.ports.InstanceFacts`), so drift reads a fleet's subnets and security groups by id only for
instances never described, as Karpenter's instance provider answers ``Get`` from its cache
(``[aws]:pkg/providers/instance/instance.go``). A fleet list replaces the cache with what it saw (an instance gone
from the fleet is forgotten, and a change to a running instance's security groups shows after the next list).
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime
from typing import TYPE_CHECKING, Any

from nodesmith.core.capacityreservations import RESERVATION_TYPE_CAPACITY_BLOCK, RESERVATION_TYPE_DEFAULT
from nodesmith.core.errors import LaunchError, TerminationError
from nodesmith.core.model import CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_SPOT
from nodesmith.core.ports import Instance, InstanceFacts

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

__all__ = [
    "FACTS_CACHE_MAX",
    "LIVE_STATES",
    "NODECLASS_TAG",
    "NODEPOOL_TAG",
    "Instances",
    "instance_from_ec2",
]

LOG = logging.getLogger(__name__)

NODEPOOL_TAG = "karpenter.sh/nodepool"
NODECLASS_TAG = "karpenter.k8s.aws/ec2nodeclass"
LIVE_STATES = ("pending", "running", "stopping", "stopped", "shutting-down")
FACTS_CACHE_MAX = 50_000
"""Instances whose launch facts one container keeps at most: a container that reads instances by id but never lists
the fleet (interruption, termination) forgets the oldest beyond it."""
_TERMINATE_BATCH = 1000  # TerminateInstances accepts at most 1000 ids per call
_DESCRIBE_BATCH = 200
_REQUEST_WIDE = frozenset(
    {
        "RequestLimitExceeded",
        "Throttling",
        "ThrottlingException",
        "UnauthorizedOperation",
        "AuthFailure",
        "InternalError",
        "ServiceUnavailable",
        "Unavailable",
    }
)
"""EC2 error codes about the request, not one of its instances (throttled once botocore's retries ran out, denied,
EC2 failing): trying the ids one by one would only repeat them, so the whole request fails instead. Karpenter's
terminate batcher (``[aws]:pkg/batcher/terminateinstances.go``) splits a batch on any failure, these included."""


def _code(exc: Exception) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


def instance_from_ec2(item: Mapping[str, Any]) -> Instance:
    """Convert one DescribeInstances ``Instance`` (boto3 dict) to a core :class:`Instance`.

    Capacity type is ``spot`` when EC2 reports ``InstanceLifecycle=spot`` or a spot request id, ``reserved`` when
    it runs in a capacity reservation (``CapacityReservationId``; a Capacity Block's instance has
    ``InstanceLifecycle=capacity-block``), else ``on-demand`` (Karpenter ``[aws]:pkg/providers/instance/types.go``);
    launch time becomes epoch seconds.
    """
    launch = item.get("LaunchTime")
    launch_time = launch.timestamp() if isinstance(launch, datetime) else float(launch or 0.0)
    spot = item.get("InstanceLifecycle") == "spot" or bool(item.get("SpotInstanceRequestId"))
    reservation = "" if spot else str(item.get("CapacityReservationId") or "")
    kind = CAPACITY_TYPE_SPOT if spot else CAPACITY_TYPE_RESERVED if reservation else CAPACITY_TYPE_ON_DEMAND
    block = item.get("InstanceLifecycle") == RESERVATION_TYPE_CAPACITY_BLOCK
    return Instance(
        instance_id=str(item["InstanceId"]),
        instance_type=str(item.get("InstanceType", "")),
        zone=str((item.get("Placement") or {}).get("AvailabilityZone", "")),
        capacity_type=kind,
        state=str((item.get("State") or {}).get("Name", "")),
        launch_time=launch_time,
        private_dns_name=str(item.get("PrivateDnsName", "")),
        image_id=str(item.get("ImageId", "")),
        subnet_id=str(item.get("SubnetId", "")),
        security_group_ids=tuple(str(g["GroupId"]) for g in item.get("SecurityGroups") or [] if "GroupId" in g),
        tags={str(t["Key"]): str(t.get("Value", "")) for t in item.get("Tags") or []},
        reservation_id=reservation,
        reservation_type=(RESERVATION_TYPE_CAPACITY_BLOCK if block else RESERVATION_TYPE_DEFAULT)
        if reservation
        else "",
    )


def _instances(pages: Iterable[Mapping[str, Any]]) -> list[Instance]:
    out: list[Instance] = []
    for page in pages:
        for reservation in page.get("Reservations", []):
            out.extend(instance_from_ec2(i) for i in reservation.get("Instances", []))
    return out


class Instances:
    """EC2 instance operations for ``cluster_name`` with the boto3 EC2 client ``ec2``, and the launch facts of the
    instances they described (see the module docstring; safe to use from several threads)."""

    def __init__(self, *, ec2: Any, cluster_name: str) -> None:
        self._ec2 = ec2
        self._cluster = cluster_name
        self._facts: dict[str, InstanceFacts] = {}
        self._lock = threading.Lock()

    def _remember(self, found: Sequence[Instance]) -> None:
        with self._lock:
            for instance in found:
                self._facts.pop(instance.instance_id, None)  # re-inserted last: the oldest go first
                self._facts[instance.instance_id] = InstanceFacts.of(instance)
            for stale in list(self._facts)[: max(0, len(self._facts) - FACTS_CACHE_MAX)]:
                del self._facts[stale]

    def list_all(self) -> list[Instance]:
        """Our instances that are not terminated (paginated DescribeInstances, tag and state filters); their launch
        facts replace the cache's."""
        paginator = self._ec2.get_paginator("describe_instances")
        pages = paginator.paginate(
            Filters=[
                {"Name": f"tag:kubernetes.io/cluster/{self._cluster}", "Values": ["owned"]},
                {"Name": "tag-key", "Values": [NODEPOOL_TAG]},
                {"Name": "tag-key", "Values": [NODECLASS_TAG]},
                {"Name": "instance-state-name", "Values": list(LIVE_STATES)},
            ],
            PaginationConfig={"PageSize": 1000},
        )
        found = sorted(_instances(pages), key=lambda i: i.instance_id)
        with self._lock:
            self._facts = {}
        self._remember(found)
        return found

    def get(self, *, instance_id: str) -> Instance | None:
        """One instance by id, whatever its tags or state; None when EC2 does not know the id."""
        try:
            response = self._ec2.describe_instances(InstanceIds=[instance_id])
        except Exception as exc:
            if _code(exc) in ("InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"):
                return None
            raise
        found = _instances([response])
        self._remember(found)
        return found[0] if found else None

    def describe(self, *, instance_ids: Sequence[str]) -> list[Instance]:
        """Several instances by id, one DescribeInstances per 200 (unknown ids are skipped)."""
        out: list[Instance] = []
        ids = list(dict.fromkeys(instance_ids))
        for start in range(0, len(ids), _DESCRIBE_BATCH):
            batch = ids[start : start + _DESCRIBE_BATCH]
            try:
                found = _instances([self._ec2.describe_instances(InstanceIds=batch)])
            except Exception as exc:
                if _code(exc) != "InvalidInstanceID.NotFound":
                    raise
                found = [i for i in (self.get(instance_id=x) for x in batch) if i is not None]
            self._remember(found)
            out += found
        return out

    def facts(self, *, instance_ids: Sequence[str]) -> dict[str, InstanceFacts]:
        """The launch facts of ``instance_ids`` by id: cached ones as they are, the others described
        (:meth:`describe`, which caches them); ids EC2 does not know are absent. Client errors propagate."""
        with self._lock:
            known = {iid: self._facts[iid] for iid in instance_ids if iid in self._facts}
        missing = [iid for iid in dict.fromkeys(instance_ids) if iid not in known]
        if missing:
            known.update((i.instance_id, InstanceFacts.of(i)) for i in self.describe(instance_ids=missing))
        return known

    def terminate(self, *, instance_ids: Sequence[str]) -> list[str]:
        """Terminate instances in batches; ids EC2 does not know (or cannot parse) are skipped.

        Returns the ids EC2 accepted. EC2 fails a whole call for one instance it will not terminate, so a
        failed call of several ids is retried one id at a time: the others still terminate, and
        ``TerminationError`` (a ``LaunchError``) names each id that failed with its own error. An error
        about the request itself (throttling, authorization, EC2 unavailable: :data:`_REQUEST_WIDE`, or no
        answer) is not retried per id: it raises a plain ``LaunchError`` at once.
        """
        ids = list(dict.fromkeys(i for i in instance_ids if i))
        accepted: list[str] = []
        failed: dict[str, LaunchError] = {}
        for start in range(0, len(ids), _TERMINATE_BATCH):
            accepted += self._terminate_batch(ids[start : start + _TERMINATE_BATCH], failed)
        if failed:
            codes = sorted({e.code for e in failed.values()})
            raise TerminationError(
                f"TerminateInstances failed for {len(failed)} of {len(ids)} instances ({', '.join(codes)}): "
                + "; ".join(f"{i}: {e}" for i, e in failed.items()),
                failed=failed,
            )
        return accepted

    def _terminate_batch(self, batch: list[str], failed: dict[str, LaunchError]) -> list[str]:
        """The ids of ``batch`` EC2 accepted; those it refused go to ``failed`` (id -> error)."""
        try:
            response = self._ec2.terminate_instances(InstanceIds=batch)
        except Exception as exc:
            code = _code(exc)
            if not code or code in _REQUEST_WIDE:  # no error code: the request never reached EC2
                raise LaunchError(f"TerminateInstances failed: {exc}", code=code) from exc
            if len(batch) > 1:  # one instance's error fails the whole call: each alone, to tell which
                return [i for single in batch for i in self._terminate_batch([single], failed)]
            if code in ("InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"):
                LOG.info("instance %s is already gone (%s)", batch[0], code)
                return []
            failed[batch[0]] = LaunchError(f"TerminateInstances failed: {exc}", code=code)
            return []
        return [str(i["InstanceId"]) for i in response.get("TerminatingInstances", [])]
