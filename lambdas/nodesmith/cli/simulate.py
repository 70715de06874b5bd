"""``nodesmith simulate``: what Nodesmith would launch for a set of manifests, launching nothing.

Steps, each with its exit code on failure (0 success, 1 a step failed, 2 bad input):

1. **Manifests** (:func:`nodesmith.adapters.manifests.load_manifests`): NodePools, EC2NodeClasses,
   Pods (workloads expanded), DaemonSets, Nodes, PDBs. Invalid manifests or missing files -> 2,
   with the file, document, field path and reason on stderr.
2. **Instance catalogue** (:mod:`nodesmith.cli.simulate_catalogue`): the embedded AWS by default —
   moto's copy of the real EC2 catalogue, served in-process under ``moto.mock_aws`` (no network,
   no credentials, no moto state left behind) — or real AWS with ``--aws`` (boto3's default
   credential chain).
   Every zone of the region is offered (the simulation does not resolve EC2NodeClass subnets or
   AMIs). Each NodePool's EC2NodeClass shapes its own instance types' allocatable with its kubelet
   settings, root volume and ``instanceStorePolicy``, as in Karpenter
   (:func:`load_nodepool_catalogues`; node classes with the same spec share one catalogue).
   With ``--capacity-reservations FILE`` (a saved ``aws ec2 describe-capacity-reservations`` answer) the
   reservations each EC2NodeClass selects add ``reserved`` offerings (:mod:`nodesmith.cli.simulate_reservations`).
3. **Prices** (:class:`nodesmith.adapters.aws.pricing.PricingProvider`): ``--price-table`` or
   ``$NODESMITH_PRICE_TABLE`` (on-demand USD/hour by type), the Pricing API with ``--aws``, else
   estimates. Estimated prices are labelled: a note on stderr, and in the table's caption.
   NodeOverlays in the manifests (``karpenter.sh/v1alpha1``) are applied to each NodePool's instance
   types (:func:`overlay_nodepool_catalogues`); an overlay that conflicts is named on stderr and left out.
4. **Scheduling input** (:func:`build_scheduling_input`): pending pods = pods without
   ``spec.nodeName`` that are not DaemonSet, mirror or finished pods (all treated as marked
   Unschedulable, as kube-scheduler would); existing nodes = Node manifests with the pods bound to
   them plus the DaemonSet pods that would run there; NodePool usage (for ``limits``) = the
   capacity of the pool's existing nodes plus ``nodes: <count>``.
5. **Static NodePools** (:mod:`nodesmith.cli.simulate_static`): what each ``spec.replicas`` pool would launch or
   remove; its new NodeClaims are existing capacity for the pending pods (``static_nodepools`` in the JSON, their
   price in ``cost_per_hour``).
6. **Solve** (:func:`nodesmith.core.scheduling.solve`) and print (:mod:`nodesmith.cli.output`):
   ``-o json`` prints exactly one JSON object on stdout; everything else goes to stderr. With
   NodeOverlays it has an ``overlays`` list: ``{name, valid, reason, message, conflicts_with}`` each.

The catalogue, its on-disk cache of moto's answers and the isolation from the user's AWS
environment are in :mod:`nodesmith.cli.simulate_catalogue`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from collections import defaultdict
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING

from nodesmith.cli.exits import EXIT_OK, BadInput, StepFailed, check_choice, check_manifests, report
from nodesmith.cli.simulate_catalogue import (
    CACHED_OPERATIONS,
    PRICE_TABLE_ENV,
    CatalogueSource,
    catalogue_cache_path,
    load_catalogue,
)
from nodesmith.core.errors import ManifestError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from nodesmith.adapters.manifests import ManifestBundle
    from nodesmith.cli.simulate_static import StaticView
    from nodesmith.core.api.ec2nodeclass import EC2NodeClass
    from nodesmith.core.model import DaemonSet, InstanceType, Node, NodeSelectorRequirement, Pod
    from nodesmith.core.overlay import OverlayResult
    from nodesmith.core.resources import Resources
    from nodesmith.core.scheduling.types import ExistingNode, SchedulingInput, SchedulingResult

__all__ = [
    "CACHED_OPERATIONS",
    "PRICE_TABLE_ENV",
    "build_scheduling_input",
    "catalogue_cache_path",
    "load_catalogue",
    "load_nodepool_catalogues",
    "overlay_nodepool_catalogues",
    "run_simulate",
]

LOG = logging.getLogger(__name__)

OUTPUTS = ("json", "table")

_LABEL_NODEPOOL = "karpenter.sh/nodepool"
_LABEL_INITIALIZED = "karpenter.sh/initialized"
_LABEL_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
_LABEL_ZONE = "topology.kubernetes.io/zone"
_LABEL_CAPACITY_TYPE = "karpenter.sh/capacity-type"
_LABEL_HOSTNAME = "kubernetes.io/hostname"


def _err(message: str) -> None:
    print(message, file=sys.stderr)


def run_simulate(
    *,
    files: Sequence[Path],
    source: CatalogueSource | None = None,
    output: str = "table",
    packing: str = "karpenter",
    capacity_reservations: Path | None = None,
) -> int:
    """Run the simulation and print the plan; returns the process exit code (0, 1 or 2).

    ``files`` are manifest files (multi-document YAML); ``source`` where the priced catalogue comes from
    (:class:`~nodesmith.cli.simulate_catalogue.CatalogueSource`; None: the embedded AWS in us-east-1, priced by
    ``$NODESMITH_PRICE_TABLE`` when set); ``output`` ``json`` or ``table``. ``packing``: ``karpenter``
    (default: Karpenter's own grouping, what the Karpenter-semantics scenarios expect) or ``nodesmith``
    (cost-aware re-packing, the reconcile Lambda's default; :mod:`nodesmith.core.scheduling.repack`). Pods that
    cannot be placed are part of the plan, not an error. ``capacity_reservations`` is a saved
    DescribeCapacityReservations answer (see the module docstring).
    """
    from nodesmith.core.scheduling.types import PACKING_POLICIES

    out = sys.stdout
    source = source or CatalogueSource()
    table = source.price_table if source.price_table is not None else _env_price_table()
    try:
        _check_arguments(files=files, output=output, price_table=table)
        if packing not in PACKING_POLICIES:
            check_choice("--packing", packing, PACKING_POLICIES)
        # Only the final result may reach stdout: anything a library prints goes to stderr.
        with contextlib.redirect_stdout(sys.stderr):
            result, overlays, static = _plan(
                files=files,
                region=source.region,
                price_table=table,
                use_aws=source.use_aws,
                instance_types=source.instance_types,
                packing=packing,
                capacity_reservations=capacity_reservations,
            )
    except (BadInput, StepFailed) as exc:
        return report(exc)

    from nodesmith.cli import output as render
    from nodesmith.cli.simulate_static import static_json, static_lines

    note = render.price_note(result)
    if output == "json":
        if note:
            _err(f"note: {note}")
        doc = render.result_to_json(result)
        if overlays is not None:
            doc["overlays"] = [asdict(v) for _, v in sorted(overlays.verdicts.items())]
        if static:
            doc["static_nodepools"] = static_json(static)
            launched = sum(v.price_per_hour * len(v.new_nodes) for v in static)
            doc["cost_per_hour"] = round(float(doc["cost_per_hour"]) + launched, 6)
        out.write(json.dumps(doc) + "\n")
        out.flush()
    else:
        render.print_table(result, file=out, note=note)
        for line in static_lines(static):
            out.write(line + "\n")
    return EXIT_OK


def _check_arguments(*, files: Sequence[Path], output: str, price_table: Path | None) -> None:
    """Raise ``BadInput`` for an unknown output format, no or missing manifest files, a missing price table."""
    check_choice("--output", output, OUTPUTS)
    check_manifests([Path(f) for f in files], price_table=None if price_table is None else Path(price_table))


def _plan(
    *,
    files: Sequence[Path],
    region: str,
    price_table: Path | None,
    use_aws: bool,
    instance_types: Sequence[InstanceType] | None,
    packing: str = "karpenter",
    capacity_reservations: Path | None = None,
) -> tuple[SchedulingResult, OverlayResult | None, list[StaticView]]:
    """Load, build the catalogue (unless given), add the saved capacity reservations' offerings, apply NodeOverlays,
    add the static NodePools' capacity, solve; the result, the overlays' verdicts and the static NodePools. Raises
    ``BadInput`` or ``StepFailed``."""
    from nodesmith.adapters.manifests import load_manifests
    from nodesmith.core.scheduling import solve

    try:
        bundle = load_manifests([Path(f) for f in files])
    except ManifestError as exc:
        raise BadInput(str(exc)) from exc
    except OSError as exc:
        raise BadInput(f"cannot read manifests: {exc}") from exc
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
    if capacity_reservations is not None:
        from nodesmith.cli.simulate_reservations import read_capacity_reservations, with_capacity_reservations

        items = read_capacity_reservations(Path(capacity_reservations))
        instance_types, per_pool = with_capacity_reservations(
            bundle, shared=instance_types, per_pool=per_pool, items=items, now=time.time()
        )
    overlaid, overlays = overlay_nodepool_catalogues(bundle, instance_types, per_pool)
    from nodesmith.cli.simulate_static import static_views, with_static_nodes

    inp = build_scheduling_input(bundle, instance_types)
    static = static_views(bundle, instance_types, overlaid, now=time.time())
    inp = with_static_nodes(inp, static)
    result = solve(replace(inp, packing=packing, nodepool_instance_types=overlaid))  # type: ignore[arg-type]
    return result, overlays, static


def _env_price_table() -> Path | None:
    value = os.environ.get(PRICE_TABLE_ENV, "").strip()
    return Path(value) if value else None


# --------------------------------------------------------------------------------------- catalogue


def _refuse_unlaunchable(nodeclass: EC2NodeClass) -> None:
    """Raise ``BadInput`` naming ``nodeclass`` and why when the reconcile function would launch nothing from it: an
    AMI family without a bootstrap (``AMIsReady=False``) or kubelet settings the family would drop
    (``ValidationSucceeded=False``), so a simulation never plans nodes the real function would not launch."""
    from nodesmith.adapters.aws.bootstrap import SUPPORTED_AMI_FAMILIES, unsupported_kubelet

    family = nodeclass.ami_family
    if family not in SUPPORTED_AMI_FAMILIES:
        reason = f"amiFamily {family}: Nodesmith bootstraps {', '.join(SUPPORTED_AMI_FAMILIES)} nodes only"
    else:
        spec = nodeclass.spec.model_dump(by_alias=True, exclude_none=True, mode="json")
        reason = unsupported_kubelet(family, spec.get("kubelet")) or ""
    if reason:
        raise BadInput(f"EC2NodeClass {nodeclass.name} would not be ready, so nothing would launch from it: {reason}")


def load_nodepool_catalogues(
    bundle: ManifestBundle, *, region: str, price_table: Path | None, use_aws: bool
) -> tuple[list[InstanceType], dict[str, list[InstanceType]]]:
    """``(shared, per_nodepool)``: the catalogue of each NodePool's EC2NodeClass, as Karpenter computes
    instance types per node class (kubelet ``maxPods``/``podsPerCore``/reserved/eviction, root volume,
    ``instanceStorePolicy``; see :func:`load_catalogue`).

    With one node class in use (or none), ``shared`` is its catalogue (Karpenter's defaults for
    none) and ``per_nodepool`` is empty. With several, ``per_nodepool`` maps each NodePool whose
    node class is in the manifests to that class's catalogue (classes with identical specs share
    one list), and ``shared`` is the first class's (by name): existing nodes' prices and NodePools
    whose node class is missing use it. Raises ``BadInput`` for a node class in use that the reconcile function
    would leave not ready (:func:`_refuse_unlaunchable`), and what :func:`load_catalogue` raises.
    """
    classes = {nc.name: nc for nc in bundle.ec2nodeclasses}
    used = sorted({np.spec.template.spec.node_class_ref.name for np in bundle.nodepools} & set(classes))
    for name in used:
        _refuse_unlaunchable(classes[name])
    if len(used) <= 1:
        nodeclass = classes[used[0]] if used else None
        return load_catalogue(region=region, price_table=price_table, use_aws=use_aws, nodeclass=nodeclass), {}
    by_spec: dict[str, list[InstanceType]] = {}
    per_class: dict[str, list[InstanceType]] = {}
    for name in used:
        key = classes[name].spec.model_dump_json(by_alias=True, exclude_none=True)
        if key not in by_spec:
            by_spec[key] = load_catalogue(
                region=region, price_table=price_table, use_aws=use_aws, nodeclass=classes[name]
            )
        per_class[name] = by_spec[key]
    per_pool = {
        np.name: per_class[np.spec.template.spec.node_class_ref.name]
        for np in bundle.nodepools
        if np.spec.template.spec.node_class_ref.name in per_class
    }
    return per_class[used[0]], per_pool


def overlay_nodepool_catalogues(
    bundle: ManifestBundle,
    instance_types: Sequence[InstanceType],
    per_pool: Mapping[str, Sequence[InstanceType]],
) -> tuple[dict[str, Sequence[InstanceType]], OverlayResult | None]:
    """Each NodePool's catalogue with the bundle's NodeOverlays applied, and the overlays' verdicts.

    Without NodeOverlays: ``per_pool`` unchanged and None. With some: every NodePool of the bundle gets
    its catalogue (``per_pool``'s, else ``instance_types``) through
    :func:`nodesmith.core.overlay.apply_overlays`, and each overlay found in conflict (or failing runtime
    validation) is named on stderr, as Karpenter reports it on the overlay's ``ValidationSucceeded``.
    """
    from nodesmith.core.overlay import apply_overlays

    if not bundle.nodeoverlays:
        return dict(per_pool), None
    catalogues = {np.name: per_pool.get(np.name, instance_types) for np in bundle.nodepools}
    result = apply_overlays(overlays=bundle.nodeoverlays, nodepools=bundle.nodepools, instance_types=catalogues)
    for verdict in result.conflicts:
        with_ = f" ({', '.join(verdict.conflicts_with)})" if verdict.conflicts_with else ""
        _err(
            f"note: NodeOverlay {verdict.name} not applied: ValidationSucceeded=False, "
            f"reason {verdict.reason}: {verdict.message}{with_}"
        )
    return dict(result.instance_types), result


# ------------------------------------------------------------------------------- scheduling input


def build_scheduling_input(bundle: ManifestBundle, instance_types: Sequence[InstanceType]) -> SchedulingInput:
    """Turn loaded manifests and a catalogue into the scheduler's input (rules in the module docstring)."""
    from nodesmith.core.scheduling.types import SchedulingInput

    pending = [
        replace(p, unschedulable=True)
        for p in bundle.pods
        if not p.node_name
        and not p.is_daemonset
        and not p.is_mirror
        and not p.is_terminal
        and p.deletion_timestamp is None
    ]
    existing, usage = _existing_nodes(bundle, instance_types)
    return SchedulingInput(
        pods=pending,
        nodepools=list(bundle.nodepools),
        instance_types=list(instance_types),
        existing_nodes=existing,
        daemonsets=list(bundle.daemonsets),
        nodepool_usage=usage,
        volume_requirements=_volume_requirements(bundle, pending),
    )


def _volume_requirements(bundle: ManifestBundle, pods: Sequence[Pod]) -> dict[str, tuple[NodeSelectorRequirement, ...]]:
    """The zone (or other) requirements each pending pod's PersistentVolumeClaims impose; what
    Karpenter would refuse the pod for (a claim or class missing from the manifests) is logged."""
    from nodesmith.core.scheduling.volumes import volume_requirements

    claims = {(c.namespace, c.name): c for c in bundle.volume_claims}
    volumes = {v.name: v for v in bundle.persistent_volumes}
    classes = {c.name: c for c in bundle.storage_classes}
    out: dict[str, tuple[NodeSelectorRequirement, ...]] = {}
    for pod in pods:
        if not pod.pvc_names:
            continue
        reqs, notes = volume_requirements(pod, claims=claims, volumes=volumes, classes=classes)
        for note in notes:
            LOG.warning("pod %s: %s (Karpenter would not provision for it until fixed)", pod.key, note)
        if reqs:
            out[pod.key] = reqs
    return out


def _existing_nodes(
    bundle: ManifestBundle, instance_types: Sequence[InstanceType]
) -> tuple[list[ExistingNode], dict[str, Resources]]:
    from nodesmith.core.resources import add
    from nodesmith.core.scheduling.instancetypes import NODES
    from nodesmith.core.scheduling.types import ExistingNode

    node_names = {n.name for n in bundle.nodes}
    bound: dict[str, list[Pod]] = defaultdict(list)
    for pod in bundle.pods:
        if not pod.node_name or pod.is_terminal:
            continue
        if pod.node_name in node_names:
            bound[pod.node_name].append(pod)
        else:
            LOG.warning("pod %s is bound to node %s, which no manifest defines: ignored", pod.key, pod.node_name)
    pools = {np.name: np for np in bundle.nodepools}
    prices = {it.name: it for it in instance_types}
    usage: dict[str, Resources] = {}
    existing: list[ExistingNode] = []
    for node in sorted(bundle.nodes, key=lambda n: n.name):
        labels = dict(node.labels)
        labels.setdefault(_LABEL_HOSTNAME, node.name)
        pool_name = labels.get(_LABEL_NODEPOOL)
        pool = pools.get(pool_name) if pool_name else None
        pods = bound.get(node.name, [])
        pods = pods + _daemon_pods(node, labels, pods, bundle.daemonsets)
        existing.append(
            ExistingNode(
                name=node.name,
                labels=labels,
                taints=node.taints,
                allocatable=dict(node.allocatable),
                pods=tuple(pods),
                nodepool=pool_name,
                # Nodes Karpenter does not manage are initialized; its own ones once labelled so.
                initialized=pool_name is None or labels.get(_LABEL_INITIALIZED) == "true",
                unschedulable=node.unschedulable or node.deletion_timestamp is not None,
                startup_taints=pool.startup_taints_core() if pool is not None else (),
                price=_node_price(labels, prices),
            )
        )
        if pool_name:
            # Karpenter's NodePool status.resources: the summed capacity of the pool's nodes.
            capacity = dict(node.capacity or node.allocatable)
            capacity[NODES] = 1
            usage[pool_name] = add(usage.get(pool_name, {}), capacity)
    return existing, usage


def _daemon_pods(
    node: Node, labels: Mapping[str, str], bound: Sequence[Pod], daemonsets: Sequence[DaemonSet]
) -> list[Pod]:
    """Pods of the DaemonSets that would run on ``node`` and have no pod bound there yet.

    A DaemonSet runs on a node when its pod template tolerates every node taint and one of its
    node-selection terms is compatible with the node's labels (the scheduler's own rule,
    :func:`nodesmith.core.scheduling.daemonsets.daemon_infos`).
    """
    from nodesmith.core.requirements import Requirements
    from nodesmith.core.scheduling.daemonsets import daemon_infos
    from nodesmith.core.scheduling.taints import first_untolerated

    present = {(p.namespace, p.owner_name) for p in bound if p.is_daemonset}
    node_reqs = Requirements.from_labels(labels)
    out: list[Pod] = []
    for ds in daemonsets:
        if (ds.namespace, ds.name) in present:
            continue
        infos = daemon_infos([ds])
        if not infos:  # a DaemonSet whose affinity cannot be parsed lands nowhere
            continue
        info = infos[0]
        if first_untolerated(node.taints, info.tolerations) is not None:
            continue
        if not any(node_reqs.compatible(term) is None for term in info.terms):
            continue
        out.append(
            replace(
                ds.pod,
                namespace=ds.namespace,
                name=f"{ds.name}-{node.name}",
                uid="",
                node_name=node.name,
                owner_kind="DaemonSet",
                owner_name=ds.name,
                phase="Running",
                unschedulable=False,
            )
        )
    return out


def _node_price(labels: Mapping[str, str], catalogue: Mapping[str, InstanceType]) -> float:
    """USD/hour of an existing node from its instance-type, zone and capacity-type labels (0.0 when unknown)."""
    it = catalogue.get(labels.get(_LABEL_INSTANCE_TYPE, ""))
    if it is None:
        return 0.0
    zone = labels.get(_LABEL_ZONE)
    capacity_type = labels.get(_LABEL_CAPACITY_TYPE)
    for offering in it.offerings:
        if (zone is None or offering.zone == zone) and (
            capacity_type is None or offering.capacity_type == capacity_type
        ):
            return offering.price
    return 0.0
