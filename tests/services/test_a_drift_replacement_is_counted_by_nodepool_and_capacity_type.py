"""A drift replacement is a NodeClaim created and launched by the disruption pass: it is counted by
(NodePool, capacity type) like the provisioning pass's, or the dashboard's lifecycle would miss it. The
drifted node's termination is not requested in that pass: it waits for its replacement to be initialized
(the termination function counts it when it goes)."""

from __future__ import annotations

from reconcile_fakes import make_nodepool
from test_disruption_across_passes import _cluster_with_one_node, _disrupt


def test_the_replacement_is_created_and_launched_under_its_nodepool_and_capacity_type() -> None:
    cluster, cloud = _cluster_with_one_node()
    cluster.nodepools = [make_nodepool(labels={"team": "payments"})]  # drifted
    _disrupt(cluster, cloud, 1100.0)

    started = _disrupt(cluster, cloud, 1116.0)

    (replacement,) = started.replacements_launched
    instance = next(i for i in cloud.instances.values() if i.tags.get("karpenter.sh/nodeclaim") == replacement)
    key = ("default", instance.capacity_type)
    assert (started.created_by, started.launched_by) == ({key: 1}, {key: 1})
    assert started.nodes_terminated == [] and cluster.queue.sent == []  # the drifted node waits for its replacement
