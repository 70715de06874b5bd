"""Typed errors of the core. Adapters translate client errors (botocore ``ClientError``,
Kubernetes ``ApiException``) into these so services can decide: retry, fall back or report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "ConflictError",
    "InsufficientCapacityError",
    "KubernetesError",
    "LaunchError",
    "ManifestError",
    "NodeClassNotReadyError",
    "NodesmithError",
    "NotFoundError",
    "QueueError",
    "TerminationError",
    "UnavailableOffering",
]


class NodesmithError(Exception):
    """Base class of every error Nodesmith raises on purpose."""


@dataclass(frozen=True, slots=True)
class UnavailableOffering:
    """One (instance type, zone, capacity type) that EC2 could not fill, with the EC2 error code."""

    instance_type: str
    zone: str
    capacity_type: str
    code: str


class InsufficientCapacityError(NodesmithError):
    """CreateFleet filled nothing because every override hit a capacity error.

    ``offerings`` lists the (type, zone, capacity type, code) that failed, so the caller can mark
    them unavailable (Karpenter's 3-minute unavailable-offerings cache) and fall back.
    """

    def __init__(self, message: str, *, offerings: tuple[UnavailableOffering, ...] = ()) -> None:
        super().__init__(message)
        self.offerings = offerings


class LaunchError(NodesmithError):
    """A launch failed for a reason other than capacity (``code`` is the EC2 error code)."""

    def __init__(self, message: str, *, code: str = "") -> None:
        super().__init__(message)
        self.code = code


class TerminationError(LaunchError):
    """Some instances of a termination could not be terminated; the others were.

    ``failed`` maps each instance id that failed to its own :class:`LaunchError` (its EC2 error code:
    ``OperationNotPermitted`` for termination protection, say). EC2 fails a whole ``TerminateInstances``
    call for one such instance, so the provider retries its ids one by one to tell which
    (``[aws]:pkg/batcher/terminateinstances.go`` does the same).
    """

    def __init__(self, message: str, *, failed: Mapping[str, LaunchError]) -> None:
        first = next(iter(failed.values()), None)
        super().__init__(message, code=first.code if first is not None else "")
        self.failed = dict(failed)


class NodeClassNotReadyError(NodesmithError):
    """The EC2NodeClass did not resolve: no subnet, security group or AMI matched its selector terms.

    ``problems`` maps each dependent readiness condition that failed (``SubnetsReady``, ``AMIsReady``, ...; see
    :mod:`nodesmith.core.nodeclass_status`) to its (reason, message); empty when the resolver did not say which.
    """

    def __init__(self, message: str, *, problems: Mapping[str, tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.problems = dict(problems or {})


class KubernetesError(NodesmithError):
    """A Kubernetes API call failed (``status`` is the HTTP status, 0 when unknown)."""

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class NotFoundError(KubernetesError):
    """The Kubernetes object does not exist (HTTP 404)."""


class ConflictError(KubernetesError):
    """The Kubernetes object changed or already exists (HTTP 409)."""


class QueueError(NodesmithError):
    """A message could not be sent to an SQS queue (the caller's own message is then delivered again)."""


class ManifestError(NodesmithError):
    """A manifest is invalid. The whole file is rejected.

    The message names the file, the document (1-based), the kind/name when known, the field path
    and the reason, for example::

        nodepool.yaml: document 2 (NodePool default): spec.disruption.budgets[0].nodes: must match ...
    """

    def __init__(self, message: str, *, path: str = "", document: int = 0, field: str = "") -> None:
        super().__init__(message)
        self.path = path
        self.document = document
        self.field = field
