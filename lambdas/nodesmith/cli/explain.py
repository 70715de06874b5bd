"""``nodesmith explain POD -f PATH ...``: why one pod goes where it goes, or nowhere, NodePool by NodePool.

Loads the manifests and the instance catalogue as ``nodesmith simulate`` does (same pending pods,
existing nodes, DaemonSets, NodePool usage; embedded or real EC2 catalogue; price table), solves
with the pod traced (``SchedulingInput.explain``) and prints its
:class:`~nodesmith.core.scheduling.reasons.Explanation`: the outcome (the NodeClaim or existing node
that takes it, or that it is unschedulable), the soft constraints relaxed on the way, and a table
with one row per NodePool considered (weight order) plus one for the existing nodes:

    NodePool | verdict | first blocking constraint | details

Details hold the message with its numbers, the instance-type funnel (how many types each filter
left: the first to leave none is the constraint that removed the last option) and hints (what
would fit elsewhere). ``-o json`` prints the explanation as one JSON object instead.

With NodeOverlays among the manifests, the pod is solved with and without them: lines (JSON
``overlays``) name the overlays that price or extend the chosen instance type, those not applied
(conflict), and the placement without overlays when they changed the decision (:func:`overlay_notes`).

``POD`` is ``namespace/name`` or a name; a name matching no pod exactly may be a workload's
(``inflate`` for the replicas ``inflate-<hash>-<id>``), then its first replica is explained.
Exit codes: 0 explained (whether or not the pod schedules), 1 a step failed (catalogue), 2 bad
input (manifests, arguments, unknown or ambiguous pod).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from nodesmith.cli.exits import EXIT_OK, BadInput, StepFailed, check_choice, check_manifests, report
from nodesmith.core.errors import ManifestError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nodesmith.core.model import InstanceType, Pod
    from nodesmith.core.overlay import OverlayResult
    from nodesmith.core.scheduling.reasons import Explanation, PoolVerdict
    from nodesmith.core.scheduling.types import SchedulingResult

__all__ = ["find_pod", "print_explanation", "run_explain"]

LOG = logging.getLogger(__name__)

OUTPUTS = ("table", "json")


def _err(message: str) -> None:
    print(message, file=sys.stderr)


def find_pod(pods: Sequence[Pod], wanted: str) -> tuple[Pod, str]:
    """The pod ``wanted`` names (``namespace/name`` or ``name``), and a note when it was a workload's.

    Raises ``BadInput`` when no pod matches or a bare name matches pods in several namespaces.
    """
    exact = [p for p in pods if wanted in (p.key, p.name)]
    if len(exact) == 1:
        return exact[0], ""
    if len(exact) > 1:
        keys = ", ".join(sorted(p.key for p in exact))
        raise BadInput(f"pod name {wanted!r} is ambiguous ({keys}): give namespace/name")
    namespace, _, name = wanted.rpartition("/")
    replicas = sorted(
        (p for p in pods if p.name.startswith(f"{name}-") and (not namespace or p.namespace == namespace)),
        key=lambda p: p.key,
    )
    if replicas:
        note = f"{wanted} is not a pod; explaining {replicas[0].key}, the first of its {len(replicas)} pod(s)"
        return replicas[0], note
    shown = ", ".join(sorted(p.key for p in pods)[:10]) or "none"
    raise BadInput(f"no pod {wanted!r} in the manifests (pods: {shown})")


def run_explain(
    *,
    pod: str,
    files: Sequence[Path],
    region: str = "us-east-1",
    price_table: Path | None = None,
    packing: str = "karpenter",
    output: str = "table",
    use_aws: bool = False,
    instance_types: Sequence[InstanceType] | None = None,
) -> int:
    """Explain ``pod`` for the manifests in ``files``; returns the exit code (module docstring).

    Arguments as ``nodesmith simulate`` (:func:`nodesmith.cli.simulate.run_simulate`; the price
    table defaults to ``$NODESMITH_PRICE_TABLE``); ``packing`` is ``karpenter`` or ``nodesmith``.
    ``instance_types`` skips the catalogue step (tests).
    """
    from nodesmith.cli.simulate_catalogue import PRICE_TABLE_ENV
    from nodesmith.core.scheduling.types import PACKING_POLICIES

    if price_table is None and os.environ.get(PRICE_TABLE_ENV, "").strip():
        price_table = Path(os.environ[PRICE_TABLE_ENV].strip())
    try:
        check_choice("--output", output, OUTPUTS)
        check_choice("--packing", packing, PACKING_POLICIES)
        check_manifests([Path(f) for f in files])
        with contextlib.redirect_stdout(sys.stderr):  # only the explanation reaches stdout
            explanation, target, notes = _explain(
                pod=pod,
                files=files,
                region=region,
                price_table=price_table,
                packing=packing,
                use_aws=use_aws,
                instance_types=instance_types,
            )
    except (BadInput, StepFailed) as exc:
        return report(exc)
    if output == "json":
        doc = _to_json(explanation, target)
        if notes is not None:
            doc["overlays"] = notes
        sys.stdout.write(json.dumps(doc) + "\n")
    else:
        print_explanation(explanation, target, file=sys.stdout)
        for note in notes or ():
            print(note, file=sys.stdout)
    return EXIT_OK


def _explain(
    *,
    pod: str,
    files: Sequence[Path],
    region: str,
    price_table: Path | None,
    packing: str,
    use_aws: bool,
    instance_types: Sequence[InstanceType] | None,
) -> tuple[Explanation, Pod, list[str] | None]:
    from nodesmith.adapters.manifests import load_manifests
    from nodesmith.cli.simulate import build_scheduling_input, load_nodepool_catalogues, overlay_nodepool_catalogues
    from nodesmith.core.scheduling import solve
    from nodesmith.core.scheduling.reasons import Explanation

    try:
        bundle = load_manifests([Path(f) for f in files])
    except ManifestError as exc:
        raise BadInput(str(exc)) from exc
    except OSError as exc:
        raise BadInput(f"cannot read manifests: {exc}") from exc
    target, note = find_pod(bundle.pods, pod)
    if note:
        _err(f"note: {note}")
    if target.node_name:
        return (
            Explanation(pod=target.key, scheduled=True, placement=f"already bound to node {target.node_name}"),
            target,
            None,
        )
    if target.is_daemonset or target.is_mirror or target.is_terminal:
        raise BadInput(f"pod {target.key} is not provisioned for (DaemonSet, mirror or finished pod)")
    per_pool: dict[str, list[InstanceType]] = {}
    if instance_types is None:
        try:
            instance_types, per_pool = load_nodepool_catalogues(
                bundle, region=region, price_table=price_table, use_aws=use_aws
            )
        except BadInput:
            raise
        except Exception as exc:  # botocore/moto errors: credentials, network, unknown region
            raise StepFailed(f"cannot read the EC2 instance catalogue for {region}: {exc}") from exc
    overlaid, overlays = overlay_nodepool_catalogues(bundle, instance_types, per_pool)
    inp = replace(build_scheduling_input(bundle, instance_types), packing=packing, explain=frozenset({target.key}))  # type: ignore[arg-type]
    result = solve(replace(inp, nodepool_instance_types=overlaid))
    explanation = result.explanations.get(target.key)
    if explanation is None:  # not pending after all (e.g. a duplicate uid)
        explanation = Explanation(pod=target.key, scheduled=False, error="the pod was not among the pods to schedule")
    notes: list[str] | None = None
    if overlays is not None:
        without = solve(replace(inp, nodepool_instance_types=per_pool))
        notes = overlay_notes(target.key, with_overlays=result, without_overlays=without, overlays=overlays)
    return explanation, target, notes


def _decision(key: str, result: SchedulingResult) -> tuple[str, str] | None:
    """(NodePool, cheapest instance type) of the new NodeClaim holding pod ``key``, else None."""
    for plan in result.nodeclaims:
        if any(p.key == key for p in plan.pods):
            return plan.nodepool, plan.instance_types[0].name if plan.instance_types else ""
    return None


def overlay_notes(
    key: str, *, with_overlays: SchedulingResult, without_overlays: SchedulingResult, overlays: OverlayResult
) -> list[str]:
    """What NodeOverlays did to pod ``key``'s placement, as lines for people.

    One line per overlay that changed the chosen NodeClaim's cheapest instance type (price or capacity),
    one per overlay not applied (Karpenter's ``ValidationSucceeded=False`` reason), and, when the placement
    with overlays differs from the one without (another NodePool or instance type, or schedulable only one
    way), the placement without them.
    """
    notes: list[str] = []
    chosen = _decision(key, with_overlays)
    if chosen is not None:
        pool, type_name = chosen
        for name in overlays.price_overlays.get((pool, type_name), ()):
            notes.append(f"NodeOverlay {name} sets the price of {type_name} in NodePool {pool}")
        for name in overlays.capacity_overlays.get((pool, type_name), ()):
            notes.append(f"NodeOverlay {name} adds capacity to {type_name} in NodePool {pool}")
    for verdict in overlays.conflicts:
        notes.append(f"NodeOverlay {verdict.name} is not applied ({verdict.reason}: {verdict.message})")
    before = _decision(key, without_overlays)
    placed_with = key not in with_overlays.unschedulable
    placed_without = key not in without_overlays.unschedulable
    if before != chosen or placed_with != placed_without:
        plain = without_overlays.explanations.get(key)
        if not placed_without:
            where = f"unschedulable ({without_overlays.unschedulable[key]})"
        else:
            where = plain.placement if plain is not None and plain.placement else "elsewhere"
        notes.append(f"NodeOverlays changed this decision: without them the pod would go to {where}")
    return notes


def _to_json(explanation: Explanation, pod: Pod) -> dict[str, Any]:
    out = asdict(explanation)
    out["requests"] = dict(pod.requests)
    out["text"] = explanation.text() if not explanation.scheduled else ""
    return out


def _funnel(verdict: PoolVerdict) -> str:
    if not verdict.funnel:
        return ""
    first, *rest = verdict.funnel
    return f"{first.remaining} types" + "".join(f" → {s.constraint}: {s.remaining}" for s in rest)


def _details(verdict: PoolVerdict) -> str:
    lines = [verdict.message]
    funnel = _funnel(verdict)
    if funnel:
        lines.append(f"funnel: {funnel}")
    lines.extend(f"hint: {hint}" for hint in verdict.hints)
    return "\n".join(lines)


_STYLE = {"rejected": "red", "chosen": "green", "would also fit": "cyan", "would not fit": "yellow"}


def print_explanation(explanation: Explanation, pod: Pod, *, file: TextIO) -> None:
    """The explanation for people: outcome, relaxations, then NodePool | verdict | constraint | details."""
    from rich.console import Console
    from rich.table import Table

    from nodesmith.core.scheduling.reasons import amount, resource_order

    console = Console(file=file, soft_wrap=False, width=max(120, Console(file=file).width))
    requests = ", ".join(f"{r} {amount(r, pod.requests[r])}" for r in resource_order(pod.requests))
    console.print(f"[bold]Pod[/bold] {explanation.pod} (requests {requests or 'nothing'})")
    if explanation.error:
        console.print(f"[bold red]Unschedulable:[/bold red] {explanation.error}")
        return
    if explanation.scheduled:
        console.print(f"[bold green]Goes to[/bold green] {explanation.placement}")
    else:
        console.print("[bold red]Unschedulable[/bold red]: no NodePool and no existing node can take it")
    if explanation.relaxed:
        console.print(f"Relaxed first: {', '.join(explanation.relaxed)}")
    if not explanation.pools and explanation.existing is None:
        return
    table = Table(title_justify="left", show_lines=True)
    table.add_column("NodePool")
    table.add_column("verdict")
    table.add_column("first blocking constraint", overflow="fold")
    table.add_column("details", overflow="fold")
    for verdict in explanation.pools:
        style = _STYLE.get(verdict.verdict, "")
        table.add_row(
            verdict.nodepool,
            f"[{style}]{verdict.verdict}[/{style}]" if style else verdict.verdict,
            verdict.constraint or "-",
            _details(verdict),
        )
    if explanation.existing is not None:
        reasons = "\n".join(f"{count} {detail}" for count, detail in explanation.existing.reasons)
        table.add_row(
            f"(existing nodes: {explanation.existing.considered})",
            "[red]none fits[/red]",
            reasons.splitlines()[0] if reasons else "-",
            reasons or "-",
        )
    console.print(table)
    if not explanation.scheduled:
        console.print(f"Event message: {explanation.text()}")
