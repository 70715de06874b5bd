"""A node whose NodeClaim is being deleted (a termination requested: ``kubectl delete nodeclaim``, a disruption)
is going away before its first drain round taints it, so the next provisioning pass already counts its pods as
pending for capacity elsewhere, as Karpenter schedules the pods of deleting nodes at once."""

from __future__ import annotations

import interruption_fakes as fakes

from nodesmith.services.provisioning.capacity import leaving_node_names, reschedulable_pods


def test_the_node_of_a_deleting_nodeclaim_is_leaving_and_its_pods_are_provisioned_for() -> None:
    nodes = [fakes.make_node("node-a", "i-0aaaaaaaaaaaaaaa1"), fakes.make_node("node-b", "i-0bbbbbbbbbbbbbbb2")]
    claims = [
        fakes.make_claim("claim-a", instance_id="i-0aaaaaaaaaaaaaaa1", node="node-a", deleted_at=fakes.NOW),
        fakes.make_claim("claim-b", instance_id="i-0bbbbbbbbbbbbbbb2", node="node-b"),
    ]
    leaving = leaving_node_names(nodes, nodeclaims=claims)
    assert leaving == {"node-a"}
    pods = [fakes.make_pod("web", node="node-a"), fakes.make_pod("api", node="node-b")]
    assert [p.name for p in reschedulable_pods(pods, leaving=leaving)] == ["web"]
    assert leaving_node_names(nodes) == set()  # without the NodeClaims nothing says so yet
