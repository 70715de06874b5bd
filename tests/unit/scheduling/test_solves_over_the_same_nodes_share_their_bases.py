"""Scheduling passes over the same existing nodes (a consolidation's trials) derive each node's base (hostname,
taints, requirements, headroom after its bound pods and DaemonSet overhead, host ports) once, through
:class:`~nodesmith.core.scheduling.existing.ExistingBases`, and decide exactly as passes that derive it afresh:
what one pass places on a node never shows in the next."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from scheduling_support import make_daemonset, make_input, make_node, make_pod

from nodesmith.core.scheduling import solve
from nodesmith.core.scheduling.daemonsets import DaemonInfo, daemon_infos
from nodesmith.core.scheduling.existing import ExistingBases

if TYPE_CHECKING:
    from nodesmith.core.model import DaemonSet
    from nodesmith.core.scheduling.types import SchedulingResult


def _placed(result: SchedulingResult) -> dict[str, list[str]]:
    return {node: sorted(p.name for p in pods) for node, pods in result.existing.items()}


def test_a_pass_places_nothing_into_the_next_passes_headroom() -> None:
    # Given two nodes with 2 CPUs of room each after a bound pod and a DaemonSet, and one memo for every pass
    nodes = [make_node(f"n{i}", cpu="4", bound=(make_pod(f"bound-{i}", cpu="1500m", node_name=f"n{i}"),))
             for i in range(2)]  # fmt: skip
    daemonsets = [make_daemonset("agent", cpu="500m")]
    bases = ExistingBases()
    pods = [make_pod(f"p{i}", cpu="1") for i in range(4)]

    def run(with_bases: bool) -> SchedulingResult:
        inp = replace(
            make_input(pods, nodes=nodes, daemonsets=daemonsets), existing_bases=bases if with_bases else None
        )
        inp = replace(inp, daemonsets=daemonsets)  # the same sequence every pass, as a consolidation's trials pass it
        return solve(inp)

    fresh = run(False)
    # When the same pods are scheduled three times over the kept bases
    kept = [run(True) for _ in range(3)]

    # Then every pass fills both nodes as a pass from scratch does: none sees the pods an earlier one placed
    assert _placed(fresh) == {"n0": ["p0", "p1"], "n1": ["p2", "p3"]}
    assert all(_placed(k) == _placed(fresh) and k.nodeclaims == fresh.nodeclaims for k in kept)


def test_a_base_is_derived_once_per_node_and_daemonset_list_and_again_for_new_ones() -> None:
    node = make_node("n0", cpu="4", bound=(make_pod("bound", cpu="1", node_name="n0"),))
    daemonsets = [make_daemonset("agent", cpu="500m")]
    bases = ExistingBases()
    first = bases.base(node, daemonsets, daemons=_infos(daemonsets))
    assert bases.base(node, daemonsets, daemons=_infos(daemonsets)) is first
    # the headroom already counts the bound pod and the DaemonSet still to come: 4 - 1 - 0.5 CPU
    assert first.remaining["cpu"] == 2500

    # a node passed anew (a pod bound to it since) and a new DaemonSet list are derived again
    moved = replace(node, pods=(*node.pods, make_pod("late", cpu="1", node_name="n0")))
    assert bases.base(moved, daemonsets, daemons=_infos(daemonsets)).remaining["cpu"] == 1500
    more = [*daemonsets, make_daemonset("logs", cpu="250m")]
    assert bases.base(node, more, daemons=_infos(more)).remaining["cpu"] == 2250


def _infos(daemonsets: list[DaemonSet]) -> list[DaemonInfo]:
    return list(daemon_infos(daemonsets))


def test_a_new_list_of_the_same_daemonsets_keeps_the_bases_and_retain_forgets_nodes_gone() -> None:
    # Given the bases of two nodes derived with the DaemonSets as one pass listed them
    nodes = [make_node(f"n{i}", cpu="4") for i in range(2)]
    daemonsets = [make_daemonset("agent", cpu="500m")]
    bases = ExistingBases()
    first = [bases.base(n, daemonsets, daemons=_infos(daemonsets)) for n in nodes]

    # When the next pass lists the same DaemonSet objects into a new list, the bases are kept
    relisted = list(daemonsets)
    assert [bases.base(n, relisted, daemons=_infos(relisted)) for n in nodes] == first
    assert all(bases.base(n, relisted, daemons=_infos(relisted)) is f for n, f in zip(nodes, first, strict=True))

    # and a node gone from the cluster is forgotten: handed again, its base is derived anew
    bases.retain(nodes[:1])
    assert bases.base(nodes[0], relisted, daemons=_infos(relisted)) is first[0]
    assert bases.base(nodes[1], relisted, daemons=_infos(relisted)) is not first[1]

    # a DaemonSet changed (a new object in its place) derives every base again
    changed = [make_daemonset("agent", cpu="1")]
    again = bases.base(nodes[0], changed, daemons=_infos(changed))
    assert again is not first[0] and again.remaining["cpu"] == 3000
