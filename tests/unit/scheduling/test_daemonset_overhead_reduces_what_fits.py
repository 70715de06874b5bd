"""DaemonSet pods that would land on a new node count against its allocatable — only those that
tolerate the NodePool's taints and select its labels/instance types (buildDaemonOverheadGroups)."""

from __future__ import annotations

from scheduling_support import make_daemonset, make_input, make_nodepool, make_pod, make_type

from nodesmith.core.model import NodeSelectorRequirement, NodeSelectorTerm, Toleration
from nodesmith.core.scheduling import solve

# m5.xlarge: 4 vCPU, allocatable cpu 4000 - 80 = 3920m.
XL = [make_type("m5.xlarge", 4, 16, od_price=0.192), make_type("m5.2xlarge", 8, 32, od_price=0.384)]
TAINT = [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]


def kept(result: object) -> list[str]:
    return [t.name for nc in result.nodeclaims for t in nc.instance_types]  # type: ignore[attr-defined]


def test_daemonset_requests_are_charged_when_checking_fit() -> None:
    pod = make_pod(cpu="3500m")
    assert kept(solve(make_input([pod], types=XL))) == ["m5.xlarge", "m5.2xlarge"]
    result = solve(make_input([pod], types=XL, daemonsets=[make_daemonset("agent", cpu="500m")]))
    assert kept(result) == ["m5.2xlarge"]
    (nc,) = result.nodeclaims
    assert nc.requests["cpu"] == 3500 + 500 and nc.requests["pods"] == 2


def test_daemonsets_that_do_not_tolerate_the_nodepool_taints_are_not_charged() -> None:
    pool = make_nodepool(taints=TAINT)
    pod = make_pod(cpu="3500m", tolerations=(Toleration(key="dedicated", operator="Exists"),))
    intolerant = make_daemonset("agent", cpu="500m")
    assert kept(solve(make_input([pod], nodepools=[pool], types=XL, daemonsets=[intolerant]))) == [
        "m5.xlarge",
        "m5.2xlarge",
    ]
    tolerant = make_daemonset("agent", cpu="500m", tolerations=(Toleration(operator="Exists"),))
    assert kept(solve(make_input([pod], nodepools=[pool], types=XL, daemonsets=[tolerant]))) == ["m5.2xlarge"]


def test_daemonsets_selecting_other_nodes_are_not_charged() -> None:
    pod = make_pod(cpu="3500m")
    elsewhere = make_daemonset("gpu-driver", cpu="500m", node_selector={"karpenter.k8s.aws/instance-gpu-count": "1"})
    assert kept(solve(make_input([pod], types=XL, daemonsets=[elsewhere]))) == ["m5.xlarge", "m5.2xlarge"]
    labelled = make_daemonset("team-agent", cpu="500m", node_selector={"team": "payments"})
    pool = make_nodepool(labels={"team": "payments"})
    assert kept(solve(make_input([pod], nodepools=[pool], types=XL, daemonsets=[labelled]))) == ["m5.2xlarge"]


def test_overhead_is_per_instance_type_group() -> None:
    only_small = make_daemonset(
        "small-only",
        cpu="500m",
        required_node_affinity=(
            NodeSelectorTerm((NodeSelectorRequirement("node.kubernetes.io/instance-type", "In", ("m5.xlarge",)),)),
        ),
    )
    result = solve(make_input([make_pod(cpu="3500m")], types=XL, daemonsets=[only_small]))
    assert kept(result) == ["m5.2xlarge"]
    assert result.nodeclaims[0].requests["cpu"] == 3500  # the surviving type's group has no DaemonSet


def test_reason_names_the_daemonset_adjusted_room() -> None:
    pod = make_pod(cpu="7900m")
    result = solve(make_input([pod], types=XL, daemonsets=[make_daemonset("agent", cpu="500m")]))
    assert result.unschedulable[pod.key] == (
        'nodepool "default": no instance type has 7.9 cpu free after DaemonSets (largest allows 7.41)'
    )


def test_daemonset_host_ports_exclude_types_for_pods_using_the_same_port() -> None:
    ds = make_daemonset("node-exporter", cpu="10m", host_ports=((9100, "TCP", ""),))
    pod = make_pod(cpu="1", host_ports=((9100, "TCP", ""),))
    result = solve(make_input([pod], types=XL, daemonsets=[ds]))
    assert result.nodeclaims == ()
    assert "host port 9100/TCP is already used by a DaemonSet" in result.unschedulable[pod.key]
