"""A custom label a pod selects on must be defined by the NodePool (requirements or template labels);
well-known labels need not be (Karpenter Compatible + AllowUndefinedWellKnownLabels)."""

from __future__ import annotations

from scheduling_support import make_input, make_nodepool, make_pod

from nodesmith.core.scheduling import solve

BASE = [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]


def test_template_labels_satisfy_a_node_selector_and_become_nodeclaim_labels() -> None:
    pool = make_nodepool(labels={"team": "payments"})
    result = solve(make_input([make_pod(node_selector={"team": "payments"})], nodepools=[pool]))
    (nc,) = result.nodeclaims
    assert nc.labels["team"] == "payments"
    assert nc.labels["karpenter.sh/nodepool"] == "default"


def test_an_undefined_custom_label_is_incompatible() -> None:
    pod = make_pod(node_selector={"team": "payments"})
    result = solve(make_input([pod]))
    assert result.nodeclaims == ()
    assert (
        result.unschedulable[pod.key]
        == 'nodepool "default": incompatible requirements: label "team" does not have known values'
    )


def test_a_template_label_with_another_value_is_incompatible() -> None:
    pod = make_pod(node_selector={"team": "search"})
    result = solve(make_input([pod], nodepools=[make_nodepool(labels={"team": "payments"})]))
    assert "incompatible requirements" in result.unschedulable[pod.key]


def test_a_requirement_with_several_values_is_narrowed_by_the_pod_and_labelled() -> None:
    pool = make_nodepool(requirements=[*BASE, {"key": "team", "operator": "In", "values": ["payments", "search"]}])
    (nc,) = solve(make_input([make_pod(node_selector={"team": "search"})], nodepools=[pool])).nodeclaims
    assert nc.labels["team"] == "search"
    assert {r.key: r.values for r in nc.requirements}["team"] == ("search",)


def test_pods_that_refuse_the_label_are_fine_without_it() -> None:
    pod = make_pod(affinity=[[("team", "NotIn", ("search",)), ("gpu-workload", "DoesNotExist", ())]])
    result = solve(make_input([pod]))
    assert result.unschedulable == {}
    assert "team" not in result.nodeclaims[0].labels  # met by the label's absence: no value invented


def test_exists_on_a_custom_label_needs_the_nodepool_to_define_it() -> None:
    pod = make_pod(affinity=[[("team", "Exists", ())]])
    assert pod.key in solve(make_input([pod])).unschedulable
    pool = make_nodepool(requirements=[*BASE, {"key": "team", "operator": "Exists"}])
    (nc,) = solve(make_input([pod], nodepools=[pool])).nodeclaims
    assert "team" in nc.labels  # a concrete value is chosen for the node


def test_well_known_labels_are_allowed_without_nodepool_mention() -> None:
    pod = make_pod(
        node_selector={"karpenter.k8s.aws/instance-family": "r5", "topology.kubernetes.io/zone": "us-west-2c"}
    )
    (nc,) = solve(make_input([pod])).nodeclaims
    assert {t.name for t in nc.instance_types} == {"r5.large", "r5.xlarge"}
    assert "karpenter.k8s.aws/instance-family" not in nc.labels


def test_a_typo_in_a_well_known_label_gets_a_hint() -> None:
    pod = make_pod(node_selector={"kubernetes.io/zone": "us-west-2a"})
    reason = solve(make_input([pod])).unschedulable[pod.key]
    assert 'label "kubernetes.io/zone" does not have known values (typo of "topology.kubernetes.io/zone"?)' in reason
