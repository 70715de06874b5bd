"""Instance types from EC2 ``DescribeInstanceTypes`` data: labels, capacity and overhead, as Karpenter computes them.

Pure: the caller passes one ``InstanceTypeInfo`` item (the dict boto3 returns), the offerings it
built (zones x capacity types with USD/hour prices) and the EC2NodeClass kubelet settings; this
module returns a :class:`~nodesmith.core.model.InstanceType`.

Every rule here follows Karpenter's AWS provider, ``pkg/providers/instancetype/types.go``
(``computeRequirements``, ``computeCapacity``, ``memory``, ``pods``, ``ENILimitedPods``,
``kubeReservedResources``, ``evictionThreshold``) for the AL2023 AMI family, and for Bottlerocket where its
feature flags differ (:meth:`KubeletSettings.from_kubelet`):

* ``cpu`` = ``VCpuInfo.DefaultVCpus`` (as millicores).
* ``memory`` = ``MemoryInfo.SizeInMiB`` minus 64 MiB on arm64 (Graviton CMA), minus
  ``ceil(MiB x vm_memory_overhead_percent)`` MiB (Karpenter's ``--vm-memory-overhead-percent``,
  default 7.5 %), in bytes.
* ``pods`` = ``maxPods`` if set, else ENI-limited ``(ENIs - reserved ENIs) x (IPv4 per ENI - 1) + 2``
  (https://github.com/awslabs/amazon-eks-ami ``eni-max-pods.txt``); then at most
  ``podsPerCore x vCPUs`` when ``podsPerCore`` is set (not on Bottlerocket).
* kube-reserved: cpu 6 % of the first core, 1 % of the second, 0.5 % of cores 3-4, 0.25 % of every
  core above 4 (each band truncated to whole millicores); memory ``11 MiB x pods + 255 MiB`` where,
  as in Karpenter for AL2/AL2023 (``UsesENILimitedMemoryOverhead``), *pods* is the ENI-limited
  count even when ``maxPods`` is set (Bottlerocket: the pods capacity); ephemeral-storage 1 GiB.
  ``kubeReserved`` entries replace the computed ones.
* system-reserved: ``systemReserved`` as given (nothing by default).
* eviction threshold: memory 100 MiB, ephemeral-storage 10 % of the root volume (rounded up);
  ``evictionHard`` ``memory.available`` / ``nodefs.available`` replace them (percentages are of the
  capacity, ``100%`` disables). ``evictionSoft`` is ignored, as in Karpenter.
* ``ephemeral-storage`` = the size of the volume the kubelet's storage is on (EC2NodeClass
  ``blockDeviceMappings``: the root volume, AL2023 ``/dev/xvda`` or Bottlerocket's data volume
  ``/dev/xvdb``, 20 GiB by default), or the total local NVMe size with ``instanceStorePolicy: RAID0``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from nodesmith.core.model import InstanceType, Offering
from nodesmith.core.resources import (
    CPU,
    EPHEMERAL_STORAGE,
    GPU_AMD,
    GPU_NVIDIA,
    MEMORY,
    PODS,
    QuantityError,
    Resources,
    add,
    parse_quantity,
)

__all__ = [
    "DEFAULT_ROOT_VOLUME_BYTES",
    "DEFAULT_VM_MEMORY_OVERHEAD_PERCENT",
    "EFA",
    "HABANA_GAUDI",
    "LABEL_ARCH",
    "LABEL_INSTANCE_TYPE",
    "LABEL_OS",
    "LABEL_REGION",
    "NEURON",
    "NEURON_CORE",
    "InstanceTypeInfoError",
    "KubeletSettings",
    "build_instance_type",
    "capacity",
    "eni_limited_pods",
    "eviction_threshold",
    "kube_reserved",
    "kube_reserved_cpu_millicores",
    "kubernetes_arch",
    "labels",
    "max_pods",
    "memory_capacity_bytes",
]

MIB = 2**20
GIB = 2**30

DEFAULT_VM_MEMORY_OVERHEAD_PERCENT = 0.075
"""Karpenter's ``--vm-memory-overhead-percent`` default: the hypervisor/firmware share of memory."""

DEFAULT_ROOT_VOLUME_BYTES = 20 * GIB
"""AL2023 default root volume (``/dev/xvda``, 20Gi gp3 encrypted), Karpenter ``amifamily.DefaultEBS``."""

NEURON = "aws.amazon.com/neuron"
NEURON_CORE = "aws.amazon.com/neuroncore"
HABANA_GAUDI = "habana.ai/gaudi"
EFA = "vpc.amazonaws.com/efa"

LABEL_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
LABEL_ARCH = "kubernetes.io/arch"
LABEL_OS = "kubernetes.io/os"
LABEL_REGION = "topology.kubernetes.io/region"
_K = "karpenter.k8s.aws/"

_ARCHITECTURES = {"x86_64": "amd64", "arm64": "arm64"}
# Karpenter's instanceTypeScheme: category letters, optional "-<n>tb" (u-6tb1), generation digits.
_TYPE_SCHEME = re.compile(r"(^[a-z]+)(-[0-9]+tb)?([0-9]+).*\.")
# kube-reserved cpu bands (millicores start, end, fraction): Karpenter kubeReservedResources, from
# Bottlerocket's and the EKS AMI's reservation formula.
_CPU_BANDS: tuple[tuple[int, int, Fraction], ...] = (
    (0, 1000, Fraction(6, 100)),
    (1000, 2000, Fraction(1, 100)),
    (2000, 4000, Fraction(5, 1000)),
    (4000, 1 << 31, Fraction(25, 10000)),
)
_MEMORY_AVAILABLE = "memory.available"
_NODEFS_AVAILABLE = "nodefs.available"


class InstanceTypeInfoError(ValueError):
    """A DescribeInstanceTypes item lacks a field the computation needs (the message names it)."""


@dataclass(frozen=True, slots=True)
class KubeletSettings:
    """The EC2NodeClass ``spec.kubelet`` fields that change capacity or overhead.

    ``max_pods`` / ``pods_per_core`` are counts; the three maps hold Kubernetes quantity strings as
    written in the EC2NodeClass (``{"cpu": "100m", "memory": "1Gi"}``, ``{"memory.available": "5%"}``).
    ``eni_limited_memory_overhead``: the AMI family's Karpenter ``UsesENILimitedMemoryOverhead`` flag, whether
    kube-reserved memory counts the ENI-limited pods (AL2023) or the node's pods capacity (Bottlerocket).
    """

    max_pods: int | None = None
    pods_per_core: int | None = None
    system_reserved: Mapping[str, str] = field(default_factory=dict)
    kube_reserved: Mapping[str, str] = field(default_factory=dict)
    eviction_hard: Mapping[str, str] = field(default_factory=dict)
    eni_limited_memory_overhead: bool = True

    def __hash__(self) -> int:
        """Hash by content (the maps are compared as sorted items), so settings can key caches."""
        return hash(
            (
                self.max_pods,
                self.pods_per_core,
                tuple(sorted(self.system_reserved.items())),
                tuple(sorted(self.kube_reserved.items())),
                tuple(sorted(self.eviction_hard.items())),
                self.eni_limited_memory_overhead,
            )
        )

    @classmethod
    def from_kubelet(cls, kubelet: Any, *, ami_family: str = "AL2023") -> KubeletSettings | None:
        """Read the settings from an EC2NodeClass ``spec.kubelet`` model (or a plain dict); None stays None.

        ``ami_family`` is the EC2NodeClass's effective AMI family: for ``Bottlerocket`` (Karpenter's feature flags
        ``PodsPerCoreEnabled`` and ``UsesENILimitedMemoryOverhead`` both false) ``podsPerCore`` is left out, as
        Bottlerocket's settings cannot carry it, and kube-reserved memory counts the node's pods capacity.

        Attribute names are the snake_case ones of ``nodesmith.core.api.ec2nodeclass``
        (``max_pods``, ``pods_per_core``, ``system_reserved``, ``kube_reserved``, ``eviction_hard``);
        a dict may use those or the camelCase JSON names. A ``maxPods`` CEL expression (a string,
        Karpenter's NodeClassCEL gate) is not evaluated here and counts as unset.
        """
        if kubelet is None:
            return None

        def get(snake: str, camel: str) -> Any:
            if isinstance(kubelet, Mapping):
                return kubelet.get(snake, kubelet.get(camel))
            return getattr(kubelet, snake, None)

        def as_map(value: Any) -> dict[str, str]:
            return {str(k): str(v) for k, v in dict(value or {}).items()}

        max_pods = get("max_pods", "maxPods")
        pods_per_core = get("pods_per_core", "podsPerCore")
        bottlerocket = ami_family == "Bottlerocket"
        if bottlerocket:
            pods_per_core = None
        return cls(
            max_pods=max_pods if isinstance(max_pods, int) and not isinstance(max_pods, bool) else None,
            pods_per_core=None if pods_per_core is None else int(pods_per_core),
            system_reserved=as_map(get("system_reserved", "systemReserved")),
            kube_reserved=as_map(get("kube_reserved", "kubeReserved")),
            eviction_hard=as_map(get("eviction_hard", "evictionHard")),
            eni_limited_memory_overhead=not bottlerocket,
        )


def _require(info: Mapping[str, Any], *path: str) -> Any:
    node: Any = info
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            name = info.get("InstanceType", "?") if isinstance(info, Mapping) else "?"
            raise InstanceTypeInfoError(f"instance type {name}: DescribeInstanceTypes item has no {'.'.join(path)}")
        node = node[key]
    return node


def _name(info: Mapping[str, Any]) -> str:
    return str(_require(info, "InstanceType"))


def _vcpus(info: Mapping[str, Any]) -> int:
    return int(_require(info, "VCpuInfo", "DefaultVCpus"))


def _kebab(value: str) -> str:
    """Karpenter ``lowerKabobCase``: lower case, spaces to dashes (``"Radeon Pro V520"`` -> ``radeon-pro-v520``)."""
    return value.lower().replace(" ", "-")


def kubernetes_arch(info: Mapping[str, Any]) -> str:
    """``kubernetes.io/arch`` of a type: the first of its ``SupportedArchitectures`` Kubernetes knows.

    ``x86_64`` -> ``amd64``, ``arm64`` -> ``arm64``. A type with none of them (``x86_64_mac``) keeps
    its EC2 names joined by ``,`` so that no ``amd64``/``arm64`` requirement ever selects it.
    """
    archs = [str(a) for a in (info.get("ProcessorInfo") or {}).get("SupportedArchitectures") or ()]
    for arch in archs:
        if arch in _ARCHITECTURES:
            return _ARCHITECTURES[arch]
    return ",".join(archs) or "unknown"


def eni_limited_pods(info: Mapping[str, Any], *, reserved_enis: int = 0) -> int:
    """Max pods the VPC CNI allows: ``(ENIs - reserved_enis) x (IPv4 addresses per ENI - 1) + 2``.

    ENIs are those of the default network card (the VPC CNI uses only that card), as in Karpenter
    ``ENILimitedPods`` and the EKS AMI ``eni-max-pods.txt``. Returns 0 when no ENI is usable.

    Raises ``InstanceTypeInfoError`` when ``NetworkInfo`` lacks the ENI or address counts.
    """
    network = _require(info, "NetworkInfo")
    cards = network.get("NetworkCards") or []
    default_index = int(network.get("DefaultNetworkCardIndex", 0) or 0)
    card = next((c for c in cards if int(c.get("NetworkCardIndex", 0)) == default_index), None)
    if card is not None and "MaximumNetworkInterfaces" in card:
        enis = int(card["MaximumNetworkInterfaces"])
    else:
        enis = int(_require(info, "NetworkInfo", "MaximumNetworkInterfaces"))
    per_eni = int(_require(info, "NetworkInfo", "Ipv4AddressesPerInterface"))
    usable = max(enis - reserved_enis, 0)
    if usable == 0:
        return 0
    return usable * (per_eni - 1) + 2


def max_pods(info: Mapping[str, Any], *, kubelet: KubeletSettings | None = None, reserved_enis: int = 0) -> int:
    """The node's ``pods`` capacity: ``maxPods`` if set, else ENI-limited; capped by ``podsPerCore x vCPUs``."""
    kubelet = kubelet or KubeletSettings()
    count = kubelet.max_pods if kubelet.max_pods is not None else eni_limited_pods(info, reserved_enis=reserved_enis)
    if kubelet.pods_per_core is not None and kubelet.pods_per_core > 0:
        count = min(kubelet.pods_per_core * _vcpus(info), count)
    return count


def memory_capacity_bytes(
    info: Mapping[str, Any], *, vm_memory_overhead_percent: float = DEFAULT_VM_MEMORY_OVERHEAD_PERCENT
) -> int:
    """Memory Kubernetes will see, in bytes: MiB (- 64 MiB on arm64) - ceil(MiB x overhead percent) MiB."""
    size_mib = int(_require(info, "MemoryInfo", "SizeInMiB"))
    archs = (info.get("ProcessorInfo") or {}).get("SupportedArchitectures") or []
    if archs and archs[0] == "arm64":
        size_mib -= 64
    overhead_mib = math.ceil(size_mib * Fraction(str(vm_memory_overhead_percent)))
    return (size_mib - overhead_mib) * MIB


def kube_reserved_cpu_millicores(vcpus: int) -> int:
    """kube-reserved cpu in millicores for ``vcpus`` cores (6 % / 1 % / 0.5 % / 0.25 % bands).

    1 vCPU -> 60, 2 -> 70, 4 -> 80, 8 -> 90, 96 -> 300.
    """
    millis = vcpus * 1000
    reserved = 0
    for start, end, fraction in _CPU_BANDS:
        if millis >= start:
            span = (end if millis >= end else millis) - start
            reserved += int(span * fraction)
    return reserved


def _parse_map(values: Mapping[str, str], *, where: str) -> Resources:
    out: Resources = {}
    for name, value in values.items():
        try:
            out[name] = parse_quantity(value, resource=name)
        except QuantityError as exc:
            raise QuantityError(f"{where}.{name}: {exc}") from exc
    return out


def kube_reserved(
    info: Mapping[str, Any], *, kubelet: KubeletSettings | None = None, reserved_enis: int = 0
) -> Resources:
    """kube-reserved (cpu millicores, memory bytes, ephemeral-storage bytes), ``kubeReserved`` entries win.

    Memory is ``11 MiB x pods + 255 MiB`` (Karpenter ``NewInstanceType``): *pods* is the ENI-limited count,
    reserved ENIs not deducted, for families with ``UsesENILimitedMemoryOverhead`` (AL2023); otherwise
    (Bottlerocket, ``kubelet.eni_limited_memory_overhead`` false) the node's pods capacity (:func:`max_pods`, with
    ``reserved_enis``).
    """
    if kubelet is None or kubelet.eni_limited_memory_overhead:
        pods = eni_limited_pods(info)
    else:
        pods = max_pods(info, kubelet=kubelet, reserved_enis=reserved_enis)
    reserved: Resources = {
        CPU: kube_reserved_cpu_millicores(_vcpus(info)),
        MEMORY: (11 * pods + 255) * MIB,
        EPHEMERAL_STORAGE: GIB,
    }
    if kubelet and kubelet.kube_reserved:
        reserved.update(_parse_map(kubelet.kube_reserved, where="kubelet.kubeReserved"))
    return reserved


def _signal(value: str, *, capacity: int, where: str) -> int:
    text = value.strip()
    if text.endswith("%"):
        try:
            percent = Fraction(text[:-1].strip())
        except ValueError as exc:
            raise QuantityError(f"{where}: {value!r} is not a percentage") from exc
        if percent == 100:  # kubelet: 100% disables the threshold
            percent = Fraction(0)
        return math.ceil(Fraction(capacity) / 100 * percent)
    try:
        return parse_quantity(text, resource=MEMORY)
    except QuantityError as exc:
        raise QuantityError(f"{where}: {exc}") from exc


def eviction_threshold(*, memory_bytes: int, storage_bytes: int, kubelet: KubeletSettings | None = None) -> Resources:
    """Hard eviction thresholds (bytes): memory 100Mi and 10 % of ephemeral storage unless ``evictionHard`` says.

    ``memory_bytes`` / ``storage_bytes`` are the node's capacity (percentages apply to them).
    """
    threshold: Resources = {MEMORY: 100 * MIB, EPHEMERAL_STORAGE: math.ceil(Fraction(storage_bytes) / 100 * 10)}
    hard = kubelet.eviction_hard if kubelet else {}
    if _MEMORY_AVAILABLE in hard:
        threshold[MEMORY] = _signal(
            hard[_MEMORY_AVAILABLE], capacity=memory_bytes, where=f"kubelet.evictionHard.{_MEMORY_AVAILABLE}"
        )
    if _NODEFS_AVAILABLE in hard:
        threshold[EPHEMERAL_STORAGE] = _signal(
            hard[_NODEFS_AVAILABLE], capacity=storage_bytes, where=f"kubelet.evictionHard.{_NODEFS_AVAILABLE}"
        )
    return threshold


def _accelerator_counts(info: Mapping[str, Any]) -> Resources:
    out: Resources = {}
    gpus = (info.get("GpuInfo") or {}).get("Gpus") or []
    for gpu in gpus:
        manufacturer = str(gpu.get("Manufacturer", ""))
        resource = {"NVIDIA": GPU_NVIDIA, "AMD": GPU_AMD, "Habana": HABANA_GAUDI}.get(manufacturer)
        if resource:
            out[resource] = out.get(resource, 0) + int(gpu.get("Count", 0))
    devices = (info.get("NeuronInfo") or {}).get("NeuronDevices") or []
    if devices:
        out[NEURON] = sum(int(d.get("Count", 0)) for d in devices)
        first = devices[0]
        out[NEURON_CORE] = int(first.get("Count", 0)) * int((first.get("CoreInfo") or {}).get("Count", 0))
    efa = ((info.get("NetworkInfo") or {}).get("EfaInfo") or {}).get("MaximumEfaInterfaces")
    if efa:
        out[EFA] = int(efa)
    return {k: v for k, v in out.items() if v > 0}


def capacity(
    info: Mapping[str, Any],
    *,
    kubelet: KubeletSettings | None = None,
    root_volume_bytes: int = DEFAULT_ROOT_VOLUME_BYTES,
    instance_store_policy: str | None = None,
    vm_memory_overhead_percent: float = DEFAULT_VM_MEMORY_OVERHEAD_PERCENT,
    reserved_enis: int = 0,
) -> Resources:
    """Raw node capacity: cpu millicores, memory/ephemeral-storage bytes, pods and accelerator counts.

    Accelerators (``nvidia.com/gpu``, ``amd.com/gpu``, ``aws.amazon.com/neuron``/``neuroncore``,
    ``habana.ai/gaudi``, ``vpc.amazonaws.com/efa``) appear only when the type has them.
    """
    storage = root_volume_bytes
    nvme_gb = (info.get("InstanceStorageInfo") or {}).get("TotalSizeInGB")
    if instance_store_policy == "RAID0" and nvme_gb:
        storage = int(nvme_gb) * 10**9
    out: Resources = {
        CPU: _vcpus(info) * 1000,
        MEMORY: memory_capacity_bytes(info, vm_memory_overhead_percent=vm_memory_overhead_percent),
        EPHEMERAL_STORAGE: storage,
        PODS: max_pods(info, kubelet=kubelet, reserved_enis=reserved_enis),
    }
    out.update(_accelerator_counts(info))
    return out


def _accelerator_labels(info: Mapping[str, Any]) -> dict[str, str]:
    """GPU labels (only with exactly one GPU model) and Inferentia/Trainium accelerator labels."""
    out: dict[str, str] = {}
    gpus = (info.get("GpuInfo") or {}).get("Gpus") or []
    if len(gpus) == 1:
        gpu = gpus[0]
        out[_K + "instance-gpu-name"] = _kebab(str(gpu.get("Name", "")))
        out[_K + "instance-gpu-manufacturer"] = _kebab(str(gpu.get("Manufacturer", "")))
        out[_K + "instance-gpu-count"] = str(int(gpu.get("Count", 0)))
        out[_K + "instance-gpu-memory"] = str(int((gpu.get("MemoryInfo") or {}).get("SizeInMiB", 0)))
    accelerators = (info.get("InferenceAcceleratorInfo") or {}).get("Accelerators") or []
    neuron = (info.get("NeuronInfo") or {}).get("NeuronDevices") or []
    if len(accelerators) == 1 and not info.get("NeuronInfo"):
        acc = accelerators[0]
        out[_K + "instance-accelerator-name"] = _kebab(str(acc.get("Name", "")))
        out[_K + "instance-accelerator-manufacturer"] = _kebab(str(acc.get("Manufacturer", "")))
        out[_K + "instance-accelerator-count"] = str(int(acc.get("Count", 0)))
    if len(neuron) == 1:
        device = neuron[0]
        out[_K + "instance-accelerator-name"] = _kebab(str(device.get("Name", "")))
        out[_K + "instance-accelerator-manufacturer"] = "aws"
        out[_K + "instance-accelerator-count"] = str(int(device.get("Count", 0)))
    return out


def labels(info: Mapping[str, Any], *, region: str = "") -> dict[str, str]:
    """Karpenter's well-known labels for the type that do not depend on the offering.

    Zone, zone id and capacity type vary per offering and are not included. Labels Karpenter leaves
    unset for a type (GPU labels on a type with no or several GPU models, ``instance-local-nvme``
    without NVMe storage, ``instance-ebs-bandwidth`` when not EBS-optimized by default) are absent.
    ``instance-network-bandwidth`` is the sum of the network cards' baseline bandwidth in Mbps
    (Karpenter's generated table holds the same documented baseline).
    """
    name = _name(info)
    out: dict[str, str] = {
        LABEL_INSTANCE_TYPE: name,
        LABEL_ARCH: kubernetes_arch(info),
        LABEL_OS: "linux",
        _K + "instance-cpu": str(_vcpus(info)),
        _K + "instance-memory": str(int(_require(info, "MemoryInfo", "SizeInMiB"))),
    }
    if region:
        out[LABEL_REGION] = region
    if hypervisor := info.get("Hypervisor"):
        out[_K + "instance-hypervisor"] = str(hypervisor)
    network = info.get("NetworkInfo") or {}
    out[_K + "instance-encryption-in-transit-supported"] = str(
        bool(network.get("EncryptionInTransitSupported"))
    ).lower()
    out[_K + "nitro-sandbox"] = str(info.get("NitroEnclavesSupport") == "supported").lower()
    if match := _TYPE_SCHEME.match(name):
        out[_K + "instance-category"] = match.group(1)
        out[_K + "instance-generation"] = match.group(3)
    parts = name.split(".")
    if len(parts) == 2:
        out[_K + "instance-family"] = parts[0]
        out[_K + "instance-size"] = parts[1]
    out[_K + "instance-capability-flex"] = str("-flex" in parts[0]).lower()
    storage = info.get("InstanceStorageInfo") or {}
    if storage and storage.get("NvmeSupport") != "unsupported" and storage.get("TotalSizeInGB") is not None:
        out[_K + "instance-local-nvme"] = str(int(storage["TotalSizeInGB"]))
    cards = network.get("NetworkCards") or []
    baseline = [c["BaselineBandwidthInGbps"] for c in cards if c.get("BaselineBandwidthInGbps") is not None]
    if baseline:
        out[_K + "instance-network-bandwidth"] = str(round(sum(Fraction(str(b)) for b in baseline) * 1000))
    out.update(_accelerator_labels(info))
    processor = info.get("ProcessorInfo") or {}
    if manufacturer := processor.get("Manufacturer"):
        out[_K + "instance-cpu-manufacturer"] = _kebab(str(manufacturer))
    if (clock := processor.get("SustainedClockSpeedInGhz")) is not None:
        out[_K + "instance-cpu-sustained-clock-speed-mhz"] = str(round(Fraction(str(clock)) * 1000))
    ebs = info.get("EbsInfo") or {}
    optimized = ebs.get("EbsOptimizedInfo") or {}
    if ebs.get("EbsOptimizedSupport") == "default" and "MaximumBandwidthInMbps" in optimized:
        out[_K + "instance-ebs-bandwidth"] = str(int(optimized["MaximumBandwidthInMbps"]))
    return out


def build_instance_type(
    *,
    info: Mapping[str, Any],
    offerings: Sequence[Offering],
    kubelet: KubeletSettings | None = None,
    root_volume_bytes: int = DEFAULT_ROOT_VOLUME_BYTES,
    instance_store_policy: str | None = None,
    region: str = "",
    vm_memory_overhead_percent: float = DEFAULT_VM_MEMORY_OVERHEAD_PERCENT,
    reserved_enis: int = 0,
) -> InstanceType:
    """Build the core :class:`InstanceType` for one DescribeInstanceTypes item.

    ``offerings`` are kept as given (the adapter decides zones, prices and availability).
    ``overhead`` = kube-reserved + system-reserved + eviction threshold, so
    ``InstanceType.allocatable`` is Kubernetes' ``capacity - reserved - eviction threshold``.

    Raises ``InstanceTypeInfoError`` when ``info`` lacks vCPU, memory or network fields, and
    ``QuantityError`` (naming the kubelet field) for an unparsable kubelet quantity.
    """
    cap = capacity(
        info,
        kubelet=kubelet,
        root_volume_bytes=root_volume_bytes,
        instance_store_policy=instance_store_policy,
        vm_memory_overhead_percent=vm_memory_overhead_percent,
        reserved_enis=reserved_enis,
    )
    system = _parse_map(kubelet.system_reserved, where="kubelet.systemReserved") if kubelet else {}
    eviction = eviction_threshold(memory_bytes=cap[MEMORY], storage_bytes=cap[EPHEMERAL_STORAGE], kubelet=kubelet)
    overhead = add(add(kube_reserved(info, kubelet=kubelet, reserved_enis=reserved_enis), system), eviction)
    return InstanceType(
        name=_name(info),
        labels=labels(info, region=region),
        capacity=cap,
        overhead=overhead,
        offerings=tuple(offerings),
        processor_features=frozenset(str(f) for f in (info.get("ProcessorInfo") or {}).get("SupportedFeatures") or ()),
    )
