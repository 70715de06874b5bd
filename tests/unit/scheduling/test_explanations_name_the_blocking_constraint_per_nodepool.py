"""Every unschedulable pod (and every pod asked about) gets a structured explanation: per NodePool
the verdict, stage, first blocking constraint with numbers, the instance-type funnel and hints."""

from __future__ import annotations

from dataclasses import replace

from scheduling_support import make_daemonset, make_input, make_node, make_nodepool, make_pod, make_type

from nodesmith.core.model import LabelSelector, PodAffinityTerm, WeightedNodeSelectorTerm
from nodesmith.core.model import NodeSelectorRequirement as Req
from nodesmith.core.model import NodeSelectorTerm as Term
from nodesmith.core.scheduling import SchedulingInput, solve
from nodesmith.core.scheduling.reasons import CHOSEN, REJECTED, WOULD_FIT, WOULD_NOT_FIT, Step

ONLY_B = frozenset({(z, ct) for z in ("us-west-2a", "us-west-2c") for ct in ("spot", "on-demand")})
TYPES = [
    make_type("c5.large", 2, 4, pods=29, od_price=0.085),
    make_type("c5.xlarge", 4, 8, od_price=0.17, unavailable=ONLY_B),
    make_type("m5.xlarge", 4, 16, od_price=0.192, unavailable=ONLY_B),
    make_type("t3.xlarge", 4, 16, od_price=0.1664, unavailable=ONLY_B),
    make_type("r5.large", 2, 16, pods=29, od_price=0.126),
]
CMT = make_nodepool(
    requirements=[{"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "t"]}]
)
GPU = make_nodepool("gpu", taints=[{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}], weight=10)


def traced(inp: SchedulingInput, *pods: str) -> SchedulingInput:
    return replace(inp, explain=frozenset(pods))


def test_zone_pinned_pod_names_the_zone_the_room_needed_and_where_it_would_fit() -> None:
    pod = make_pod("web", cpu="1900m", node_selector={"topology.kubernetes.io/zone": "us-west-2a"})
    result = solve(make_input([pod], nodepools=[CMT], types=TYPES, daemonsets=[make_daemonset("agent", cpu="200m")]))
    assert result.unschedulable[pod.key] == (
        'nodepool "default": no instance type in zone us-west-2a has 1.9 cpu free after DaemonSets '
        "(largest allows 1.73); 3 types would fit in us-west-2b"
    )
    explanation = result.explanations[pod.key]
    assert not explanation.scheduled and explanation.text() == result.unschedulable[pod.key]
    (verdict,) = explanation.pools
    assert (verdict.verdict, verdict.stage, verdict.constraint) == (
        REJECTED,
        "resources",
        "1.9 cpu free after DaemonSets",
    )
    assert verdict.numbers == {"needs": "1.9 cpu", "largest free": "1.73"}
    # 4 c/m/t types; only c5.large is offered in us-west-2a; it has 1.73 cpu free: the last option goes.
    assert verdict.funnel == (
        Step("instance types the NodePool allows", 4),
        Step("an available offering in zone us-west-2a", 1),
        Step("1.9 cpu free after DaemonSets", 0),
    )
    assert verdict.hints == ("3 types would fit in us-west-2b",)


def test_a_pod_too_big_for_the_nodepool_points_at_types_outside_its_requirements() -> None:
    pod = make_pod("mem", cpu="1", memory="15.2Gi")  # only r5.large (15.34Gi allocatable) holds it
    verdict = solve(make_input([pod], nodepools=[CMT], types=TYPES)).explanations[pod.key].pools[0]
    assert verdict.stage == "resources" and verdict.numbers["needs"] == "15.2Gi memory"
    assert verdict.hints == (
        "1 instance type outside this NodePool's requirements has room for it before DaemonSets (cheapest r5.large)",
    )


def test_each_nodepool_gets_its_stage_and_existing_nodes_are_summarised_with_numbers() -> None:
    broken = make_nodepool("arm", requirements=[{"key": "kubernetes.io/arch", "operator": "In", "values": ["s390x"]}])
    pod = make_pod("big", cpu="3", node_selector={"kubernetes.io/arch": "amd64"})
    nodes = [make_node("n1", cpu="2"), make_node("n2", cpu="1"), make_node("n3", unschedulable=True)]
    explanation = solve(make_input([pod], nodepools=[GPU, broken], types=TYPES[:1], nodes=nodes)).explanations[pod.key]
    assert [(v.nodepool, v.stage) for v in explanation.pools] == [("gpu", "taints"), ("arm", "nodepool")]
    assert explanation.pools[0].constraint == "nvidia.com/gpu=true:NoSchedule"
    assert explanation.existing is not None
    assert explanation.existing.text() == (
        "existing nodes (3): 2 have too little cpu free (most 2, needs 3), 1 is cordoned or being deleted"
    )
    assert explanation.text().endswith(explanation.existing.text())


def test_limits_and_topology_rejections_carry_their_numbers() -> None:
    limited = make_nodepool(limits={"cpu": "4"})
    first, second = make_pod("a", cpu="3"), make_pod("b", cpu="3")
    result = solve(make_input([first, second], nodepools=[limited], types=TYPES[:2]))
    (verdict,) = result.explanations[second.key].pools
    assert verdict.stage == "limits"
    anti = PodAffinityTerm(topology_key="topology.kubernetes.io/zone", label_selector=LabelSelector((("app", "db"),)))
    pods = [make_pod(f"db-{i}", labels={"app": "db"}, pod_anti_affinity=(anti,)) for i in range(4)]
    result = solve(make_input(pods, types=TYPES[:1]))
    # Like Karpenter, the first NodeClaim is not pinned to a zone, so its pod counts in every zone.
    assert len(result.unschedulable) == 3
    (verdict,) = result.explanations[min(result.unschedulable)].pools
    assert (verdict.stage, verdict.constraint) == ("topology", "pod anti-affinity on topology.kubernetes.io/zone")
    assert verdict.numbers == {"matching pods per domain": "us-west-2a=1, us-west-2b=1, us-west-2c=1"}


def test_a_scheduled_pod_is_explained_when_asked_where_it_went_and_why() -> None:
    pod = make_pod("ok", cpu="1")
    inp = make_input([pod], nodepools=[GPU, CMT], types=TYPES, nodes=[make_node("small", cpu="500m")])
    result = solve(traced(inp, pod.key))
    explanation = result.explanations[pod.key]
    assert explanation.scheduled and pod.key not in result.unschedulable
    assert explanation.placement.startswith("new NodeClaim of nodepool default with 1 pod(s): c5.large")
    assert [(v.nodepool, v.verdict, v.stage) for v in explanation.pools] == [
        ("gpu", REJECTED, "taints"),
        ("default", CHOSEN, "fits"),
    ]
    assert explanation.pools[1].numbers == {"types": "4", "cheapest": "c5.large", "USD/hour": "0.0340"}
    assert explanation.existing is not None
    assert explanation.existing.reasons == ((1, "have too little cpu free (most 0.5, needs 1)"),)


def test_a_pod_placed_on_an_existing_node_says_what_each_nodepool_would_have_done() -> None:
    pod = make_pod("fits", cpu="1")
    inp = make_input([pod], nodepools=[GPU, CMT], types=TYPES, nodes=[make_node("roomy", cpu="4")])
    explanation = solve(traced(inp, pod.key)).explanations[pod.key]
    assert explanation.placement == "existing node roomy"
    assert [(v.nodepool, v.verdict) for v in explanation.pools] == [("gpu", WOULD_NOT_FIT), ("default", WOULD_FIT)]
    assert explanation.existing is None


def test_relaxed_preferences_are_part_of_the_explanation() -> None:
    prefer = WeightedNodeSelectorTerm(
        weight=50, term=Term((Req("node.kubernetes.io/instance-type", "In", ("x9.nowhere",)),))
    )
    pod = make_pod("flexible", preferred_node_affinity=(prefer,))
    explanation = solve(traced(make_input([pod], types=TYPES), pod.key)).explanations[pod.key]
    assert explanation.scheduled and explanation.relaxed == ("preferred node affinity",)
    stuck = make_pod("stuck", cpu="64", preferred_node_affinity=(prefer,))
    explanation = solve(make_input([stuck], types=TYPES)).explanations[stuck.key]
    assert explanation.relaxed == ("preferred node affinity",)
    assert explanation.pools[0].stage == "resources"  # judged in its last, relaxed form


def test_identical_pods_get_identical_explanations() -> None:
    pods = [make_pod(f"big-{i}", cpu="64") for i in range(50)]
    result = solve(make_input(pods, types=TYPES))
    assert len(set(result.unschedulable.values())) == 1
    assert len(result.explanations) == 50
