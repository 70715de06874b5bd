"""Pod parsing: ``pod_from_dict`` and the rules it applies.

Holds the effective-requests rule (:func:`pod_requests`, Kubernetes ``PodRequests``), node and pod
(anti-)affinity terms, tolerations, topology spread constraints, host ports, claimed PVCs, the
controller owner and the mirror-pod annotation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodesmith.core import resources as res
from nodesmith.core.model import (
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
    PodAffinityTerm,
    Toleration,
    TopologySpreadConstraint,
    WeightedNodeSelectorTerm,
    WeightedPodAffinityTerm,
)
from nodesmith.core.objects.common import (
    ObjectParseError,
    _int,
    _item_map,
    _join,
    _list,
    _map,
    _resource_list,
    _str,
    _str_map,
    _str_tuple,
    label_selector_from_dict,
    parse_timestamp,
)

__all__ = [
    "MIRROR_POD_ANNOTATION",
    "pod_from_dict",
    "pod_requests",
]

MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"


# --- affinity terms ------------------------------------------------------------------------------


_NODE_SELECTOR_OPS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte")


def _node_selector_term(obj: Any, path: str) -> NodeSelectorTerm:
    item = _item_map(obj, path)
    exprs: list[NodeSelectorRequirement] = []
    for i, raw in enumerate(_list(item, "matchExpressions", path)):
        p = f"{_join(path, 'matchExpressions')}[{i}]"
        expr = _item_map(raw, p)
        op = _str(expr, "operator", p)
        if op not in _NODE_SELECTOR_OPS:
            raise ObjectParseError(f"{p}.operator", f"{op!r} is not one of {', '.join(_NODE_SELECTOR_OPS)}")
        key = _str(expr, "key", p)
        if not key:
            raise ObjectParseError(f"{p}.key", "must not be empty")
        exprs.append(NodeSelectorRequirement(key=key, operator=op, values=_str_tuple(expr, "values", p)))
    return NodeSelectorTerm(match_expressions=tuple(exprs))


def _pod_affinity_term(obj: Any, path: str) -> PodAffinityTerm:
    item = _item_map(obj, path)
    topology_key = _str(item, "topologyKey", path)
    if not topology_key:
        raise ObjectParseError(f"{path}.topologyKey", "must not be empty")
    return PodAffinityTerm(
        topology_key=topology_key,
        label_selector=label_selector_from_dict(item.get("labelSelector"), path=f"{path}.labelSelector"),
        namespaces=_str_tuple(item, "namespaces", path),
        namespace_selector=label_selector_from_dict(item.get("namespaceSelector"), path=f"{path}.namespaceSelector"),
    )


def _pod_affinity(
    spec: Mapping[str, Any], key: str, path: str
) -> tuple[tuple[PodAffinityTerm, ...], tuple[WeightedPodAffinityTerm, ...]]:
    p = _join(path, key)
    aff = _map(spec, key, path)
    required = tuple(
        _pod_affinity_term(t, f"{p}.requiredDuringSchedulingIgnoredDuringExecution[{i}]")
        for i, t in enumerate(_list(aff, "requiredDuringSchedulingIgnoredDuringExecution", p))
    )
    preferred: list[WeightedPodAffinityTerm] = []
    for i, raw in enumerate(_list(aff, "preferredDuringSchedulingIgnoredDuringExecution", p)):
        wp = f"{p}.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
        item = _item_map(raw, wp)
        preferred.append(
            WeightedPodAffinityTerm(
                weight=_int(item, "weight", wp, 1),
                term=_pod_affinity_term(item.get("podAffinityTerm"), f"{wp}.podAffinityTerm"),
            )
        )
    return required, tuple(preferred)


# --- pods ----------------------------------------------------------------------------------------


def _container_requests(container: Mapping[str, Any], path: str) -> res.Resources:
    """Container requests, with requests defaulted from limits as the API server does
    (``SetDefaults_Pod``: a resource with a limit and no request requests the limit)."""
    resources = _map(container, "resources", path)
    rpath = _join(path, "resources")
    requests = _resource_list(resources, "requests", rpath)
    for name, amount in _resource_list(resources, "limits", rpath).items():
        requests.setdefault(name, amount)
    return requests


def pod_requests(spec: Mapping[str, Any], *, path: str = "spec") -> res.Resources:
    """Effective requests of a pod spec, per Kubernetes ``PodRequests``
    (``k8s.io/component-helpers/resource/helpers.go``), plus ``pods: 1``.

    * app containers are summed, and restartable init containers (sidecars,
      ``restartPolicy: Always``) are added to that sum because they run alongside them;
    * each regular init container needs its own requests plus the sidecars started before it;
    * the result is the per-resource max of the two, plus ``spec.overhead``;
    * pod-level ``spec.resources.requests`` (PodLevelResources) replaces the container total for
      the resources it names.

    Units: cpu millicores, memory/ephemeral-storage bytes, others counts.
    Raises :class:`ObjectParseError` for bad quantities, naming the container field.
    """
    total: res.Resources = {}
    for i, raw in enumerate(_list(spec, "containers", path)):
        cpath = f"{path}.containers[{i}]"
        total = res.add(total, _container_requests(_item_map(raw, cpath), cpath))
    sidecars: res.Resources = {}
    init_max: res.Resources = {}
    for i, raw in enumerate(_list(spec, "initContainers", path)):
        cpath = f"{path}.initContainers[{i}]"
        container = _item_map(raw, cpath)
        requests = _container_requests(container, cpath)
        if _str(container, "restartPolicy", cpath) == "Always":
            total = res.add(total, requests)
            sidecars = res.add(sidecars, requests)
            current = sidecars
        else:
            current = res.add(requests, sidecars)
        init_max = res.max_of(init_max, current)
    out = res.max_of(total, init_max)
    pod_level = _resource_list(_map(spec, "resources", path), "requests", _join(path, "resources"))
    out.update({k: v for k, v in pod_level.items() if k in (res.CPU, res.MEMORY, "hugepages-2Mi", "hugepages-1Gi")})
    out = res.add(out, _resource_list(spec, "overhead", path))
    out[res.PODS] = out.get(res.PODS, 0) + 1
    return {k: v for k, v in out.items() if v}


def _tolerations(spec: Mapping[str, Any], path: str) -> tuple[Toleration, ...]:
    out: list[Toleration] = []
    for i, raw in enumerate(_list(spec, "tolerations", path)):
        p = f"{path}.tolerations[{i}]"
        item = _item_map(raw, p)
        op = _str(item, "operator", p, "Equal")
        if op not in ("Equal", "Exists"):
            raise ObjectParseError(f"{p}.operator", f"{op!r} is not one of Equal, Exists")
        key = item.get("key")
        effect = item.get("effect")
        out.append(
            Toleration(
                key=_str(item, "key", p) if key is not None else None,
                operator=op,
                value=_str(item, "value", p),
                effect=(_str(item, "effect", p) or None) if effect is not None else None,
            )
        )
    return tuple(out)


def _topology_spread(spec: Mapping[str, Any], path: str) -> tuple[TopologySpreadConstraint, ...]:
    out: list[TopologySpreadConstraint] = []
    for i, raw in enumerate(_list(spec, "topologySpreadConstraints", path)):
        p = f"{path}.topologySpreadConstraints[{i}]"
        item = _item_map(raw, p)
        when = _str(item, "whenUnsatisfiable", p)
        if when not in ("DoNotSchedule", "ScheduleAnyway"):
            raise ObjectParseError(f"{p}.whenUnsatisfiable", f"{when!r} is not DoNotSchedule or ScheduleAnyway")
        max_skew = _int(item, "maxSkew", p, 0)
        if max_skew < 1:
            raise ObjectParseError(f"{p}.maxSkew", "must be at least 1")
        topology_key = _str(item, "topologyKey", p)
        if not topology_key:
            raise ObjectParseError(f"{p}.topologyKey", "must not be empty")
        min_domains = item.get("minDomains")
        out.append(
            TopologySpreadConstraint(
                max_skew=max_skew,
                topology_key=topology_key,
                when_unsatisfiable=when,
                label_selector=label_selector_from_dict(item.get("labelSelector"), path=f"{p}.labelSelector"),
                min_domains=_int(item, "minDomains", p, 0) if min_domains is not None else None,
                match_label_keys=_str_tuple(item, "matchLabelKeys", p),
                node_affinity_policy=_str(item, "nodeAffinityPolicy", p, "Honor"),
                node_taints_policy=_str(item, "nodeTaintsPolicy", p, "Ignore"),
            )
        )
    return tuple(out)


def _host_ports(spec: Mapping[str, Any], path: str) -> tuple[tuple[int, str, str], ...]:
    """(hostPort, protocol, hostIP) of app containers and sidecars (kube-scheduler NodePorts plugin)."""
    ports: list[tuple[int, str, str]] = []
    containers = [(f"{path}.containers[{i}]", c) for i, c in enumerate(_list(spec, "containers", path))]
    containers += [
        (f"{path}.initContainers[{i}]", c)
        for i, c in enumerate(_list(spec, "initContainers", path))
        if isinstance(c, Mapping) and c.get("restartPolicy") == "Always"
    ]
    for cpath, raw in containers:
        container = _item_map(raw, cpath)
        for j, port_raw in enumerate(_list(container, "ports", cpath)):
            pp = f"{cpath}.ports[{j}]"
            port = _item_map(port_raw, pp)
            host_port = _int(port, "hostPort", pp, 0)
            if host_port > 0:
                ports.append((host_port, _str(port, "protocol", pp, "TCP"), _str(port, "hostIP", pp)))
    return tuple(ports)


def _pvc_names(spec: Mapping[str, Any], pod_name: str, path: str) -> tuple[str, ...]:
    """Claims the pod mounts: ``persistentVolumeClaim.claimName`` and generic ephemeral volumes
    (whose claim is named ``<pod>-<volume>``)."""
    names: list[str] = []
    for i, raw in enumerate(_list(spec, "volumes", path)):
        vp = f"{path}.volumes[{i}]"
        volume = _item_map(raw, vp)
        claim = _map(volume, "persistentVolumeClaim", vp)
        if claim:
            names.append(_str(claim, "claimName", f"{vp}.persistentVolumeClaim"))
        elif volume.get("ephemeral") is not None:
            names.append(f"{pod_name}-{_str(volume, 'name', vp)}")
    return tuple(names)


def _controller_owner(meta: Mapping[str, Any]) -> tuple[str | None, str | None]:
    for i, raw in enumerate(_list(meta, "ownerReferences", "metadata")):
        ref = _item_map(raw, f"metadata.ownerReferences[{i}]")
        if ref.get("controller") is True:
            return _str(ref, "kind", "metadata.ownerReferences"), _str(ref, "name", "metadata.ownerReferences")
    return None, None


def _unschedulable(status: Mapping[str, Any]) -> bool:
    for i, raw in enumerate(_list(status, "conditions", "status")):
        cond = _item_map(raw, f"status.conditions[{i}]")
        if (
            cond.get("type") == "PodScheduled"
            and cond.get("status") == "False"
            and cond.get("reason") == "Unschedulable"
        ):
            return True
    return False


def pod_from_dict(obj: Mapping[str, Any]) -> Pod:
    """A ``v1 Pod`` object -> :class:`~nodesmith.core.model.Pod`.

    ``requests`` follow :func:`pod_requests`; ``unschedulable`` is ``PodScheduled=False`` with
    reason ``Unschedulable``; ``owner_kind``/``owner_name`` come from the controller owner
    reference; ``is_mirror`` from the ``kubernetes.io/config.mirror`` annotation; timestamps are
    epoch seconds; a missing namespace is ``default``; ``terminationGracePeriodSeconds`` defaults
    to 30. Node affinity ``matchFields`` are ignored (Karpenter ignores them too).

    Raises :class:`ObjectParseError` naming the field path.
    """
    obj = _item_map(obj, "")
    meta = _map(obj, "metadata", "")
    spec = _map(obj, "spec", "")
    status = _map(obj, "status", "")
    name = _str(meta, "name", "metadata")
    if not name:
        raise ObjectParseError("metadata.name", "is required")
    annotations = _str_map(meta, "annotations", "metadata")
    owner_kind, owner_name = _controller_owner(meta)

    affinity = _map(spec, "affinity", "spec")
    node_aff = _map(affinity, "nodeAffinity", "spec.affinity")
    na_path = "spec.affinity.nodeAffinity"
    required = _map(node_aff, "requiredDuringSchedulingIgnoredDuringExecution", na_path)
    req_path = f"{na_path}.requiredDuringSchedulingIgnoredDuringExecution"
    required_terms = tuple(
        _node_selector_term(t, f"{req_path}.nodeSelectorTerms[{i}]")
        for i, t in enumerate(_list(required, "nodeSelectorTerms", req_path))
    )
    preferred_terms: list[WeightedNodeSelectorTerm] = []
    for i, raw in enumerate(_list(node_aff, "preferredDuringSchedulingIgnoredDuringExecution", na_path)):
        p = f"{na_path}.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
        item = _item_map(raw, p)
        preferred_terms.append(
            WeightedNodeSelectorTerm(
                weight=_int(item, "weight", p, 1),
                term=_node_selector_term(item.get("preference", {}), f"{p}.preference"),
            )
        )
    pod_aff, pref_pod_aff = _pod_affinity(affinity, "podAffinity", "spec.affinity")
    pod_anti, pref_pod_anti = _pod_affinity(affinity, "podAntiAffinity", "spec.affinity")

    return Pod(
        namespace=_str(meta, "namespace", "metadata", "default") or "default",
        name=name,
        uid=_str(meta, "uid", "metadata"),
        labels=_str_map(meta, "labels", "metadata"),
        annotations=annotations,
        requests=pod_requests(spec),
        node_selector=_str_map(spec, "nodeSelector", "spec"),
        required_node_affinity=required_terms,
        preferred_node_affinity=tuple(preferred_terms),
        tolerations=_tolerations(spec, "spec"),
        topology_spread=_topology_spread(spec, "spec"),
        pod_affinity=pod_aff,
        preferred_pod_affinity=pref_pod_aff,
        pod_anti_affinity=pod_anti,
        preferred_pod_anti_affinity=pref_pod_anti,
        host_ports=_host_ports(spec, "spec"),
        pvc_names=_pvc_names(spec, name, "spec"),
        node_name=_str(spec, "nodeName", "spec") or None,
        nominated_node_name=_str(status, "nominatedNodeName", "status") or None,
        owner_kind=owner_kind,
        owner_name=owner_name,
        phase=_str(status, "phase", "status", "Pending"),
        unschedulable=_unschedulable(status),
        is_mirror=MIRROR_POD_ANNOTATION in annotations,
        priority=_int(spec, "priority", "spec", 0),
        priority_class_name=_str(spec, "priorityClassName", "spec"),
        creation_timestamp=parse_timestamp(meta.get("creationTimestamp"), field="metadata.creationTimestamp") or 0.0,
        deletion_timestamp=parse_timestamp(meta.get("deletionTimestamp"), field="metadata.deletionTimestamp"),
        termination_grace_period_seconds=_int(spec, "terminationGracePeriodSeconds", "spec", 30),
        start_time=parse_timestamp(status.get("startTime"), field="status.startTime"),
    )
