"""What ``bench/chaos.py`` checks while the cluster runs and at the end: :class:`Monitor` follows the API emulator's
store throughout (PodDisruptionBudget violations, Ready pods removed with their node, pods deleted directly by the
termination function), :func:`end_state` reads EC2 and the cluster once the run has settled (orphaned instances and
launch templates, NodeClaims leaked or launched twice, nodes the pods do not need, pods still pending)."""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from typing import Any

from interruptions_monitor import conditions

from nodesmith.core.model import instance_id_of

CLUSTER_TAG = "kubernetes.io/cluster/{}"
NODEPOOL_TAG = "karpenter.sh/nodepool"
NODECLAIM_TAG = "karpenter.sh/nodeclaim"
NODECLAIMS = "nodeclaims.karpenter.sh"


def _app(pod: dict[str, Any]) -> str:
    return str((pod["metadata"].get("labels") or {}).get("app", ""))


class Monitor:
    """Follows pods and nodes in ``store`` (a watch subscription, in a thread) from :meth:`start`.

    ``budgeted`` maps an app label to its Deployment's replicas, behind a ``maxUnavailable: 1`` budget: a
    violation is the budgeted app going below ``replicas - 1`` healthy (Ready, not terminating) pods, counted once
    per dip. Pods the node lifecycle controller evicts from a Node that is not Ready (an involuntary disruption,
    which a PodDisruptionBudget does not stop) are excused from the count until the app is back within its budget;
    :attr:`involuntary` counts them. A pod lost with its node is a Ready pod deleted after its node was (the pod
    garbage collector's work: it was never evicted). :meth:`forced` records a pod the termination function deleted
    directly.
    """

    def __init__(self, *, store: Any, budgeted: dict[str, int]) -> None:
        self.store, self.budgeted = store, budgeted
        self.pods: dict[str, tuple[str, str, bool]] = {}  # key -> (app, node, healthy)
        self.healthy: Counter[str] = Counter()
        self.removed_nodes: set[str] = set()
        self.lost_with_node: dict[str, str] = {}  # pod key -> the node it was on
        self.forced_pods: set[str] = set()
        self.violations, self.in_violation = 0, set[str]()
        self.not_ready: set[str] = set()
        self.excused: Counter[str] = Counter()
        self.involuntary = 0
        self.details: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.lock, self.stopped = threading.Lock(), threading.Event()
        self._sub: Any = None

    def start(self) -> None:
        """Record from now (the pods already there count as they are)."""
        with self.lock:
            self._sub = self.store.subscribe(resources=["nodes", "pods"])
            for pod in self.store.objects("pods"):
                self._pod(pod, deleted=False)
        threading.Thread(target=self._run, name="chaos-monitor", daemon=True).start()

    def stop(self) -> None:
        """Stop following the store."""
        self.stopped.set()
        self.store.unsubscribe(self._sub)

    def forced(self, key: str) -> None:
        """Record that the pod ``namespace/name`` was deleted directly, bypassing its budget."""
        with self.lock:
            self.forced_pods.add(key)

    def _run(self) -> None:
        while not self.stopped.is_set():
            event = self._sub.get(timeout=0.2)
            for ev in [event, *self._sub.drain()] if event is not None else []:
                with self.lock:
                    try:
                        self._handle(ev)
                    except Exception as exc:  # a bench bug must not silently stop the checks
                        self.errors.append(f"{type(exc).__name__}: {exc}")

    def _handle(self, ev: Any) -> None:
        if ev.resource == "nodes":
            name = ev.object["metadata"]["name"]
            if ev.type == "DELETED":
                self.removed_nodes.add(name)
            if conditions(ev.object).get("Ready") == "True" or ev.type == "DELETED":
                self.not_ready.discard(name)
            else:
                self.not_ready.add(name)
            return
        self._pod(ev.object, deleted=ev.type == "DELETED")
        for app, replicas in self.budgeted.items():
            if self.healthy[app] >= replicas - 1:
                self.in_violation.discard(app)
                self.excused[app] = 0
            elif self.healthy[app] + self.excused[app] >= replicas - 1:
                continue
            elif app not in self.in_violation:
                self.violations += 1
                self.in_violation.add(app)
                if len(self.details) < 5:
                    pods = sorted((node, h) for a, node, h in self.pods.values() if a == app)
                    self.details.append({"app": app, "healthy": self.healthy[app], "pods": pods})

    def _pod(self, pod: dict[str, Any], *, deleted: bool) -> None:
        meta = pod["metadata"]
        key, app = f"{meta.get('namespace')}/{meta['name']}", _app(pod)
        old = self.pods.pop(key, None)
        if old is not None and old[2]:
            self.healthy[old[0]] -= 1
            if deleted and old[1] in self.removed_nodes:
                self.lost_with_node[key] = old[1]
            elif not deleted and meta.get("deletionTimestamp") and old[1] in self.not_ready:
                self.excused[old[0]] += 1  # evicted for its node's NoExecute taint
                self.involuntary += 1
        if deleted or not app:
            return
        healthy = not meta.get("deletionTimestamp") and conditions(pod).get("Ready") == "True"
        self.pods[key] = (app, (pod.get("spec") or {}).get("nodeName") or "", healthy)
        self.healthy[app] += healthy


def _our_instances(ec2: Any, cluster_name: str) -> list[dict[str, Any]]:
    """Every instance (any state) tagged ``kubernetes.io/cluster/<name>=owned`` with a NodePool tag."""
    found = []
    filters = [{"Name": f"tag:{CLUSTER_TAG.format(cluster_name)}", "Values": ["owned"]},
               {"Name": "tag-key", "Values": [NODEPOOL_TAG]}]  # fmt: skip
    for page in ec2.get_paginator("describe_instances").paginate(Filters=filters):
        for reservation in page["Reservations"]:
            found.extend(reservation["Instances"])
    return found


def _tags(instance: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in instance.get("Tags") or []}


def _live(instances: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [i for i in instances if i["State"]["Name"] in ("pending", "running")]


def _claimed_ids(claims: list[dict[str, Any]]) -> set[str | None]:
    """The instance ids the NodeClaims not being deleted name in ``status.providerID``."""
    return {
        instance_id_of((c.get("status") or {}).get("providerID"))
        for c in claims
        if not c["metadata"].get("deletionTimestamp")
    }


def unclaimed_instances(*, ec2: Any, cluster_name: str, claims: list[dict[str, Any]]) -> list[str]:
    """The ids of our pending or running instances that no NodeClaim in ``claims`` (not being deleted) names."""
    claimed = _claimed_ids(claims)
    return sorted(i["InstanceId"] for i in _live(_our_instances(ec2, cluster_name)) if i["InstanceId"] not in claimed)


def end_state(*, store: Any, ec2: Any, cluster_name: str) -> dict[str, int]:
    """The end-of-run invariants, each a count that must be 0 (see ``bench/README.md``)."""
    instances = _our_instances(ec2, cluster_name)
    live = _live(instances)
    claims = [c for c in store.objects(NODECLAIMS) if not c["metadata"].get("deletionTimestamp")]
    claimed_ids = _claimed_ids(claims)
    launched: defaultdict[str, int] = defaultdict(int)
    for instance in instances:
        launched[_tags(instance).get(NODECLAIM_TAG, "")] += 1
    live_ids = {i["InstanceId"] for i in live}
    nodeclasses = {n["metadata"]["name"] for n in store.objects("ec2nodeclasses.karpenter.k8s.aws")}
    templates = [lt for page in ec2.get_paginator("describe_launch_templates").paginate(
        Filters=[{"Name": "launch-template-name", "Values": [f"nodesmith/{cluster_name}/*"]}]
    ) for lt in page["LaunchTemplates"]]  # fmt: skip
    template_classes = [
        {t["Key"]: t["Value"] for t in lt.get("Tags") or []}.get("karpenter.k8s.aws/ec2nodeclass") for lt in templates
    ]
    pods = [p for p in store.objects("pods") if _app(p) and not p["metadata"].get("deletionTimestamp")]
    busy = {(p.get("spec") or {}).get("nodeName") for p in pods}
    nodes = [n for n in store.objects("nodes") if not n["metadata"].get("deletionTimestamp")]
    return {
        "instances_orphaned": sum(1 for i in live if i["InstanceId"] not in claimed_ids),
        "launch_templates_orphaned": sum(1 for c in template_classes if c is not None and c not in nodeclasses),
        "nodeclaims_launched_twice": sum(1 for name, n in launched.items() if name and n > 1),
        "nodeclaims_leaked": sum(
            1
            for c in claims
            if conditions(c).get("Launched") == "True" and instance_id_of(c["status"].get("providerID")) not in live_ids
        ),
        "nodes_above_need": sum(1 for n in nodes if n["metadata"]["name"] not in busy),
        "pods_pending_at_end": sum(1 for p in pods if (p.get("status") or {}).get("phase") != "Running"),
    }
