"""Node repair decided as Karpenter v1.15 decides it (``[core]:pkg/controllers/disruption/repair.go``, the AWS
provider's ``RepairPolicies``): past the toleration of a policy, under the NodePool's ``Unhealthy`` budget,
vetoed by ``karpenter.sh/do-not-repair``, stopped by the 20% circuit breaker, behind the ``NodeRepair`` gate."""

from __future__ import annotations

from dataclasses import replace

from disruption_factories import NOW, catalogue, make_node, make_nodeclaim, make_nodepool, make_pod

from nodesmith.core.disruption import ClusterNode, DisruptionPlan, DisruptionSettings, DisruptionSnapshot, decide
from nodesmith.core.disruption.repair import effective_drain_bound, tripped_pools, unhealthy_condition
from nodesmith.core.model import NodeCondition

MINUTE = 60.0
TYPES = catalogue()
ON = DisruptionSettings(node_repair=True)


def node(name: str, *, unhealthy_for: float | None = None, condition: str = "Ready", **kwargs: object) -> ClusterNode:
    """An initialized m5.xlarge running a 3-CPU pod (it fits no other node), ``condition`` False for
    ``unhealthy_for`` seconds (None: healthy)."""
    claim_kwargs = {k: kwargs.pop(k) for k in ("annotations_claim", "termination_grace_period") if k in kwargs}
    claim = make_nodeclaim(
        f"claim-{name}",
        node=name,
        annotations=claim_kwargs.get("annotations_claim"),  # type: ignore[arg-type]
        termination_grace_period=claim_kwargs.get("termination_grace_period"),  # type: ignore[arg-type]
    )
    pod_annotations = kwargs.pop("pod_annotations", None)
    pod = make_pod(f"{name}-app", cpu="3", memory="4Gi", node=name, annotations=pod_annotations)  # type: ignore[arg-type]
    cn = make_node(name, pods=(pod,), nodeclaim=claim, **kwargs)  # type: ignore[arg-type]
    conditions = [NodeCondition("Ready", "True", NOW - 86_400)]
    if unhealthy_for is not None:
        if condition == "Ready":
            conditions = [NodeCondition("Ready", "False", NOW - unhealthy_for)]
        else:
            conditions.append(NodeCondition(condition, "False", NOW - unhealthy_for))
    ready = all(c.status == "True" for c in conditions if c.type == "Ready")
    return replace(cn, node=replace(cn.node, conditions=tuple(conditions), ready=ready))


def plan(*nodes: ClusterNode, budgets: list[dict[str, object]] | None = None, **kwargs: object) -> DisruptionPlan:
    pool = make_nodepool(budgets=budgets if budgets is not None else [{"nodes": "100%"}])
    if "limits" in kwargs:
        pool = pool.model_copy(update={"spec": pool.spec.model_copy(update={"limits": kwargs.pop("limits")})})
    settings = kwargs.pop("settings", ON)
    return decide(
        DisruptionSnapshot(nodes=list(nodes), nodepools=[pool], instance_types=TYPES),
        now=NOW,
        settings=settings,  # type: ignore[arg-type]
        expire=False,
    )


def repaired(p: DisruptionPlan) -> tuple[str, ...]:
    return p.command.nodes if p.command is not None and p.command.method == "repair" else ()


def test_a_node_not_ready_for_31_minutes_is_replaced_for_reason_unhealthy() -> None:
    p = plan(node("sick", unhealthy_for=31 * MINUTE), node("ok"))
    assert repaired(p) == ("sick",)
    assert p.command is not None and p.command.cause == "Unhealthy" and len(p.command.replacements) == 1
    assert p.command.pods == ("default/sick-app",)


def test_a_node_not_ready_for_29_minutes_is_left_alone() -> None:
    assert repaired(plan(node("sick", unhealthy_for=29 * MINUTE), node("ok"))) == ()


def test_accelerated_hardware_is_tolerated_for_10_minutes() -> None:
    assert repaired(plan(node("gpu", unhealthy_for=11 * MINUTE, condition="AcceleratedHardwareReady"), node("ok")))
    assert not repaired(plan(node("gpu", unhealthy_for=9 * MINUTE, condition="AcceleratedHardwareReady"), node("ok")))


def test_do_not_repair_on_the_node_or_its_nodeclaim_vetoes_repair() -> None:
    veto = {"karpenter.sh/do-not-repair": "true"}
    assert repaired(plan(node("sick", unhealthy_for=31 * MINUTE, annotations=veto), node("ok"))) == ()
    assert repaired(plan(node("sick", unhealthy_for=31 * MINUTE, annotations_claim=veto), node("ok"))) == ()


def test_do_not_disrupt_on_the_node_does_not_block_repair() -> None:
    guarded = node("sick", unhealthy_for=31 * MINUTE, annotations={"karpenter.sh/do-not-disrupt": "true"})
    assert repaired(plan(guarded, node("ok"))) == ("sick",)


def test_blocking_pods_need_a_drain_bound() -> None:
    protect = {"karpenter.sh/do-not-disrupt": "true"}
    unbounded = plan(node("sick", unhealthy_for=31 * MINUTE, pod_annotations=protect), node("ok"))
    assert repaired(unbounded) == ()
    assert any("requires a termination grace period" in r.reason for r in unbounded.rejected if r.method == "repair")
    bounded = node("sick", unhealthy_for=31 * MINUTE, pod_annotations=protect, termination_grace_period="1h")
    assert repaired(plan(bounded, node("ok"))) == ("sick",)


def test_more_than_20_percent_unhealthy_stops_repair_in_the_pool() -> None:
    healthy = [node(f"ok-{i}") for i in range(3)]
    two_sick = plan(node("sick-a", unhealthy_for=31 * MINUTE), node("sick-b", unhealthy_for=5 * MINUTE), *healthy)
    assert repaired(two_sick) == ()  # 2 of 5 > ceil(20% x 5) = 1, toleration or not
    blocked = [r for r in two_sick.rejected if r.node == "sick-a" and r.method == "repair"]
    assert blocked and blocked[0].event == "NodeRepairBlocked" and "more than 20%" in blocked[0].reason
    one_sick = plan(node("sick-a", unhealthy_for=31 * MINUTE), *healthy, node("ok-4"))
    assert repaired(one_sick) == ("sick-a",)


def test_the_gate_off_means_no_repair() -> None:
    assert repaired(plan(node("sick", unhealthy_for=31 * MINUTE), node("ok"), settings=DisruptionSettings())) == ()


def test_repair_spends_the_unhealthy_budget() -> None:
    none_left = [{"nodes": "0", "reasons": ["Unhealthy"]}, {"nodes": "100%"}]
    assert repaired(plan(node("sick", unhealthy_for=31 * MINUTE), node("ok"), budgets=none_left)) == ()


def test_a_pool_at_its_limit_terminates_first() -> None:
    p = plan(node("sick", unhealthy_for=31 * MINUTE), node("ok"), limits={"nodes": "2"})
    assert repaired(p) == ("sick",)
    assert p.command is not None and p.command.replacements == () and "terminate first" in p.command.reason


def test_the_circuit_breaker_counts_per_pool_and_rounds_up() -> None:
    sick = [node(f"s{i}", unhealthy_for=60.0).node for i in range(2)]
    well = [node(f"w{i}").node for i in range(3)]
    assert tripped_pools([*sick, *well]) == {"default": (2, 5)}
    assert tripped_pools([sick[0], *well]) == {}


def test_the_condition_whose_toleration_ends_first_is_the_nodes() -> None:
    cn = node("gpu", unhealthy_for=20 * MINUTE, condition="AcceleratedHardwareReady")
    both = replace(cn.node, conditions=(*cn.node.conditions, NodeCondition("KernelReady", "False", NOW - 25 * MINUTE)))
    found = unhealthy_condition(both)
    assert found is not None and found.condition.type == "AcceleratedHardwareReady"


def test_the_drain_bound_is_the_shorter_grace_period() -> None:
    assert effective_drain_bound(None, 3600.0) is None
    assert effective_drain_bound(600.0, 3600.0) == 600.0
    assert effective_drain_bound(600.0, 60.0) == 60.0
    assert effective_drain_bound(0.0, None) == 0.0
