"""Faults of the cluster itself, played by the simulated kubelet: what nodes and their kubelets do wrong.

:class:`ClusterFaults` decides, seeded and at the rates it is given, which instances, nodes and pods meet a fault;
:class:`~nodesmith.sim.kubelet.SimKubelet` (``faults=``) acts them out. Kinds (:data:`CLUSTER_FAULT_KINDS`):

* ``never_registers``: the instance runs but its kubelet never creates the Node (a bootstrap that failed: a wrong
  cluster endpoint or CA, an AMI whose nodeadm cannot join, a security group that blocks the API server). Karpenter
  deletes such a NodeClaim and terminates its instance after the registration TTL, 15 minutes
  (``[core]:pkg/controllers/nodeclaim/lifecycle/liveness.go``); drawn once per instance, at ``never_register``.
* ``goes_not_ready``: a registered, Ready Node whose kubelet fails: half of them (drawn once per node,
  :meth:`ClusterFaults.stops_reporting`) stop posting status, and ``Ready`` becomes ``Unknown``
  (``NodeStatusUnknown``), the others report ``Ready=False`` (``KubeletNotReady``); the node lifecycle controller
  then taints it ``node.kubernetes.io/unreachable`` or ``node.kubernetes.io/not-ready`` with ``NoSchedule`` and
  ``NoExecute`` and evicts the pods whose tolerations run out (:mod:`nodesmith.sim.node_lifecycle`). Its kubelet
  confirms no pod deletion while it is down. It recovers after ``not_ready_seconds`` (None: never, until its
  instance goes). Drawn once per node when it first is Ready, at ``not_ready``.
* ``stuck_terminating``: a pod whose kubelet never confirms its graceful deletion: it stays ``Terminating``
  (``deletionTimestamp`` set) until it is deleted with grace 0 or its Node goes (pod garbage collection), as with a
  container runtime that hangs on stopping it. Drawn once per pod when its deletion is due, at
  ``stuck_terminating``.

Each kind's faults are spread over its decisions by jittered systematic sampling (:meth:`ClusterFaults._decide`):
after n decisions at rate p, ``floor(n * p)`` or one more were faults, at seeded positions, so a short run with a
dozen launches meets the rate it was given instead of often none (independent draws at 0.1 give no fault in 10
launches one time in three). Draws come from one ``random.Random(seed)`` in the order the kubelet meets
instances, nodes and pods (sorted in each step), so one sequence of steps meets the same faults.
Thread-safe; :meth:`ClusterFaults.counts` counts each fault once, when it is decided.
"""

from __future__ import annotations

import random
import threading
from typing import Literal, get_args

__all__ = ["CLUSTER_FAULT_KINDS", "ClusterFaultKind", "ClusterFaults"]

ClusterFaultKind = Literal["never_registers", "goes_not_ready", "stuck_terminating"]
CLUSTER_FAULT_KINDS: tuple[ClusterFaultKind, ...] = get_args(ClusterFaultKind)


def _probability(what: str, value: float) -> float:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{what}: a probability must be within [0, 1], not {value}")
    return float(value)


class ClusterFaults:
    """Seeded decisions of the cluster faults (see the module docstring).

    ``never_register``, ``not_ready`` and ``stuck_terminating`` are probabilities (0 to 1) per instance, per Ready
    node and per pod deletion; ``not_ready_seconds`` (seconds, > 0, or None for good) is how long a node stays
    NotReady. Raises ``ValueError`` naming a probability outside [0, 1] or a non-positive duration.
    """

    def __init__(
        self,
        *,
        seed: int = 0,
        never_register: float = 0.0,
        not_ready: float = 0.0,
        stuck_terminating: float = 0.0,
        not_ready_seconds: float | None = None,
    ) -> None:
        self.never_register = _probability("never_register", never_register)
        self.not_ready = _probability("not_ready", not_ready)
        self.stuck_terminating = _probability("stuck_terminating", stuck_terminating)
        if not_ready_seconds is not None and not_ready_seconds <= 0:
            raise ValueError(f"not_ready_seconds: a positive number of seconds or None, not {not_ready_seconds}")
        self.not_ready_seconds = not_ready_seconds
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._decided: dict[tuple[ClusterFaultKind, str], bool] = {}
        self._silent: dict[str, bool] = {}
        self._expected: dict[ClusterFaultKind, float] = {}
        self._threshold: dict[ClusterFaultKind, float] = {}

    def _decide(self, kind: ClusterFaultKind, subject: str, rate: float) -> bool:
        """Jittered systematic sampling: each decision adds ``rate`` to the kind's expected count, and the k-th
        fault falls on the decision where that count first reaches ``k - 1 + u`` (``u`` uniform in [0, 1), drawn
        afresh for each fault), so after n decisions ``floor(n * rate)`` or one more faults were decided."""
        with self._lock:
            key = (kind, subject)
            if key not in self._decided:
                hit = False
                if rate > 0.0:
                    self._expected[kind] = self._expected.get(kind, 0.0) + rate
                    threshold = self._threshold.get(kind)
                    if threshold is None:
                        threshold = self._threshold[kind] = self._random.random()
                    if self._expected[kind] >= threshold:
                        hit = True
                        self._threshold[kind] = threshold - threshold % 1.0 + 1.0 + self._random.random()
                self._decided[key] = hit
            return self._decided[key]

    def registers(self, instance_id: str) -> bool:
        """Whether the kubelet of ``instance_id`` ever registers its Node (decided on the first call)."""
        return not self._decide("never_registers", instance_id, self.never_register)

    def goes_not_ready(self, node_name: str) -> bool:
        """Whether the Ready Node ``node_name`` goes NotReady (decided on the first call)."""
        return self._decide("goes_not_ready", node_name, self.not_ready)

    def stops_reporting(self, node_name: str) -> bool:
        """Whether the Node ``node_name``, going NotReady, stops posting status (``Ready=Unknown``) rather than
        reporting ``Ready=False`` (one chance in two, decided on the first call; not a fault of its own)."""
        with self._lock:
            if node_name not in self._silent:
                self._silent[node_name] = self._random.random() < 0.5
            return self._silent[node_name]

    def stays_terminating(self, pod_uid: str) -> bool:
        """Whether the graceful deletion of the pod ``pod_uid`` is never confirmed (decided on the first call)."""
        return self._decide("stuck_terminating", pod_uid, self.stuck_terminating)

    def counts(self) -> dict[str, int]:
        """Faults decided so far, by kind (every kind present, 0 when none)."""
        with self._lock:
            out: dict[str, int] = dict.fromkeys(CLUSTER_FAULT_KINDS, 0)
            for (kind, _), hit in self._decided.items():
                out[kind] += hit
            return out

    def drawn(self) -> dict[str, int]:
        """Decisions made so far (hit or not), by kind (every kind present): the subjects each rate applied to."""
        with self._lock:
            out: dict[str, int] = dict.fromkeys(CLUSTER_FAULT_KINDS, 0)
            for kind, _ in self._decided:
                out[kind] += 1
            return out

    @property
    def total(self) -> int:
        """Faults decided so far, all kinds."""
        return sum(self.counts().values())
