"""A node's user data, by the EC2NodeClass's AMI family (Karpenter ``pkg/providers/amifamily/bootstrap``).

* ``AL2023``: a MIME archive ending in nodeadm's ``NodeConfig``
  (:func:`~nodesmith.adapters.aws.launch_template.render_user_data`);
* ``Bottlerocket``: Bottlerocket's settings TOML (:func:`render_bottlerocket_user_data`,
  ``bootstrap/bottlerocket.go``): the EC2NodeClass's ``userData`` TOML with the ``settings.kubernetes`` keys that
  join the cluster and carry the NodeClaim's labels, taints and kubelet settings written over it;
* ``Custom``: the EC2NodeClass's ``userData`` as given (``bootstrap/custom.go``): the image joins by itself.

The other families Karpenter knows (``AL2``, ``Windows2019/2022/2025``) are refused
(:class:`UnsupportedAmiFamilyError`): their bootstrap scripts are not written here, and a node launched without
one never joins.
"""

from __future__ import annotations

import logging
import tomllib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import tomli_w

from nodesmith.adapters.aws.launch_template import JoinCluster, node_labels, render_user_data
from nodesmith.core.api.kubelet import PARSED_KUBELET_FIELDS

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from nodesmith.core.model import Taint

__all__ = [
    "MANAGED_KUBELET_FIELDS",
    "SUPPORTED_AMI_FAMILIES",
    "NodeUserData",
    "UnsupportedAmiFamilyError",
    "node_user_data",
    "render_bottlerocket_user_data",
    "unsupported_kubelet",
]

LOG = logging.getLogger(__name__)

SUPPORTED_AMI_FAMILIES: Final = ("AL2023", "Bottlerocket", "Custom")
"""The AMI families whose nodes Nodesmith can bootstrap."""

_BOTTLEROCKET_KUBERNETES_KEYS: Final = frozenset(
    {
        "api-server",
        "allowed-unsafe-sysctls",
        "cloud-provider",
        "cluster-certificate",
        "cluster-dns-ip",
        "cluster-domain",
        "cluster-name",
        "container-log-max-files",
        "container-log-max-size",
        "container-log-max-workers",
        "container-log-monitor-interval",
        "cpu-cfs-quota-enforced",
        "cpu-manager-policy",
        "cpu-manager-policy-options",
        "cpu-manager-reconcile-period",
        "credential-providers",
        "device-ownership-from-security-context",
        "event-burst",
        "event-qps",
        "eviction-hard",
        "eviction-max-pod-grace-period",
        "eviction-soft",
        "eviction-soft-grace-period",
        "hostname-override-source",
        "ids-per-pod",
        "image-gc-high-threshold-percent",
        "image-gc-low-threshold-percent",
        "kube-api-burst",
        "kube-api-qps",
        "kube-reserved",
        "log-level",
        "max-pods",
        "memory-manager-policy",
        "memory-manager-reserved-memory",
        "node-labels",
        "node-taints",
        "pod-pids-limit",
        "registry-burst",
        "registry-qps",
        "seccomp-default",
        "server-tls-bootstrap",
        "shutdown-grace-period",
        "shutdown-grace-period-for-critical-pods",
        "single-process-oom-kill",
        "static-pods",
        "system-reserved",
        "topology-manager-policy",
        "topology-manager-policy-options",
        "topology-manager-scope",
    }
)
"""The ``settings.kubernetes`` keys Karpenter's ``BottlerocketKubernetes`` knows; others in ``userData`` are dropped
(and logged), as Karpenter drops them when it writes the settings back."""

MANAGED_KUBELET_FIELDS: Final = frozenset(PARSED_KUBELET_FIELDS)
"""The ``kubelet`` fields Karpenter maps into every family's bootstrap (``ParsedKubeletConfig``); AL2023 also
passes the others through."""

_RAID0_DIRS: Final = ("/var/lib/containerd", "/var/lib/kubelet", "/var/log/pods")


class UnsupportedAmiFamilyError(ValueError):
    """The EC2NodeClass's AMI family has no bootstrap here (the message names it and the supported ones)."""


@dataclass(frozen=True, slots=True)
class NodeUserData:
    """What a node's user data tells it, whatever the AMI family.

    ``cluster``: the EKS cluster to join. ``labels`` and ``taints``: what the kubelet registers the Node with (the
    NodeClaim's labels, taints and startup taints; labels in the ``kubernetes.io`` and ``k8s.io`` domains are left
    out, as the NodeRestriction admission plugin refuses them). ``kubelet``: the EC2NodeClass ``spec.kubelet`` as
    Karpenter JSON. ``custom_user_data``: the EC2NodeClass ``spec.userData``. ``instance_store_policy``:
    ``spec.instanceStorePolicy`` (``RAID0``: the local NVMe disks become the node's ephemeral storage).
    """

    cluster: JoinCluster
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: Sequence[Taint] = ()
    kubelet: Mapping[str, Any] | None = None
    custom_user_data: str | None = None
    instance_store_policy: str | None = None


def node_user_data(ami_family: str, bootstrap: NodeUserData) -> str:
    """The plain-text user data a node of ``ami_family`` (the EC2NodeClass's effective family) boots with.

    Raises :class:`UnsupportedAmiFamilyError` for a family outside :data:`SUPPORTED_AMI_FAMILIES`, and
    ``ValueError`` when ``userData`` cannot be read as the family needs it (Bottlerocket: TOML) or the CA bundle
    is not base64.
    """
    if ami_family == "AL2023":
        return render_user_data(
            bootstrap.cluster,
            labels=bootstrap.labels,
            taints=bootstrap.taints,
            kubelet=bootstrap.kubelet,
            custom_user_data=bootstrap.custom_user_data,
            instance_store_policy=bootstrap.instance_store_policy,
        )
    if ami_family == "Bottlerocket":
        return render_bottlerocket_user_data(bootstrap)
    if ami_family == "Custom":
        return bootstrap.custom_user_data or ""
    raise UnsupportedAmiFamilyError(
        f"amiFamily {ami_family!r}: Nodesmith bootstraps {', '.join(SUPPORTED_AMI_FAMILIES)} nodes only"
    )


def render_bottlerocket_user_data(bootstrap: NodeUserData) -> str:
    """Bottlerocket user data (TOML), as Karpenter's ``Bottlerocket.Script`` writes it.

    The ``userData`` TOML is kept, except that in ``settings.kubernetes``: ``cluster-name``, ``api-server`` and
    ``cluster-certificate`` are the cluster's; ``node-labels`` gain the NodeClaim's (which win); ``node-taints``
    are exactly the NodeClaim's taints and startup taints (``key = ["value:Effect", ...]``); the EC2NodeClass
    ``kubelet`` fields Bottlerocket takes replace theirs (``maxPods`` when an integer, ``clusterDNS[0]``, the
    reserved resources, eviction thresholds and grace periods, image GC thresholds as strings,
    ``cpuCFSQuota``); keys Bottlerocket's Kubernetes settings lack are dropped. ``podsPerCore`` is not passed
    (Bottlerocket has no such setting; the catalogue ignores it too). With ``instanceStorePolicy: RAID0`` a
    bootstrap command assembles the NVMe disks and binds the kubelet's and containerd's directories to them.
    Raises ``ValueError`` when ``userData`` is not TOML, or its ``settings``, ``settings.kubernetes`` or
    ``node-labels`` is not a table.
    """
    try:
        document: dict[str, Any] = tomllib.loads(bootstrap.custom_user_data or "")
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"userData is not Bottlerocket TOML: {exc}") from exc
    settings = document.setdefault("settings", {})
    if not isinstance(settings, dict) or not isinstance(settings.get("kubernetes", {}), dict):
        raise ValueError("userData: settings and settings.kubernetes must be TOML tables")
    given: dict[str, Any] = settings.get("kubernetes", {})
    if dropped := sorted(set(given) - _BOTTLEROCKET_KUBERNETES_KEYS):
        LOG.warning("userData: dropping settings.kubernetes keys Bottlerocket does not know: %s", ", ".join(dropped))
    kubernetes = {k: v for k, v in given.items() if k in _BOTTLEROCKET_KUBERNETES_KEYS}
    cluster = bootstrap.cluster
    kubernetes["cluster-name"] = cluster.name
    kubernetes["api-server"] = cluster.endpoint
    if cluster.ca:
        kubernetes["cluster-certificate"] = cluster.ca
    given_labels = kubernetes.get("node-labels") or {}
    if not isinstance(given_labels, dict):
        raise ValueError("userData: settings.kubernetes.node-labels must be a TOML table")
    labels = {**given_labels, **node_labels(bootstrap.labels)}
    if labels:
        kubernetes["node-labels"] = labels
    kubernetes.pop("node-taints", None)
    taints: dict[str, list[str]] = {}
    for taint in bootstrap.taints:
        taints.setdefault(taint.key, []).append(f"{taint.value}:{taint.effect}")
    if taints:
        kubernetes["node-taints"] = taints
    kubernetes.update(_bottlerocket_kubelet(bootstrap.kubelet or {}))
    settings["kubernetes"] = kubernetes
    if bootstrap.instance_store_policy == "RAID0":
        commands = settings.setdefault("bootstrap-commands", {})
        commands["000-mount-instance-storage"] = {
            "commands": [
                ["apiclient", "ephemeral-storage", "init"],
                ["apiclient", "ephemeral-storage", "bind", "--dirs", *_RAID0_DIRS],
            ],
            "mode": "always",
            "essential": True,
        }
    return tomli_w.dumps(document)


def _bottlerocket_kubelet(kubelet: Mapping[str, Any]) -> dict[str, Any]:
    """The ``settings.kubernetes`` keys the EC2NodeClass ``kubelet`` (Karpenter JSON) sets on Bottlerocket."""
    out: dict[str, Any] = {}
    max_pods = kubelet.get("maxPods")
    if isinstance(max_pods, int) and not isinstance(max_pods, bool):
        out["max-pods"] = max_pods
    if dns := kubelet.get("clusterDNS"):
        out["cluster-dns-ip"] = str(dns[0])
    for source, key in (
        ("systemReserved", "system-reserved"),
        ("kubeReserved", "kube-reserved"),
        ("evictionHard", "eviction-hard"),
        ("evictionSoft", "eviction-soft"),
        ("evictionSoftGracePeriod", "eviction-soft-grace-period"),
    ):
        if (value := kubelet.get(source)) is not None:
            out[key] = {str(k): str(v) for k, v in dict(value).items()}
    if (grace := kubelet.get("evictionMaxPodGracePeriod")) is not None:
        out["eviction-max-pod-grace-period"] = int(grace)
    for source, key in (
        ("imageGCHighThresholdPercent", "image-gc-high-threshold-percent"),
        ("imageGCLowThresholdPercent", "image-gc-low-threshold-percent"),
    ):
        if (percent := kubelet.get(source)) is not None:
            out[key] = str(int(percent))
    if (quota := kubelet.get("cpuCFSQuota")) is not None:
        out["cpu-cfs-quota-enforced"] = bool(quota)
    return out


def unsupported_kubelet(ami_family: str, kubelet: Mapping[str, Any] | None) -> str | None:
    """Why the EC2NodeClass ``kubelet`` (Karpenter JSON) cannot be applied by ``ami_family``, or None.

    Karpenter's ``validateKubeletFieldsSupported`` (``[aws]:pkg/controllers/nodeclass/validation.go``): AL2023 passes
    every field through and a Custom AMI ignores them all; any other family applies only
    :data:`MANAGED_KUBELET_FIELDS`, Bottlerocket without ``podsPerCore``, and a single ``clusterDNS`` entry, so a
    node would silently launch without the rest.
    """
    if not kubelet or ami_family in ("AL2023", "Custom"):
        return None
    messages = []
    dropped = set(kubelet) - MANAGED_KUBELET_FIELDS
    if ami_family == "Bottlerocket" and kubelet.get("podsPerCore") is not None:
        dropped.add("podsPerCore")
    if dropped:
        messages.append(
            f"spec.kubelet has fields not applied by the {ami_family} AMI family that would be silently dropped: "
            + ", ".join(sorted(dropped))
        )
    if len(kubelet.get("clusterDNS") or ()) > 1:
        messages.append(
            f"spec.kubelet.clusterDNS: the {ami_family} AMI family doesn't accept multiple entries, only one, "
            f"but {len(kubelet['clusterDNS'])} were set"
        )
    return "; ".join(messages) or None
