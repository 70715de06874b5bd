"""The fleet builder (``nodesmith.sim.fleet``) on the embedded AWS and the emulator's store: instances tagged and
claimed as a Nodesmith launch leaves them, registered by the simulated kubelet through its cheap view of EC2 and
never registered again once terminated, Deployments with budgets, and spot warnings routed to the queue."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import yaml

from nodesmith.adapters.aws.instances import Instances
from nodesmith.cli.world import MANIFESTS
from nodesmith.sim import aws as embedded_aws
from nodesmith.sim.fleet import (
    KubeletInstances,
    deploy,
    launch_fleet,
    put_spot_warnings,
    register_nodes,
    send_spot_warnings,
)
from nodesmith.sim.kube import Store
from nodesmith.sim.kubelet import SimKubelet

pytestmark = [pytest.mark.slow]

CLUSTER = "demo"  # the demo EC2NodeClass selects subnets tagged karpenter.sh/discovery=demo


@pytest.fixture
def aws(aws: embedded_aws.EmbeddedAws) -> embedded_aws.EmbeddedAws:
    """The shared embedded AWS, seeded for :data:`CLUSTER`."""
    embedded_aws.seed(cluster_name=CLUSTER)
    return aws


@pytest.fixture
def store() -> Store:
    store = Store(seed=7)
    for doc in yaml.safe_load_all((MANIFESTS / "nodepool.yaml").read_text()):
        if doc:
            store.apply(doc)
    return store


def _registered(store: Store, aws: embedded_aws.EmbeddedAws, count: int) -> tuple[list[Any], SimKubelet]:
    fleet = launch_fleet(ec2=aws.client("ec2"), store=store, cluster_name=CLUSTER, count=count)
    kubelet = SimKubelet(store=store, instances=KubeletInstances(ec2=aws.client("ec2"), store=store), ready_delay=0)
    now = time.time()
    kubelet.step(now)  # registers the Nodes
    kubelet.step(now + 1)  # and turns them Ready
    assert register_nodes(store, fleet) == count
    return fleet, kubelet


def test_a_launched_fleet_is_tagged_and_claimed_as_nodesmith_launches_it(
    aws: embedded_aws.EmbeddedAws, store: Store
) -> None:
    fleet = launch_fleet(ec2=aws.client("ec2"), store=store, cluster_name=CLUSTER, count=3)

    ours = {i.instance_id: i for i in Instances(ec2=aws.client("ec2"), cluster_name=CLUSTER).list_all()}
    assert sorted(ours) == sorted(n.instance_id for n in fleet)  # what the adapter lists as ours
    assert len({n.zone for n in fleet}) == 3
    for node in fleet:
        instance = ours[node.instance_id]
        assert instance.capacity_type == "spot"
        assert instance.tags["kubernetes.io/cluster/demo"] == "owned"
        assert instance.tags["karpenter.sh/nodepool"] == "default"
        assert instance.tags["karpenter.sh/nodeclaim"] == node.nodeclaim
        assert instance.tags["karpenter.k8s.aws/ec2nodeclass"] == "default"
        claim = store.get("nodeclaims.karpenter.sh", node.nodeclaim)
        assert claim["metadata"]["finalizers"] == ["karpenter.sh/termination"]
        assert claim["status"]["providerID"] == f"aws:///{node.zone}/{node.instance_id}"
        assert claim["status"]["nodeName"] == instance.private_dns_name == node.node_name
        assert claim["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "m5.large"
        assert claim["metadata"]["labels"]["topology.kubernetes.io/zone"] == node.zone


def test_the_kubelet_registers_the_fleet_and_the_nodes_get_the_termination_finalizer(
    aws: embedded_aws.EmbeddedAws, store: Store
) -> None:
    fleet, _ = _registered(store, aws, 2)

    for node in fleet:
        obj = store.get("nodes", node.node_name)
        assert obj["spec"]["providerID"] == node.provider_id
        assert obj["metadata"]["finalizers"] == ["karpenter.sh/termination"]
        assert obj["metadata"]["labels"]["karpenter.sh/registered"] == "true"
        assert obj["metadata"]["labels"]["karpenter.sh/nodepool"] == "default"


def test_a_node_deleted_after_its_instance_was_terminated_is_not_registered_again(
    aws: embedded_aws.EmbeddedAws, store: Store
) -> None:
    fleet, kubelet = _registered(store, aws, 2)
    gone = fleet[0]

    aws.client("ec2").terminate_instances(InstanceIds=[gone.instance_id])  # as a termination does, then the Node
    store.mutate("nodes", gone.node_name, lambda obj: obj["metadata"].update(finalizers=[]))
    store.delete("nodes", gone.node_name)
    kubelet.step(time.time() + 2)

    assert store.find("nodes", gone.node_name) is None
    assert store.find("nodes", fleet[1].node_name) is not None


def test_deploy_fills_the_pods_in_deployments_and_budgets_every_nth() -> None:
    store = Store(seed=7)

    budgeted = deploy(store, pods=50, replicas=20, pdb_every=2)

    assert [d["spec"]["replicas"] for d in store.objects("deployments.apps")] == [20, 20, 10]
    assert budgeted == {"app-0000": 20, "app-0002": 10}
    pdbs = {p["metadata"]["name"]: p["spec"] for p in store.objects("poddisruptionbudgets.policy")}
    assert pdbs["app-0002"] == {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "app-0002"}}}


@pytest.mark.parametrize("through", ["eventbridge", "sqs"])
def test_spot_warnings_reach_the_interruption_queue(aws: embedded_aws.EmbeddedAws, through: str) -> None:
    queues = embedded_aws.create_queues(cluster_name=CLUSTER)
    ids = ["i-0123456789abcdef0", "i-0123456789abcdef1"]
    sqs = aws.client("sqs")

    if through == "eventbridge":
        sent = put_spot_warnings(aws.client("events"), ids)
    else:
        sent = send_spot_warnings(sqs, queues.interruption_url, ids)

    assert sorted(sent) == ids
    messages = sqs.receive_message(QueueUrl=queues.interruption_url, MaxNumberOfMessages=10)["Messages"]
    events = [json.loads(m["Body"]) for m in messages]
    assert sorted(e["detail"]["instance-id"] for e in events) == ids
    for event in events:
        assert event["detail-type"] == "EC2 Spot Instance Interruption Warning"
        assert event["source"] == "aws.ec2"
        assert event["account"] == "123456789012"
        assert event["detail"]["instance-action"] == "terminate"


def test_the_kubelet_view_learns_at_its_resync_which_known_instances_ended_and_only_those(
    aws: embedded_aws.EmbeddedAws, store: Store
) -> None:
    fleet, _ = _registered(store, aws, 3)  # their Nodes run: only the resync can tell one ended
    ec2 = aws.client("ec2")
    answered: list[list[str]] = []
    ec2.meta.events.register(
        "after-call.ec2.DescribeInstanceStatus",
        lambda parsed, **_: answered.append([s["InstanceId"] for s in parsed["InstanceStatuses"]]),
    )
    instances = KubeletInstances(ec2=ec2, store=store, resync_seconds=0)
    assert sorted(i.instance_id for i in instances()) == sorted(n.instance_id for n in fleet)
    answered.clear()

    aws.client("ec2").terminate_instances(InstanceIds=[fleet[0].instance_id])  # EC2 takes it back: no refresh
    listed = {i.instance_id for i in instances()}

    assert listed == {fleet[1].instance_id, fleet[2].instance_id}
    assert answered == [[fleet[0].instance_id]]  # the running instances are not described again
