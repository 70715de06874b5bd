"""``nodesmith simulate --disrupt``: the voluntary disruption decisions Nodesmith would take on a snapshot.

Reads the same manifests as ``nodesmith simulate`` (:func:`nodesmith.adapters.manifests.load_manifests`):
Nodes (labels ``karpenter.sh/nodepool``, ``node.kubernetes.io/instance-type``,
``topology.kubernetes.io/zone``, ``karpenter.sh/capacity-type``), Pods bound with ``spec.nodeName``
(and pending ones), NodePools, EC2NodeClasses, PodDisruptionBudgets, DaemonSets and, optionally,
NodeClaims (matched to Nodes by ``status.nodeName`` or ``status.providerID``). The instance
catalogue and prices come from :mod:`nodesmith.cli.simulate` (embedded moto catalogue by default,
``--price-table``/``$NODESMITH_PRICE_TABLE`` for on-demand prices).

Snapshot conventions: a Node written without any ``Ready`` condition is taken as Ready (a
hand-written snapshot rarely carries status); its allocatable defaults to its instance type's;
DaemonSet pods that would run on a node are added as ``simulate`` does.

Then :func:`nodesmith.core.disruption.plan_disruptions` replays the disruption loop and the
result is printed. ``-o json`` prints exactly one JSON object on stdout::

    {"decisions": [{"method": "emptiness" | "drift" | "expiration" | "multi-node-consolidation"
                              | "single-node-consolidation",
                    "nodes": [str, ...],
                    "replacement": {"nodepool": str, "instance_types": [str, cheapest first],
                                    "capacity_type": str | null, "zone": str | null,
                                    "price_per_hour": float} | null,
                    "savings_per_hour": float,
                    "cause": str, "reason": str, "cost_before": float, "cost_after": float,
                    "pods": ["namespace/name", ...],
                    "replacements": [...]            # only when a command launches several NodeClaims
                                                     # (drift, or the nodesmith policy's consolidation)
                   }, ...],
     "rejected": [{"node": str, "method": str | null, "reason": str}, ...],
     "cost_per_hour": {"before": float, "after": float}}

Expirations come first, then the graceful commands in the order they would start. Prices are USD
per hour rounded to 6 decimals. Exit codes: 0 success, 1 a step failed, 2 bad input.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from nodesmith.cli.exits import EXIT_OK, BadInput, StepFailed, check_choice, check_manifests, report
from nodesmith.cli.simulate_catalogue import CatalogueSource
from nodesmith.core.errors import ManifestError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from nodesmith.adapters.manifests import ManifestBundle
    from nodesmith.core.disruption import Decision, DisruptionPlan
    from nodesmith.core.disruption.types import ClusterNode, Policy
    from nodesmith.core.model import InstanceType, NodeSelectorRequirement
    from nodesmith.core.scheduling.types import NodeClaimPlan

__all__ = ["build_cluster_nodes", "plan_to_json", "run_simulate_disrupt"]

OUTPUTS = ("json", "table")


def _err(message: str) -> None:
    print(message, file=sys.stderr)


def run_simulate_disrupt(
    *,
    files: Sequence[Path],
    source: CatalogueSource | None = None,
    output: str = "json",
    now: float | str | None = None,
    min_savings_per_hour: float = 0.0,
    policy: str = "karpenter",
) -> int:
    """Print the disruption decisions for the manifests in ``files``; returns the exit code (0, 1 or 2).

    ``source``: where the priced catalogue comes from (:class:`~nodesmith.cli.simulate_catalogue.CatalogueSource`;
    None: the embedded AWS in us-east-1). ``output``: ``json`` or ``table``. ``now``: when the decisions are
    taken, epoch seconds or RFC 3339 (``2025-10-09T08:00:00Z``); default the current time — pass the snapshot's
    time to replay an old snapshot, or expireAfter will judge its nodes by today's clock.
    ``min_savings_per_hour``: consolidation must save at least this (USD/hour). ``policy``: the consolidation
    policy, ``karpenter`` (default, Karpenter's multi- and single-node consolidation) or ``nodesmith``
    (:mod:`nodesmith.core.disruption.repack`).
    """
    from nodesmith.cli import simulate

    source = source or CatalogueSource()
    table = source.price_table if source.price_table is not None else simulate._env_price_table()
    try:
        _check_arguments(files=files, output=output, price_table=table, policy=policy)
        with contextlib.redirect_stdout(sys.stderr):  # only the result may reach stdout
            bundle = _load(files)
            per_pool: dict[str, list[InstanceType]] = {}
            if source.instance_types is None:
                catalogue, per_pool = _catalogue(
                    bundle, region=source.region, price_table=table, use_aws=source.use_aws
                )
            else:
                catalogue = list(source.instance_types)
            overlaid, _ = simulate.overlay_nodepool_catalogues(bundle, catalogue, per_pool)
            at = _when(now)
            plan = _plan(
                bundle,
                catalogue,
                files=files,
                now=at,
                min_savings=min_savings_per_hour,
                per_pool=overlaid,
                policy=policy,
            )
    except (BadInput, StepFailed) as exc:
        return report(exc)
    out = sys.stdout
    if output == "json":
        out.write(json.dumps(plan_to_json(plan)) + "\n")
        out.flush()
    else:
        print_table(plan, file=out)
    return EXIT_OK


def _when(now: float | str | None) -> float:
    """``now`` as epoch seconds (``BadInput`` for a string that is neither a number nor RFC 3339)."""
    from nodesmith.core.objects import parse_timestamp

    if now is None:
        return time.time()
    if isinstance(now, int | float):
        return float(now)
    with contextlib.suppress(ValueError):
        return float(now)
    try:
        parsed = parse_timestamp(now.strip(), field="--now")
    except ValueError:
        parsed = None
    if parsed is None:
        raise BadInput(f"--now {now!r} is neither epoch seconds nor an RFC 3339 time")
    return parsed


def _check_arguments(
    *, files: Sequence[Path], output: str, price_table: Path | None, policy: str = "karpenter"
) -> None:
    from nodesmith.core.disruption.types import POLICIES

    check_choice("--output", output, OUTPUTS)
    check_choice("--policy", policy, POLICIES)
    check_manifests([Path(f) for f in files], price_table=None if price_table is None else Path(price_table))


def _policy(value: str) -> Policy:
    """``value`` as a consolidation policy (checked by ``_check_arguments``)."""
    return "nodesmith" if value == "nodesmith" else "karpenter"


def _load(files: Sequence[Path]) -> ManifestBundle:
    from nodesmith.adapters.manifests import load_manifests

    try:
        return load_manifests([Path(f) for f in files])
    except ManifestError as exc:
        raise BadInput(str(exc)) from exc
    except OSError as exc:
        raise BadInput(f"cannot read manifests: {exc}") from exc


def _catalogue(
    bundle: ManifestBundle, *, region: str, price_table: Path | None, use_aws: bool
) -> tuple[list[InstanceType], dict[str, list[InstanceType]]]:
    """``(shared, per_nodepool)`` as ``simulate`` loads them (:func:`.simulate.load_nodepool_catalogues`)."""
    from nodesmith.cli import simulate

    try:
        return simulate.load_nodepool_catalogues(bundle, region=region, price_table=price_table, use_aws=use_aws)
    except BadInput:
        raise
    except Exception as exc:  # botocore/moto errors: credentials, network, unknown region
        raise StepFailed(f"cannot read the EC2 instance catalogue for {region}: {exc}") from exc


def _nodes_without_ready_condition(bundle: ManifestBundle, files: Sequence[Path]) -> set[str]:
    """Names of Node documents that carry no ``Ready`` condition at all (taken as Ready)."""
    import yaml

    paths: list[Path] = []
    for f in map(Path, files):
        paths.extend(sorted(p for p in f.iterdir() if p.suffix in (".yaml", ".yml")) if f.is_dir() else [f])
    names: set[str] = set()
    for path in paths:
        with contextlib.suppress(OSError, yaml.YAMLError):
            for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
                items = doc.get("items", []) if isinstance(doc, dict) and doc.get("kind") == "List" else [doc]
                for item in items:
                    if not isinstance(item, dict) or item.get("kind") != "Node":
                        continue
                    conditions = ((item.get("status") or {}).get("conditions")) or []
                    if not any(isinstance(c, dict) and c.get("type") == "Ready" for c in conditions):
                        names.add(str((item.get("metadata") or {}).get("name", "")))
    known = {n.name for n in bundle.nodes}
    return names & known


def build_cluster_nodes(
    bundle: ManifestBundle, instance_types: Sequence[InstanceType], *, assume_ready: set[str] | None = None
) -> tuple[list[ClusterNode], list[Any]]:
    """ClusterNodes (Node + bound pods + DaemonSet pods + NodeClaim) and the pending pods of a bundle.

    Bound pods and DaemonSet pods come from :func:`nodesmith.cli.simulate.build_scheduling_input`,
    so ``simulate`` and ``simulate --disrupt`` see the same cluster. ``assume_ready`` names Nodes
    without a Ready condition, which are taken as Ready.
    """
    from nodesmith.cli.simulate import build_scheduling_input
    from nodesmith.core.disruption.candidates import match_nodeclaims
    from nodesmith.core.disruption.types import ClusterNode

    sin = build_scheduling_input(bundle, instance_types)
    pods_by_node = {n.name: n.pods for n in sin.existing_nodes}
    claims = match_nodeclaims(
        (n.name for n in bundle.nodes), bundle.nodeclaims, {n.name: n.provider_id for n in bundle.nodes}
    )
    ready = assume_ready or set()
    out: list[ClusterNode] = []
    for node in bundle.nodes:
        if node.name in ready and not node.ready:
            node = replace(node, ready=True)  # noqa: PLW2901 - the snapshot convention, documented above
        out.append(ClusterNode(node=node, pods=tuple(pods_by_node.get(node.name, ())), nodeclaim=claims.get(node.name)))
    return out, list(sin.pods)


def _plan(
    bundle: ManifestBundle,
    catalogue: Sequence[InstanceType],
    *,
    files: Sequence[Path],
    now: float,
    min_savings: float,
    policy: str = "karpenter",
    per_pool: Mapping[str, Sequence[InstanceType]] | None = None,
) -> DisruptionPlan:
    from nodesmith.core.disruption import DisruptionSettings, DisruptionSnapshot, plan_disruptions
    from nodesmith.core.scheduling.volumes import VolumeContext

    ready = _nodes_without_ready_condition(bundle, files)
    nodes, pending = build_cluster_nodes(bundle, catalogue, assume_ready=ready)
    storage = VolumeContext.of(
        claims=bundle.volume_claims, volumes=bundle.persistent_volumes, classes=bundle.storage_classes
    )
    volumes: dict[str, tuple[NodeSelectorRequirement, ...]] = {}  # moved pods keep their volumes' zones
    for pod in bundle.pods:
        if pod.pvc_names and not pod.is_terminal:
            reqs, _ = storage.requirements(pod, rescheduled=bool(pod.node_name))
            if reqs:
                volumes[pod.key] = reqs
    return plan_disruptions(
        DisruptionSnapshot(
            nodes=nodes,
            nodepools=bundle.nodepools,
            instance_types=catalogue,
            nodeclasses=bundle.ec2nodeclasses,
            pending_pods=pending,
            pdbs=bundle.pdbs,
            daemonsets=bundle.daemonsets,
            volume_requirements=volumes,
            nodepool_instance_types=per_pool,
        ),
        now=now,
        settings=DisruptionSettings(min_savings_per_hour=min_savings, policy=_policy(policy)),
    )


def _price(value: float) -> float:
    return round(float(value), 6)


def _replacement_json(plan: NodeClaimPlan) -> dict[str, Any]:
    from nodesmith.cli.output import launch_capacity_type

    return {
        "nodepool": plan.nodepool,
        "instance_types": [it.name for it in plan.instance_types],
        "capacity_type": launch_capacity_type(plan),
        "zone": plan.zone,
        "price_per_hour": _price(plan.price_per_hour),
    }


def decision_to_json(decision: Decision) -> dict[str, Any]:
    """One decision as printed (see the module docstring)."""
    item: dict[str, Any] = {
        "method": decision.method,
        "nodes": list(decision.nodes),
        "replacement": _replacement_json(decision.replacement) if decision.replacement is not None else None,
        "savings_per_hour": _price(decision.savings_per_hour),
        "cause": decision.cause,
        "reason": decision.reason,
        "cost_before": _price(decision.cost_before),
        "cost_after": _price(decision.cost_after),
        "pods": list(decision.pods),
    }
    if len(decision.replacements) > 1:
        item["replacements"] = [_replacement_json(r) for r in decision.replacements]
    return item


def plan_to_json(plan: DisruptionPlan) -> dict[str, Any]:
    """The JSON object ``-o json`` prints (shape in the module docstring)."""
    decisions = [decision_to_json(d) for d in plan.decisions]
    rejected = [
        {"node": r.node, "method": r.method, "reason": r.reason}
        for r in sorted(plan.rejected, key=lambda r: (r.node, r.method or "", r.reason))
    ]
    before = sum(d.cost_before for d in plan.decisions)
    after = sum(d.cost_after for d in plan.decisions)
    return {
        "decisions": decisions,
        "rejected": rejected,
        "cost_per_hour": {"before": _price(before), "after": _price(after)},
    }


def print_table(plan: DisruptionPlan, *, file: TextIO) -> None:
    """Human-readable rendering: one block per decision, then the rejected nodes grouped by node."""
    if not plan.decisions:
        print("No disruption: every node stays.", file=file)
    for i, d in enumerate(plan.decisions, 1):
        print(f"{i}. {d.method}: {', '.join(d.nodes)}  ({d.cause})", file=file)
        print(f"   {d.reason}", file=file)
        for r in d.replacements:
            types = ", ".join(it.name for it in r.instance_types[:6]) + (" ..." if len(r.instance_types) > 6 else "")
            print(f"   replacement: {r.nodepool} [{types}] ${r.price_per_hour:.4f}/h", file=file)
        print(
            f"   cost ${d.cost_before:.4f}/h -> ${d.cost_after:.4f}/h, saves ${d.savings_per_hour:.4f}/h; "
            f"{len(d.pods)} pod(s) evicted",
            file=file,
        )
    if plan.rejected:
        print("Left alone:", file=file)
        by_node: dict[str, list[str]] = defaultdict(list)
        for rej in plan.rejected:
            by_node[rej.node].append(f"[{rej.method or 'all methods'}] {rej.reason}")
        for node in sorted(by_node):
            for line in by_node[node]:
                print(f"  {node}: {line}", file=file)
