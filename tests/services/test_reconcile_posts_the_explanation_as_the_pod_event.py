"""The reconcile pass posts each unschedulable pod's explanation (per NodePool, with numbers and
hints) as its ``FailedScheduling`` Event, the same text ``nodesmith explain`` starts from."""

from __future__ import annotations

from reconcile_fakes import FakeCloud, FakeCluster, make_nodeclass, make_nodepool, make_pod

from nodesmith.core.scheduling import SchedulingInput, solve
from nodesmith.services.ports import Ports
from nodesmith.services.provisioning.reconcile import ReconcileOptions, reconcile


def test_failed_scheduling_event_carries_the_explanation_with_its_numbers_and_hint() -> None:
    pool = make_nodepool(
        requirements=[{"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c"]}]
    )
    cluster = FakeCluster(nodepools=[pool], nodeclasses=[make_nodeclass()])
    cluster.pods = [make_pod("big", memory="10Gi")]  # the largest c type (c5.xlarge) has 7.5Gi allocatable
    cluster.now = 1000.0
    seen: list[SchedulingInput] = []

    def solver(inp: SchedulingInput):  # type: ignore[no-untyped-def]
        seen.append(inp)
        return solve(inp)

    out = reconcile(
        ports=Ports(cluster=cluster, cloud=FakeCloud(), cluster_name="test"),
        now=1000.0,
        options=ReconcileOptions(solver=solver),
    )

    expected = solve(seen[0]).explanations["default/big"]
    (verdict,) = expected.pools
    assert (verdict.stage, verdict.constraint) == ("resources", "10Gi memory allocatable")
    assert verdict.numbers == {"needs": "10Gi memory", "largest free": "7.5Gi"}
    assert out.unschedulable["default/big"] == expected.text()
    ((kind, name, _reason, message),) = [e for e in cluster.events if e[2] == "FailedScheduling"]
    assert (kind, name) == ("Pod", "big")
    assert message.endswith(expected.text())
    assert message.endswith(
        'nodepool "default": no instance type has 10Gi memory allocatable '
        "(largest allows 7.5Gi); 1 instance type outside this NodePool's requirements has room for it "
        "before DaemonSets (cheapest m5.xlarge)"
    )
