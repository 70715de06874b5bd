"""A simulated kubelet for every EC2 instance Nodesmith launched: registers the Node, turns it Ready,
drops startup taints, and takes the Node away when the instance dies.

What a real node does after CreateFleet (EKS AL2023 with nodeadm, the kubelet and the node
lifecycle controller), compressed to seconds:

* a running instance tagged ``karpenter.sh/nodeclaim=<name>`` whose NodeClaim has a launched status
  registers a Node: name = the instance's private DNS name, ``spec.providerID =
  aws:///<zone>/<instance-id>``, labels = the NodeClaim's labels + the instance type's well-known
  labels + ``topology.kubernetes.io/zone``/``region`` + ``karpenter.sh/capacity-type`` +
  ``kubernetes.io/hostname``, taints = the NodeClaim's taints and startup taints plus
  ``node.kubernetes.io/not-ready:NoSchedule``, capacity/allocatable from the NodeClaim's status;
* ``ready_delay`` seconds after registration the Node is ``Ready`` (the not-ready taint goes);
* ``startup_taint_delay`` seconds after registration the startup taints are removed (the agent that
  owns them, e.g. a CNI or a security agent, finished);
* when the instance is gone (not listed, or not running) the Node goes ``Ready=Unknown`` and is
  deleted ``removal_delay`` seconds later (cloud-node-lifecycle controller);
* pods whose graceful deletion period has passed are removed (the kubelet confirming termination).

With ``faults`` (:class:`~nodesmith.sim.cluster_faults.ClusterFaults`) it also plays the cluster's faults: an
instance whose Node is never registered, a Ready Node going NotReady (``Ready=False``, or ``Unknown`` when its
kubelet stops posting status; the node lifecycle controller of :class:`~nodesmith.sim.controllers.SimControllers`
taints it and evicts its pods; no pod deletion on it confirmed while it is down), and pods whose deletion is never
confirmed.

Only Nodes this kubelet created (annotation ``nodesmith.dev/simulated-kubelet``) are touched.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from nodesmith.sim.kube.admission import NOT_READY_TAINT
from nodesmith.sim.kube.errors import ApiError
from nodesmith.sim.kube.timefmt import rfc3339

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from nodesmith.core.model import InstanceType
    from nodesmith.core.ports import Instance
    from nodesmith.sim.cluster_faults import ClusterFaults
    from nodesmith.sim.kube.store import Store

__all__ = ["MANAGED_ANNOTATION", "NOT_READY_TAINT", "SimKubelet"]

LOG = logging.getLogger(__name__)

MANAGED_ANNOTATION = "nodesmith.dev/simulated-kubelet"
_NODES = "nodes"
_CLAIMS = "nodeclaims.karpenter.sh"
_KUBELET_VERSION = "v1.33.0-eks-nodesmith"


def _taint_key(taint: Mapping[str, Any]) -> tuple[str, str]:
    return str(taint.get("key", "")), str(taint.get("effect", ""))


class SimKubelet:
    """Registers and maintains Nodes for launched instances (see the module docstring).

    ``instances`` lists our live instances (e.g. ``cloud.list_instances``); ``instance_types``
    (optional) supplies the well-known labels of each type. Delays are seconds. ``faults`` (optional) are the
    cluster faults to play (see the module docstring).
    """

    watch = (_NODES, _CLAIMS, "pods")

    def __init__(
        self,
        *,
        store: Store,
        instances: Callable[[], Iterable[Instance]],
        instance_types: Mapping[str, InstanceType] | None = None,
        ready_delay: float = 1.0,
        startup_taint_delay: float | None = None,
        removal_delay: float = 0.0,
        faults: ClusterFaults | None = None,
    ) -> None:
        self.store = store
        self.instances = instances
        self.instance_types = dict(instance_types or {})
        self.ready_delay = ready_delay
        self.startup_taint_delay = ready_delay if startup_taint_delay is None else startup_taint_delay
        self.removal_delay = removal_delay
        self.faults = faults
        self._down: dict[str, float] = {}
        """Node name -> when it went NotReady (``goes_not_ready``), while it is down."""
        self._went_down: set[str] = set()
        """Nodes that went NotReady once (a node goes down at most once)."""
        self._registered_at: dict[str, float] = {}
        self._gone_at: dict[str, float] = {}
        self._settled: dict[str, tuple[Mapping[str, Any], Mapping[str, Any] | None]] = {}
        """Node name -> the (Node, NodeClaim) snapshots last found with nothing left to do: Ready, and no startup
        taint left. The store replaces a snapshot on every write, so while both are the same objects the Node
        needs nothing and is not looked at again."""

    # -- one step ------------------------------------------------------------------------------

    def step(self, now: float) -> None:
        """Register, advance and remove Nodes as of ``now`` (epoch seconds)."""
        # The Nodes are read before the instances: a Node deleted after its instance was terminated (as a
        # termination does) is then never registered again from an instance list read before the termination.
        managed = {
            str((n.get("spec") or {}).get("providerID", "")): n
            for n in self.store.objects(_NODES)
            if MANAGED_ANNOTATION in ((n.get("metadata") or {}).get("annotations") or {})
        }
        claims = {c["metadata"]["name"]: c for c in self.store.objects(_CLAIMS)}
        live = {i.provider_id: i for i in self.instances() if i.state == "running"}
        for provider_id, inst in sorted(live.items()):
            claim = claims.get(inst.tags.get("karpenter.sh/nodeclaim", ""))
            node = managed.get(provider_id)
            if node is None:
                if claim is not None and (claim.get("status") or {}).get("allocatable") and self._registers(inst):
                    self._register(inst, claim, now)
            else:
                self._advance(node, claim, now)
        for provider_id, node in sorted(managed.items()):
            if provider_id not in live:
                self._lose(node, now)
        self.store.finish_graceful_deletions(hold=self._holds if self.faults is not None else None)

    def _registers(self, inst: Instance) -> bool:
        return self.faults is None or self.faults.registers(inst.instance_id)

    def _holds(self, pod: Mapping[str, Any]) -> bool:
        """Whether the deletion of ``pod`` goes unconfirmed: its Node is down, or the pod is stuck."""
        if (pod.get("spec") or {}).get("nodeName") in self._down:
            return True
        return self.faults is not None and self.faults.stays_terminating(str(pod["metadata"].get("uid", "")))

    # -- registration ---------------------------------------------------------------------------

    def node_name(self, inst: Instance) -> str:
        """The Node name of ``inst``: its private DNS name (EKS default), else ``ip-<instance-id>``."""
        return inst.private_dns_name or f"ip-{inst.instance_id}.ec2.internal"

    def _labels(self, inst: Instance, claim: Mapping[str, Any], name: str) -> dict[str, str]:
        labels: dict[str, str] = {"kubernetes.io/os": "linux"}
        it = self.instance_types.get(inst.instance_type)
        if it is not None:
            labels.update(it.labels)
        labels.update((claim.get("metadata") or {}).get("labels") or {})
        labels.update(
            {
                "node.kubernetes.io/instance-type": inst.instance_type,
                "topology.kubernetes.io/zone": inst.zone,
                "topology.kubernetes.io/region": inst.zone[:-1],
                "karpenter.sh/capacity-type": inst.capacity_type,
                "kubernetes.io/hostname": name,
            }
        )
        return labels

    def _register(self, inst: Instance, claim: Mapping[str, Any], now: float) -> None:
        name = self.node_name(inst)
        spec = claim.get("spec") or {}
        status = claim.get("status") or {}
        taints = [
            *(spec.get("taints") or []),
            *(spec.get("startupTaints") or []),
            {"key": NOT_READY_TAINT, "effect": "NoSchedule"},
        ]
        labels = self._labels(inst, claim, name)
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": labels, "annotations": {MANAGED_ANNOTATION: "true"}},
            "spec": {"providerID": inst.provider_id, "taints": taints},
            "status": {
                "capacity": dict(status.get("capacity") or status.get("allocatable") or {}),
                "allocatable": dict(status.get("allocatable") or {}),
                "conditions": [self._ready_condition("False", "KubeletNotReady", now)],
                "addresses": [
                    {"type": "InternalDNS", "address": name},
                    {"type": "Hostname", "address": name},
                ],
                "nodeInfo": {
                    "kubeletVersion": _KUBELET_VERSION,
                    "architecture": labels.get("kubernetes.io/arch", "amd64"),
                    "operatingSystem": "linux",
                    "osImage": "Amazon Linux 2023",
                    "containerRuntimeVersion": "containerd://1.7",
                },
            },
        }
        try:
            self.store.create(_NODES, node)
        except ApiError as exc:
            if exc.code != 409:
                raise
            return
        self._registered_at[name] = now
        LOG.info("simulated kubelet registered node %s for %s", name, inst.instance_id)

    @staticmethod
    def _ready_condition(status: str, reason: str, now: float) -> dict[str, str]:
        stamp = rfc3339(now)
        return {
            "type": "Ready",
            "status": status,
            "reason": reason,
            "message": "kubelet is posting ready status" if status == "True" else reason,
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }

    # -- lifecycle ------------------------------------------------------------------------------

    def _advance(self, node: Mapping[str, Any], claim: Mapping[str, Any] | None, now: float) -> None:
        name = node["metadata"]["name"]
        self._gone_at.pop(name, None)
        if name in self._down:
            self._recover(name, now)
            return
        if name not in self._went_down and _is_ready(node) and self.faults and self.faults.goes_not_ready(name):
            self._go_down(name, now)
            return
        settled = self._settled.get(name)
        if settled is not None and settled[0] is node and settled[1] is claim:
            return  # Ready, no startup taint left, and neither it nor its NodeClaim written since
        since = self._registered_at.setdefault(name, now)
        startup = {_taint_key(t) for t in ((claim or {}).get("spec") or {}).get("startupTaints") or []}
        ready = _is_ready(node)
        starting = any(_taint_key(t) in startup for t in (node.get("spec") or {}).get("taints") or [])
        make_ready = now - since >= self.ready_delay and not ready
        drop_startup = now - since >= self.startup_taint_delay and starting
        if not make_ready and not drop_startup:
            if ready and not starting:
                self._settled[name] = (node, claim)
            return

        def edit(obj: dict[str, Any]) -> None:
            spec = obj.setdefault("spec", {})
            taints = spec.get("taints") or []
            if make_ready:
                taints = [t for t in taints if t.get("key") != NOT_READY_TAINT]
                conditions = [c for c in obj["status"].get("conditions") or [] if c.get("type") != "Ready"]
                obj["status"]["conditions"] = [*conditions, self._ready_condition("True", "KubeletReady", now)]
            if drop_startup:
                taints = [t for t in taints if _taint_key(t) not in startup]
            spec["taints"] = taints

        self._mutate(name, edit)

    def _go_down(self, name: str, now: float) -> None:
        """The kubelet of ``name`` fails: ``Ready=Unknown`` when it stops posting status, else ``Ready=False``;
        the node lifecycle controller taints the Node by that condition (:mod:`nodesmith.sim.node_lifecycle`)."""
        self._down[name] = now
        self._went_down.add(name)
        silent = self.faults is not None and self.faults.stops_reporting(name)
        status, reason = ("Unknown", "NodeStatusUnknown") if silent else ("False", "KubeletNotReady")

        def edit(obj: dict[str, Any]) -> None:
            conditions = [c for c in obj["status"].get("conditions") or [] if c.get("type") != "Ready"]
            obj["status"]["conditions"] = [*conditions, self._ready_condition(status, reason, now)]

        self._mutate(name, edit)
        LOG.info("simulated kubelet: node %s went NotReady (Ready=%s)", name, status)

    def _recover(self, name: str, now: float) -> None:
        """Ready again once ``faults.not_ready_seconds`` passed since ``name`` went down (never when None), or at
        once when the faults were taken away (``faults`` None)."""
        seconds = self.faults.not_ready_seconds if self.faults is not None else 0.0
        if seconds is None or now - self._down[name] < seconds:
            return
        del self._down[name]

        def edit(obj: dict[str, Any]) -> None:
            conditions = [c for c in obj["status"].get("conditions") or [] if c.get("type") != "Ready"]
            obj["status"]["conditions"] = [*conditions, self._ready_condition("True", "KubeletReady", now)]

        self._mutate(name, edit)

    def _lose(self, node: Mapping[str, Any], now: float) -> None:
        name = node["metadata"]["name"]
        gone = self._gone_at.setdefault(name, now)
        if now - gone >= self.removal_delay:
            try:
                self.store.delete(_NODES, name)
            except ApiError as exc:
                if exc.code != 404:
                    raise
            self._registered_at.pop(name, None)
            self._gone_at.pop(name, None)
            self._settled.pop(name, None)
            self._down.pop(name, None)
            self._went_down.discard(name)
            LOG.info("simulated kubelet removed node %s (instance gone)", name)
            return
        if _condition(node, "Ready") == "Unknown":
            return

        def edit(obj: dict[str, Any]) -> None:
            conditions = [c for c in obj["status"].get("conditions") or [] if c.get("type") != "Ready"]
            obj["status"]["conditions"] = [*conditions, self._ready_condition("Unknown", "NodeStatusUnknown", now)]

        self._mutate(name, edit)

    def _mutate(self, name: str, edit: Callable[[dict[str, Any]], None]) -> None:
        try:
            self.store.mutate(_NODES, name, edit)
        except ApiError as exc:
            if exc.code != 404:
                raise


def _condition(node: Mapping[str, Any], type_: str) -> str | None:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return str(cond.get("status"))
    return None


def _is_ready(node: Mapping[str, Any]) -> bool:
    return _condition(node, "Ready") == "True"
