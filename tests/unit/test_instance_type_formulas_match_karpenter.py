"""Capacity, overhead and labels of EC2 instance types follow Karpenter's AWS provider (types.go).

Expected numbers are worked out by hand from the formulas and, for max pods, from the EKS AMI's
``eni-max-pods.txt`` (m5.large 29, c5.xlarge 58, t3.medium 17).
"""

from __future__ import annotations

from typing import Any

import pytest

from nodesmith.core.instancetypes import (
    KubeletSettings,
    build_instance_type,
    eni_limited_pods,
    kube_reserved_cpu_millicores,
    labels,
    max_pods,
    memory_capacity_bytes,
)
from nodesmith.core.model import Offering
from nodesmith.core.resources import QuantityError

MIB = 2**20
GIB = 2**30


def info(
    name: str,
    *,
    vcpus: int,
    mib: int,
    enis: int,
    ips: int,
    arch: str = "x86_64",
    manufacturer: str = "Intel",
    **extra: Any,
) -> dict[str, Any]:
    """A DescribeInstanceTypes item with just the fields the formulas read."""
    item: dict[str, Any] = {
        "InstanceType": name,
        "VCpuInfo": {"DefaultVCpus": vcpus},
        "MemoryInfo": {"SizeInMiB": mib},
        "ProcessorInfo": {"SupportedArchitectures": [arch], "Manufacturer": manufacturer},
        "Hypervisor": "nitro",
        "NetworkInfo": {
            "Ipv4AddressesPerInterface": ips,
            "MaximumNetworkInterfaces": enis,
            "DefaultNetworkCardIndex": 0,
            "NetworkCards": [
                {"NetworkCardIndex": 0, "MaximumNetworkInterfaces": enis, "BaselineBandwidthInGbps": 0.75},
            ],
            "EncryptionInTransitSupported": False,
        },
        "SupportedUsageClasses": ["on-demand", "spot"],
    }
    item.update(extra)
    return item


M5_LARGE = info("m5.large", vcpus=2, mib=8192, enis=3, ips=10)
C5_XLARGE = info("c5.xlarge", vcpus=4, mib=8192, enis=4, ips=15)
T3_MEDIUM = info("t3.medium", vcpus=2, mib=4096, enis=3, ips=6)
M7G_LARGE = info("m7g.large", vcpus=2, mib=8192, enis=3, ips=10, arch="arm64", manufacturer="AWS")


@pytest.mark.parametrize(("item", "pods"), [(M5_LARGE, 29), (C5_XLARGE, 58), (T3_MEDIUM, 17)])
def test_max_pods_is_eni_limited_like_the_eks_ami(item: dict[str, Any], pods: int) -> None:
    assert eni_limited_pods(item) == pods
    assert max_pods(item) == pods


def test_eni_limit_uses_the_default_network_card_only() -> None:
    # p4d.24xlarge: 4 cards x 15 ENIs, 50 IPv4 each; the VPC CNI only uses card 0 -> 737 (eni-max-pods.txt).
    item = info("p4d.24xlarge", vcpus=96, mib=1179648, enis=60, ips=50)
    item["NetworkInfo"]["NetworkCards"] = [
        {"NetworkCardIndex": i, "MaximumNetworkInterfaces": 15, "BaselineBandwidthInGbps": 100.0} for i in range(4)
    ]
    assert eni_limited_pods(item) == 737
    assert labels(item)["karpenter.k8s.aws/instance-network-bandwidth"] == "400000"


def test_reserved_enis_reduce_max_pods() -> None:
    assert eni_limited_pods(M5_LARGE, reserved_enis=1) == 2 * 9 + 2
    assert eni_limited_pods(M5_LARGE, reserved_enis=3) == 0


def test_kubelet_max_pods_and_pods_per_core_override_the_eni_limit() -> None:
    assert max_pods(M5_LARGE, kubelet=KubeletSettings(max_pods=110)) == 110
    assert max_pods(M5_LARGE, kubelet=KubeletSettings(pods_per_core=4)) == 8  # min(4 x 2 vCPU, 29)
    assert max_pods(C5_XLARGE, kubelet=KubeletSettings(max_pods=20, pods_per_core=10)) == 20


@pytest.mark.parametrize(("vcpus", "millicores"), [(1, 60), (2, 70), (4, 80), (8, 90), (96, 310), (3, 75)])
def test_kube_reserved_cpu_bands(vcpus: int, millicores: int) -> None:
    # 6% of core 1, 1% of core 2, 0.5% of cores 3-4, 0.25% above: 96 cores -> 60+10+10+230 = 310.
    assert kube_reserved_cpu_millicores(vcpus) == millicores


def test_memory_capacity_subtracts_vm_overhead_and_graviton_cma() -> None:
    # 8192 MiB - ceil(8192 x 0.075 = 614.4) = 7577 MiB
    assert memory_capacity_bytes(M5_LARGE) == 7577 * MIB
    # arm64: (8192 - 64) - ceil(8128 x 0.075 = 609.6) = 7518 MiB
    assert memory_capacity_bytes(M7G_LARGE) == 7518 * MIB
    assert memory_capacity_bytes(M5_LARGE, vm_memory_overhead_percent=0) == 8192 * MIB


def test_m5_large_allocatable_with_defaults() -> None:
    it = build_instance_type(info=M5_LARGE, offerings=[])
    assert it.capacity == {"cpu": 2000, "memory": 7577 * MIB, "ephemeral-storage": 20 * GIB, "pods": 29}
    # kube-reserved 11 x 29 + 255 = 574 MiB, eviction 100 MiB; ephemeral 1 GiB + ceil(10% of 20 GiB)
    assert it.overhead == {
        "cpu": 70,
        "memory": (574 + 100) * MIB,
        "ephemeral-storage": GIB + 2147483648,
    }
    assert it.allocatable["cpu"] == 1930
    assert it.allocatable["memory"] == (7577 - 674) * MIB
    assert it.allocatable["pods"] == 29


def test_kube_reserved_memory_keeps_eni_limited_pods_when_max_pods_is_set() -> None:
    # Karpenter (AL2023, UsesENILimitedMemoryOverhead): memory overhead from ENI-limited pods, not maxPods.
    it = build_instance_type(info=M5_LARGE, offerings=[], kubelet=KubeletSettings(max_pods=110))
    assert it.capacity["pods"] == 110
    assert it.overhead["memory"] == (11 * 29 + 255 + 100) * MIB


def test_bottlerocket_counts_its_pods_capacity_in_kube_reserved_memory_and_has_no_pods_per_core() -> None:
    # Karpenter's Bottlerocket: UsesENILimitedMemoryOverhead and PodsPerCoreEnabled are false.
    kubelet = KubeletSettings.from_kubelet({"maxPods": 110, "podsPerCore": 4}, ami_family="Bottlerocket")
    it = build_instance_type(info=M5_LARGE, offerings=[], kubelet=kubelet)
    assert it.capacity["pods"] == 110  # AL2023 would cap it at 4 x 2 vCPU
    assert it.overhead["memory"] == (11 * 110 + 255 + 100) * MIB
    al2023 = KubeletSettings.from_kubelet({"maxPods": 110, "podsPerCore": 4}, ami_family="AL2023")
    assert build_instance_type(info=M5_LARGE, offerings=[], kubelet=al2023).capacity["pods"] == 8
    assert hash(kubelet) != hash(KubeletSettings.from_kubelet({"maxPods": 110}, ami_family="AL2023"))


def test_kubelet_reservations_and_eviction_hard_override_defaults() -> None:
    kubelet = KubeletSettings(
        system_reserved={"cpu": "100m", "memory": "200Mi"},
        kube_reserved={"cpu": "250m", "memory": "1Gi", "ephemeral-storage": "2Gi"},
        eviction_hard={"memory.available": "5%", "nodefs.available": "100%"},
    )
    it = build_instance_type(info=M5_LARGE, offerings=[], kubelet=kubelet, root_volume_bytes=50 * GIB)
    memory_capacity = 7577 * MIB
    eviction_memory = -(-memory_capacity * 5 // 100)  # ceil(5%)
    assert it.capacity["ephemeral-storage"] == 50 * GIB
    assert it.overhead == {
        "cpu": 350,
        "memory": GIB + 200 * MIB + eviction_memory,
        "ephemeral-storage": 2 * GIB,  # nodefs 100% disables the eviction threshold
    }


def test_bad_kubelet_quantity_names_the_field() -> None:
    with pytest.raises(QuantityError, match=r"kubelet\.systemReserved\.memory"):
        build_instance_type(info=M5_LARGE, offerings=[], kubelet=KubeletSettings(system_reserved={"memory": "lots"}))


def test_raid0_instance_store_becomes_ephemeral_storage() -> None:
    item = info(
        "c6gd.large",
        vcpus=2,
        mib=4096,
        enis=3,
        ips=10,
        arch="arm64",
        InstanceStorageInfo={"TotalSizeInGB": 118, "NvmeSupport": "required"},
    )
    it = build_instance_type(info=item, offerings=[], instance_store_policy="RAID0")
    assert it.capacity["ephemeral-storage"] == 118 * 10**9
    assert it.labels["karpenter.k8s.aws/instance-local-nvme"] == "118"


def test_well_known_labels_of_a_gpu_type() -> None:
    item = info(
        "g4dn.xlarge",
        vcpus=4,
        mib=16384,
        enis=3,
        ips=10,
        GpuInfo={"Gpus": [{"Name": "T4", "Manufacturer": "NVIDIA", "Count": 1, "MemoryInfo": {"SizeInMiB": 16384}}]},
        EbsInfo={"EbsOptimizedSupport": "default", "EbsOptimizedInfo": {"MaximumBandwidthInMbps": 3500}},
        NitroEnclavesSupport="supported",
    )
    item["ProcessorInfo"]["SustainedClockSpeedInGhz"] = 2.5
    item["NetworkInfo"]["NetworkCards"][0]["BaselineBandwidthInGbps"] = 5.0
    item["NetworkInfo"]["EncryptionInTransitSupported"] = True
    it = build_instance_type(info=item, offerings=[], region="us-east-1")
    assert it.capacity["nvidia.com/gpu"] == 1
    k = "karpenter.k8s.aws/"
    assert it.labels == {
        "node.kubernetes.io/instance-type": "g4dn.xlarge",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "topology.kubernetes.io/region": "us-east-1",
        k + "instance-category": "g",
        k + "instance-family": "g4dn",
        k + "instance-generation": "4",
        k + "instance-size": "xlarge",
        k + "instance-cpu": "4",
        k + "instance-cpu-manufacturer": "intel",
        k + "instance-cpu-sustained-clock-speed-mhz": "2500",
        k + "instance-memory": "16384",
        k + "instance-gpu-name": "t4",
        k + "instance-gpu-manufacturer": "nvidia",
        k + "instance-gpu-count": "1",
        k + "instance-gpu-memory": "16384",
        k + "instance-hypervisor": "nitro",
        k + "instance-network-bandwidth": "5000",
        k + "instance-encryption-in-transit-supported": "true",
        k + "instance-ebs-bandwidth": "3500",
        k + "instance-capability-flex": "false",
        k + "nitro-sandbox": "true",
    }


def test_graviton_and_neuron_labels_and_resources() -> None:
    m7g = labels(M7G_LARGE)
    assert m7g["kubernetes.io/arch"] == "arm64"
    assert m7g["karpenter.k8s.aws/instance-cpu-manufacturer"] == "aws"
    assert "karpenter.k8s.aws/instance-gpu-name" not in m7g
    inf2 = info(
        "inf2.xlarge",
        vcpus=4,
        mib=16384,
        enis=4,
        ips=15,
        manufacturer="AMD",
        NeuronInfo={"NeuronDevices": [{"Name": "Inferentia2", "Count": 1, "CoreInfo": {"Count": 2}}]},
        InferenceAcceleratorInfo={"Accelerators": [{"Name": "Inferentia2", "Manufacturer": "AWS", "Count": 1}]},
    )
    it = build_instance_type(info=inf2, offerings=[])
    assert it.capacity["aws.amazon.com/neuron"] == 1
    assert it.capacity["aws.amazon.com/neuroncore"] == 2
    assert it.labels["karpenter.k8s.aws/instance-accelerator-name"] == "inferentia2"
    assert it.labels["karpenter.k8s.aws/instance-accelerator-manufacturer"] == "aws"
    assert it.labels["karpenter.k8s.aws/instance-cpu-manufacturer"] == "amd"


def test_category_and_generation_of_high_memory_names() -> None:
    got = labels(info("u-6tb1.56xlarge", vcpus=224, mib=6291456, enis=15, ips=50))
    assert got["karpenter.k8s.aws/instance-category"] == "u"
    assert got["karpenter.k8s.aws/instance-generation"] == "1"
    assert got["karpenter.k8s.aws/instance-family"] == "u-6tb1"


def test_offerings_are_kept_and_kubelet_read_from_a_nodeclass_dict() -> None:
    offering = Offering(zone="us-east-1a", capacity_type="spot", price=0.03)
    kubelet = KubeletSettings.from_kubelet({"maxPods": 42, "systemReserved": {"cpu": "1"}})
    assert kubelet == KubeletSettings(max_pods=42, system_reserved={"cpu": "1"})
    it = build_instance_type(info=M5_LARGE, offerings=[offering], kubelet=kubelet)
    assert it.offerings == (offering,)
    assert it.capacity["pods"] == 42
    assert it.overhead["cpu"] == 70 + 1000


def test_kubelet_settings_hash_by_content_so_they_can_key_caches() -> None:
    a = KubeletSettings(max_pods=10, system_reserved={"cpu": "1", "memory": "1Gi"})
    b = KubeletSettings(max_pods=10, system_reserved={"memory": "1Gi", "cpu": "1"})
    assert a == b
    assert len({a, b, KubeletSettings(max_pods=11)}) == 2
