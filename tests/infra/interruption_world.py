"""The world as the interruption and termination handlers see it, for the metrics contract's scenarios.

:class:`World` fakes the Cluster and CloudProvider ports of ``nodesmith.core.ports`` (just what the two handlers
call) around one node of ours (:data:`OURS`, with its NodeClaim) and one managed node group's instance
(:data:`MANAGED`, no NodePool tag); :func:`sqs_record` wraps a body as the SQS record a handler receives and
:func:`spot_warning` is the golden spot interruption warning for an instance.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]

ACCOUNT, REGION, CLUSTER = "123456789012", "us-west-2", "demo"
OURS, MANAGED = "i-0123456789abcdef0", "i-0fedcba9876543210"  # ours; a managed node group's (no NodePool tag)
NODE, CLAIM = "ip-10-0-0-1.us-west-2.compute.internal", "default-abcde"


@dataclass
class World:
    """One spot node of ours with one pod, and a managed node group's instance: the Cluster and CloudProvider
    ports, as far as the interruption and termination handlers call them. ``blocks`` is how many evictions of
    the pod a PodDisruptionBudget refuses (HTTP 429) before one is accepted."""

    now: float
    pod_grace: int = 30
    blocks: int = 0
    claims: dict[str, Any] = field(default_factory=dict)
    nodes: dict[str, Any] = field(default_factory=dict)
    pods: list[Any] = field(default_factory=list)
    instances: dict[str, Any] = field(default_factory=dict)
    sent: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        from nodesmith.core.api.nodeclaim import NodeClaim
        from nodesmith.core.model import Node, Pod
        from nodesmith.core.ports import Instance
        from nodesmith.core.termination import TERMINATION_FINALIZER

        zone, provider = f"{REGION}a", f"aws:///{REGION}a/{OURS}"
        self.claims[CLAIM] = NodeClaim.model_validate(
            {
                "metadata": {"name": CLAIM, "uid": "uid-claim", "labels": {"karpenter.sh/nodepool": "default"},
                             "finalizers": [TERMINATION_FINALIZER]},
                "spec": {"requirements": [],
                         "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
                "status": {"providerID": provider, "nodeName": NODE},
            }
        )  # fmt: skip
        self.nodes[NODE] = Node(name=NODE, provider_id=provider, ready=True)
        self.pods.append(
            Pod(namespace="default", name="web-1", uid="uid-web-1", node_name=NODE, phase="Running",
                owner_kind="ReplicaSet", owner_name="web-abc", termination_grace_period_seconds=self.pod_grace)
        )  # fmt: skip
        owned = {f"kubernetes.io/cluster/{CLUSTER}": "owned"}
        self.instances[OURS] = Instance(
            instance_id=OURS, instance_type="m5.large", zone=zone, capacity_type="spot", state="running",
            launch_time=self.now - 3600, private_dns_name=NODE,
            tags={**owned, "karpenter.sh/nodepool": "default", "karpenter.sh/nodeclaim": CLAIM},
        )  # fmt: skip
        self.instances[MANAGED] = Instance(
            instance_id=MANAGED, instance_type="m5.large", zone=zone, capacity_type="spot", state="running",
            launch_time=self.now - 3600, tags={**owned, "eks:nodegroup-name": "system"},
        )  # fmt: skip

    # Cluster
    def get_nodeclaim(self, *, name: str) -> Any:
        claim = self.claims.get(name)
        return None if claim is None else claim.model_copy(deep=True)

    def annotate_nodeclaim(self, *, name: str, annotations: Any, resource_version: str | None = None) -> None:
        from nodesmith.core.errors import NotFoundError

        if name not in self.claims:
            raise NotFoundError(f"nodeclaim {name} not found", status=404)
        self.claims[name].metadata.annotations.update(annotations)

    def delete_nodeclaim(self, *, name: str) -> None:
        from nodesmith.core.timestamps import to_rfc3339

        claim = self.claims.get(name)
        if claim is not None and claim.metadata.finalizers:
            claim.metadata.deletion_timestamp = claim.metadata.deletion_timestamp or to_rfc3339(self.now)
        elif claim is not None:
            del self.claims[name]

    def remove_nodeclaim_finalizer(self, *, name: str, finalizer: str) -> None:
        claim = self.claims.get(name)
        if claim is not None:
            claim.metadata.finalizers = [f for f in claim.metadata.finalizers if f != finalizer]
            if claim.metadata.deletion_timestamp is not None and not claim.metadata.finalizers:
                del self.claims[name]

    def get_node(self, *, name: str) -> Any:
        return self.nodes.get(name)

    def taint_and_cordon(self, *, node_name: str, taint: Any) -> bool:
        node = self.nodes.get(node_name)
        if node is not None and taint not in node.taints:
            self.nodes[node_name] = replace(node, taints=(*node.taints, taint), unschedulable=True)
        return node is not None

    def delete_node(self, *, name: str) -> None:
        self.nodes.pop(name, None)

    def remove_node_finalizer(self, *, name: str, finalizer: str) -> None:
        return None

    def list_pods(self, *, node_name: str | None = None) -> list[Any]:
        return [p for p in self.pods if node_name is None or p.node_name == node_name]

    def evict(self, *, pod: Any, grace_period_seconds: int | None = None) -> str:
        if self.blocks > 0:
            self.blocks -= 1
            return "blocked"
        self.pods = [p for p in self.pods if p.key != pod.key]
        return "evicted"

    def delete_pod(self, *, pod: Any, grace_period_seconds: int | None = None) -> None:
        self.pods = [p for p in self.pods if p.key != pod.key]

    def record_event(self, *, ref: Any, reason: str, message: str, type_: str = "Normal") -> None:
        return None

    # CloudProvider
    def get_instance(self, *, instance_id: str) -> Any:
        return self.instances.get(instance_id)

    def get_instances(self, *, instance_ids: Any) -> dict[str, Any]:
        return {i: self.instances[i] for i in instance_ids if i in self.instances}

    def terminate(self, *, instance_ids: Any) -> None:
        for iid in instance_ids:
            self.instances[iid] = replace(self.instances[iid], state="shutting-down")

    def mark_unavailable(self, *, offerings: Any) -> None:
        return None

    # TerminationQueue
    def send(self, *, requests: Any) -> list[str]:
        self.sent.extend(requests)
        return []


def sqs_record(
    body: str, message_id: str, *, queue: str, sent: float | None = None, receives: int = 1
) -> dict[str, Any]:
    sent = time.time() if sent is None else sent
    return {
        "messageId": message_id,
        "receiptHandle": f"rh-{message_id}",
        "body": body,
        "attributes": {"ApproximateReceiveCount": str(receives), "SentTimestamp": str(int(sent * 1000))},
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": f"arn:aws:sqs:{REGION}:{ACCOUNT}:nodesmith-{queue}",
        "awsRegion": REGION,
    }


def spot_warning(instance_id: str, tag: str, *, account: str = ACCOUNT) -> str:
    body = json.loads((TESTS / "events" / "spot_interruption_warning.json").read_text())
    body |= {"id": f"evt-{tag}", "account": account, "region": REGION,
             "resources": [f"arn:aws:ec2:{REGION}:{account}:instance/{instance_id}"]}  # fmt: skip
    body["detail"]["instance-id"] = instance_id
    return json.dumps(body)
