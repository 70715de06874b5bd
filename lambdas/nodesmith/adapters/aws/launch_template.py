"""Launch templates: user data (AL2023's nodeadm here; the others in :mod:`~nodesmith.adapters.aws.bootstrap`), IMDSv2,
block devices, profile, security groups.

One launch template per distinct content (node class x AMI x capacity type x node labels/taints):
its name is ``nodesmith/<cluster>/<sha256 of the template data, 16 hex>``, so equal requests share
a template and :meth:`LaunchTemplates.ensure` is idempotent (an existing template is reused, a
concurrent create is tolerated). Semantics follow Karpenter ``pkg/providers/launchtemplate`` and
``pkg/providers/amifamily/bootstrap/nodeadm.go``:

* user data is a MIME multi-part archive; the node class's own ``userData`` parts come first, then
  a ``NodeConfig`` (``node.eks.aws/v1alpha1``) with cluster name, API endpoint, CA bundle and service
  CIDR, the kubelet configuration (``maxPods``, ``registerWithTaints`` for the NodeClaim's taints
  and startup taints, and the EC2NodeClass ``kubelet`` fields), the ``--node-labels`` flag and, with
  ``instanceStorePolicy: RAID0``, the local storage strategy;
* labels in the ``kubernetes.io`` / ``k8s.io`` domains are left out of ``--node-labels`` (the
  NodeRestriction admission plugin rejects a kubelet that sets them);
* metadata options default to IMDSv2 required, hop limit 1, IPv6 endpoint disabled, instance tags off;
* ``cpuOptions.nestedVirtualization`` becomes the template's ``CpuOptions``;
* the primary network interface carries ``associatePublicIPAddress``, ``ipPrefixCount`` and ``connectionTracking``
  when the EC2NodeClass sets them;
* block devices default to the AMI family's (AL2023: a 20Gi gp3 encrypted root volume on ``/dev/xvda``).
"""

from __future__ import annotations

import base64
import email
import hashlib
import json
import logging
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import yaml

from nodesmith.adapters.aws.nodeclass_spec import block_device_mappings, field_value
from nodesmith.core.model import CAPACITY_TYPE_SPOT, Taint
from nodesmith.core.resources import parse_quantity

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = [
    "BOUNDARY",
    "JoinCluster",
    "LaunchTemplateSpec",
    "LaunchTemplates",
    "launch_template_data",
    "launch_template_name",
    "node_labels",
    "render_user_data",
]

LOG = logging.getLogger(__name__)

BOUNDARY = "//"
NODECONFIG_CONTENT_TYPE = "application/node.eks.aws"
SHELL_CONTENT_TYPE = 'text/x-shellscript; charset="us-ascii"'
_RESTRICTED_DOMAINS = ("kubernetes.io", "k8s.io")
_DEFAULT_METADATA = {
    "HttpEndpoint": "enabled",
    "HttpProtocolIpv6": "disabled",
    "HttpPutResponseHopLimit": 1,
    "HttpTokens": "required",
    "InstanceMetadataTags": "disabled",
}


def _restricted(label: str) -> bool:
    domain = label.split("/", 1)[0] if "/" in label else ""
    return any(domain == d or domain.endswith("." + d) for d in _RESTRICTED_DOMAINS)


def node_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """Labels the kubelet may register itself with: everything outside ``kubernetes.io`` / ``k8s.io``.

    Karpenter ``amifamily.RejectForbiddenLabels``; the kube-controller/cloud-controller set the
    well-known ones (zone, instance type, arch) on their own.
    """
    return {k: v for k, v in sorted(labels.items()) if not _restricted(k)}


def _taint_json(taint: Taint) -> dict[str, str]:
    out = {"key": taint.key, "effect": taint.effect}
    if taint.value:
        out["value"] = taint.value
    return out


def _custom_parts(user_data: str) -> list[tuple[str, str]]:
    """The node class's ``userData`` as MIME parts: a MIME archive is split, YAML becomes a NodeConfig
    part, anything else a shell script (Karpenter ``Nodeadm.parseUserData``)."""
    text = user_data.strip()
    if not text:
        return []
    if text.startswith(("MIME-Version:", "Content-Type:")):
        message = email.message_from_string(text)
        parts = []
        for part in message.walk():
            if part.is_multipart():
                continue
            payload = part.get_payload(decode=True)
            content = payload.decode() if isinstance(payload, bytes) else str(part.get_payload())
            parts.append((part.get("Content-Type", SHELL_CONTENT_TYPE), content))
        return parts
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError:
        loaded = None
    if isinstance(loaded, dict):
        return [(NODECONFIG_CONTENT_TYPE, user_data)]
    return [(SHELL_CONTENT_TYPE, user_data)]


@dataclass(frozen=True, slots=True)
class JoinCluster:
    """What a node needs to join the EKS cluster (nodeadm's ``NodeConfig`` ``spec.cluster``, Bottlerocket's
    ``settings.kubernetes``).

    ``name`` is the EKS cluster name, ``endpoint`` the API server URL, ``ca`` the base64 CA bundle as EKS
    DescribeCluster returns it (``certificateAuthority.data``), ``cidr`` the service IPv4 CIDR
    (``kubernetesNetworkConfig.serviceIpv4Cidr``). Source: ``node.eks.aws/v1alpha1`` ``NodeConfig``
    (awslabs/amazon-eks-ami nodeadm) and Karpenter ``pkg/providers/amifamily/bootstrap/nodeadm.go``.
    """

    name: str
    endpoint: str
    ca: str
    cidr: str


def render_user_data(
    cluster: JoinCluster,
    *,
    labels: Mapping[str, str],
    taints: Sequence[Taint] = (),
    kubelet: Mapping[str, Any] | None = None,
    max_pods: int | None = None,
    custom_user_data: str | None = None,
    instance_store_policy: str | None = None,
) -> str:
    """AL2023 user data (plain text MIME multi-part, boundary ``//``) for nodeadm.

    ``cluster`` says which cluster the node joins; ``labels`` and ``taints`` are registered by the kubelet;
    ``kubelet`` is the EC2NodeClass ``spec.kubelet`` in Karpenter JSON; ``max_pods`` the pods capacity to
    register (overrides ``kubelet.maxPods``); ``custom_user_data`` the EC2NodeClass ``spec.userData``, whose
    parts come first; ``instance_store_policy`` ``RAID0`` has nodeadm assemble the local NVMe disks into the
    node's ephemeral storage (``spec.instance.localStorage.strategy``), which the catalogue counts.
    Raises ``ValueError`` when ``cluster.ca`` is not base64.
    """
    if cluster.ca:
        try:
            base64.b64decode(cluster.ca, validate=True)
        except ValueError as exc:
            raise ValueError(f"cluster CA bundle is not base64: {exc}") from exc
    # AL2023 passes the EC2NodeClass kubelet map through as is (Karpenter v1.14
    # SupportsArbitraryKubeletConfig); an unevaluated maxPods CEL expression is left out.
    kubelet_config = {k: v for k, v in (kubelet or {}).items() if v not in (None, {}, [])}
    if not isinstance(kubelet_config.get("maxPods", 0), int):
        kubelet_config.pop("maxPods")
    if max_pods is not None:
        kubelet_config["maxPods"] = max_pods
    kubelet_config["registerWithTaints"] = [_taint_json(t) for t in taints]
    kubelet_spec: dict[str, Any] = {"config": kubelet_config}
    allowed = node_labels(labels)
    if allowed:
        kubelet_spec["flags"] = ["--node-labels=" + ",".join(f"{k}={v}" for k, v in allowed.items())]
    node_config: dict[str, Any] = {
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": {
            "cluster": {
                "name": cluster.name,
                "apiServerEndpoint": cluster.endpoint,
                "certificateAuthority": cluster.ca,
                "cidr": cluster.cidr,
            },
            "kubelet": kubelet_spec,
        },
    }
    if instance_store_policy == "RAID0":
        node_config["spec"]["instance"] = {"localStorage": {"strategy": "RAID0"}}
    document = "# Nodesmith generated NodeConfig\n" + yaml.safe_dump(node_config, sort_keys=True)
    parts = [*_custom_parts(custom_user_data or ""), (NODECONFIG_CONTENT_TYPE, document)]
    lines = ["MIME-Version: 1.0", f'Content-Type: multipart/mixed; boundary="{BOUNDARY}"', ""]
    for content_type, content in parts:
        lines += [f"--{BOUNDARY}", f"Content-Type: {content_type}", "", content.rstrip("\n"), ""]
    lines.append(f"--{BOUNDARY}--")
    return "\n".join(lines) + "\n"


def _ebs(ebs: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if (size := field_value(ebs, "volumeSize")) is not None:
        out["VolumeSize"] = max(1, -(-parse_quantity(size, resource="ephemeral-storage") // 2**30))  # GiB, round up
    for src, dst in (
        ("volumeType", "VolumeType"),
        ("iops", "Iops"),
        ("throughput", "Throughput"),
        ("kmsKeyID", "KmsKeyId"),
        ("snapshotID", "SnapshotId"),
        ("encrypted", "Encrypted"),
        ("deleteOnTermination", "DeleteOnTermination"),
        ("volumeInitializationRate", "VolumeInitializationRate"),
    ):
        value = field_value(ebs, src)
        if value is not None:
            out[dst] = value
    return out


def _block_devices(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    out = []
    for mapping in block_device_mappings(spec):
        item: dict[str, Any] = {"DeviceName": field_value(mapping, "deviceName") or "/dev/xvda"}
        if ebs := field_value(mapping, "ebs"):
            item["Ebs"] = _ebs(ebs)
        out.append(item)
    return out


def _metadata_options(spec: Mapping[str, Any]) -> dict[str, Any]:
    options = dict(_DEFAULT_METADATA)
    given = field_value(spec, "metadataOptions") or {}
    for src, dst in (
        ("httpEndpoint", "HttpEndpoint"),
        ("httpProtocolIPv6", "HttpProtocolIpv6"),
        ("httpPutResponseHopLimit", "HttpPutResponseHopLimit"),
        ("httpTokens", "HttpTokens"),
    ):
        value = field_value(given, src)
        if value is not None:
            options[dst] = value
    return options


@dataclass(frozen=True, slots=True)
class LaunchTemplateSpec:
    """What goes into one launch template.

    ``spec`` is the EC2NodeClass spec in Karpenter JSON; ``user_data`` the plain-text MIME user data
    (base64-encoded when sent); ``tags`` tag the template and the network interfaces (and spot
    requests for spot). ``reservation_id`` (with ``reservation_type`` ``default`` | ``capacity-block``) makes the
    template launch only into that capacity reservation; without one, ``open_reservations`` False keeps the
    instance out of open ODCRs (Karpenter ``[aws]:pkg/providers/launchtemplate/types.go`` with ``ReservedCapacity``).
    ``tenancy`` ``dedicated`` puts the instance on single-tenant hardware (``Placement.Tenancy``).
    """

    cluster_name: str
    nodeclass_name: str
    image_id: str
    instance_profile: str
    security_group_ids: tuple[str, ...]
    user_data: str
    capacity_type: str
    spec: Mapping[str, Any] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)
    reservation_id: str = ""
    reservation_type: str = ""
    open_reservations: bool = True
    tenancy: str = "default"


def launch_template_data(spec: LaunchTemplateSpec) -> dict[str, Any]:
    """The EC2 ``RequestLaunchTemplateData`` for ``spec`` (CreateLaunchTemplate shape)."""
    tag_list = [{"Key": k, "Value": v} for k, v in sorted(spec.tags.items())]
    data_tags = [{"ResourceType": "network-interface", "Tags": tag_list}]
    if spec.capacity_type == CAPACITY_TYPE_SPOT:
        data_tags.append({"ResourceType": "spot-instances-request", "Tags": tag_list})
    data: dict[str, Any] = {
        "ImageId": spec.image_id,
        "UserData": base64.b64encode(spec.user_data.encode()).decode(),
        "IamInstanceProfile": {"Name": spec.instance_profile},
        "MetadataOptions": _metadata_options(spec.spec),
        "Monitoring": {"Enabled": bool(field_value(spec.spec, "detailedMonitoring"))},
        "TagSpecifications": data_tags,
    }
    if devices := _block_devices(spec.spec):  # none for a Custom AMI: the image's own
        data["BlockDeviceMappings"] = devices
    if spec.tenancy != "default":
        data["Placement"] = {"Tenancy": spec.tenancy}
    if nested := field_value(field_value(spec.spec, "cpuOptions") or {}, "nestedVirtualization"):
        data["CpuOptions"] = {"NestedVirtualization": str(nested)}
    if spec.reservation_id:
        data["CapacityReservationSpecification"] = {
            "CapacityReservationPreference": "capacity-reservations-only",
            "CapacityReservationTarget": {"CapacityReservationId": spec.reservation_id},
        }
        if spec.reservation_type == "capacity-block":
            data["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
    elif not spec.open_reservations:
        data["CapacityReservationSpecification"] = {"CapacityReservationPreference": "none"}
    interface = _primary_interface(spec)
    if interface is None:
        data["SecurityGroupIds"] = list(spec.security_group_ids)
    else:
        data["NetworkInterfaces"] = [interface]
    return data


def _primary_interface(spec: LaunchTemplateSpec) -> dict[str, Any] | None:
    """The primary network interface, when the EC2NodeClass configures it (Karpenter
    ``generateNetworkInterfaces`` for an IPv4 cluster): ``associatePublicIPAddress``, ``ipPrefixCount`` (IPv4
    prefixes assigned at launch) and ``connectionTracking`` (idle timeouts, seconds); None when it sets none of
    them, so the template gives its security groups alone."""
    public_ip = field_value(spec.spec, "associatePublicIPAddress")
    prefixes = field_value(spec.spec, "ipPrefixCount")
    tracking = {
        dst: int(value)
        for src, dst in (
            ("tcpEstablishedTimeout", "TcpEstablishedTimeout"),
            ("udpStreamTimeout", "UdpStreamTimeout"),
            ("udpTimeout", "UdpTimeout"),
        )
        if (value := field_value(field_value(spec.spec, "connectionTracking") or {}, src)) is not None
    }
    if public_ip is None and prefixes is None and not tracking:
        return None
    interface: dict[str, Any] = {"DeviceIndex": 0, "Groups": list(spec.security_group_ids)}
    if public_ip is not None:
        interface["AssociatePublicIpAddress"] = bool(public_ip)
    if prefixes is not None:
        interface["Ipv4PrefixCount"] = int(prefixes)
    if tracking:
        interface["ConnectionTrackingSpecification"] = tracking
    return interface


def launch_template_name(*, cluster_name: str, data: Mapping[str, Any]) -> str:
    """``nodesmith/<cluster>/<16 hex of sha256(template data)>``: equal content, equal name."""
    digest = hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]
    return f"nodesmith/{cluster_name}/{digest}"


def _code(exc: Exception) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


class LaunchTemplates:
    """Ensure launch templates exist (boto3 EC2 client ``ec2``); names known to exist are cached."""

    def __init__(self, *, ec2: Any) -> None:
        self._ec2 = ec2
        self._known: set[str] = set()
        self._lock = threading.Lock()

    def ensure(self, *, spec: LaunchTemplateSpec) -> str:
        """Create the template for ``spec`` unless one with its name exists; returns the name.

        Raises botocore ``ClientError`` for failures other than "already exists".
        """
        data = launch_template_data(spec)
        name = launch_template_name(cluster_name=spec.cluster_name, data=data)
        if name in self._known:
            return name
        with self._lock:
            if name in self._known:
                return name
            if not self._exists(name):
                tags = [{"Key": k, "Value": v} for k, v in sorted(spec.tags.items())]
                try:
                    self._ec2.create_launch_template(
                        LaunchTemplateName=name,
                        LaunchTemplateData=data,
                        TagSpecifications=[{"ResourceType": "launch-template", "Tags": tags}],
                    )
                    LOG.info("created launch template %s for EC2NodeClass %s", name, spec.nodeclass_name)
                except Exception as exc:
                    if _code(exc) != "InvalidLaunchTemplateName.AlreadyExistsException":
                        raise
            self._known.add(name)
        return name

    def _exists(self, name: str) -> bool:
        try:
            found = self._ec2.describe_launch_templates(LaunchTemplateNames=[name])
        except Exception as exc:
            if _code(exc) in ("InvalidLaunchTemplateName.NotFoundException", "InvalidLaunchTemplateId.NotFound"):
                return False
            raise
        return bool(found.get("LaunchTemplates"))

    def forget(self, *, names: Sequence[str] = ()) -> None:
        """Drop cached names (all when empty) after EC2 said a template was not found."""
        with self._lock:
            if names:
                self._known.difference_update(names)
            else:
                self._known.clear()

    def delete_for_nodeclass(self, *, cluster_name: str, nodeclass_name: str) -> list[str]:
        """Delete the launch templates of the EC2NodeClass ``nodeclass_name``: named ``nodesmith/<cluster_name>/...``
        and tagged ``kubernetes.io/cluster/<cluster_name>=owned`` and ``karpenter.k8s.aws/ec2nodeclass=<name>``, the
        tags Karpenter's controller policy requires of a template it deletes (``AllowScopedDeletion``); returns the
        names deleted. A template already gone is no error; raises botocore's errors for the others."""
        return self._delete(
            cluster_name=cluster_name,
            tags={f"kubernetes.io/cluster/{cluster_name}": "owned", "karpenter.k8s.aws/ec2nodeclass": nodeclass_name},
        )

    def delete_all(self, *, cluster_name: str) -> list[str]:
        """Delete every launch template named ``nodesmith/<cluster_name>/...``; returns their names."""
        return self._delete(cluster_name=cluster_name, tags={})

    def _delete(self, *, cluster_name: str, tags: Mapping[str, str]) -> list[str]:
        """Delete the templates named ``nodesmith/<cluster_name>/...`` carrying every tag of ``tags``; returns the names
        deleted and forgets the cached names. A template already gone is no error."""
        deleted = []
        paginator = self._ec2.get_paginator("describe_launch_templates")
        for page in paginator.paginate(
            Filters=[{"Name": "launch-template-name", "Values": [f"nodesmith/{cluster_name}/*"]}]
        ):
            for lt in page.get("LaunchTemplates", []):
                have = {t["Key"]: t["Value"] for t in lt.get("Tags") or []}
                if any(have.get(k) != v for k, v in tags.items()):
                    continue
                try:
                    self._ec2.delete_launch_template(LaunchTemplateId=lt["LaunchTemplateId"])
                    deleted.append(lt["LaunchTemplateName"])
                except Exception as exc:
                    if _code(exc) not in (
                        "InvalidLaunchTemplateId.NotFound",
                        "InvalidLaunchTemplateName.NotFoundException",
                    ):
                        raise
        self.forget()
        return deleted
