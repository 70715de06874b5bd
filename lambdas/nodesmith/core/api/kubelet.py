"""``EC2NodeClass.spec.kubelet``: kubelet settings Karpenter reads for scheduling, validated like Karpenter.

Source: ``[aws]:pkg/apis/v1/kubeletconfiguration.go`` and ``kubeletconfiguration_validation.go``
(v1.14.1: an open map of upstream ``KubeletConfiguration`` fields, checked strictly against the
upstream type, ``k8s.io/kubelet/config/v1beta1/types.go``; field names below are that type's JSON
names). Karpenter parses 12 of them for scheduling; those are typed here.
"""

from __future__ import annotations

from typing import Final

from pydantic import ConfigDict, Field, field_validator, model_validator

from nodesmith.core.api.common import SpecModel, parse_duration
from nodesmith.core.resources import QuantityError, parse_quantity

__all__ = ["PARSED_KUBELET_FIELDS", "UPSTREAM_KUBELET_FIELDS", "KubeletConfiguration"]

_EVICTION_SIGNALS = (
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "pid.available",
)
_RESERVED_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pid")
_BAD_SIGNAL = "isn't a valid eviction signal, must be one of " + ", ".join(_EVICTION_SIGNALS)


UPSTREAM_KUBELET_FIELDS = frozenset(
    {
        "apiVersion",
        "kind",
        "enableServer",
        "staticPodPath",
        "podLogsDir",
        "syncFrequency",
        "fileCheckFrequency",
        "httpCheckFrequency",
        "staticPodURL",
        "staticPodURLHeader",
        "address",
        "port",
        "readOnlyPort",
        "tlsCertFile",
        "tlsPrivateKeyFile",
        "tlsCipherSuites",
        "tlsCurvePreferences",
        "tlsMinVersion",
        "rotateCertificates",
        "serverTLSBootstrap",
        "authentication",
        "authorization",
        "registryPullQPS",
        "registryBurst",
        "imagePullCredentialsVerificationPolicy",
        "preloadedImagesVerificationAllowlist",
        "eventRecordQPS",
        "eventBurst",
        "enableDebuggingHandlers",
        "enableContentionProfiling",
        "healthzPort",
        "healthzBindAddress",
        "oomScoreAdj",
        "clusterDomain",
        "clusterDNS",
        "streamingConnectionIdleTimeout",
        "nodeStatusUpdateFrequency",
        "nodeStatusReportFrequency",
        "nodeLeaseDurationSeconds",
        "imageMinimumGCAge",
        "imageMaximumGCAge",
        "imageGCHighThresholdPercent",
        "imageGCLowThresholdPercent",
        "volumeStatsAggPeriod",
        "kubeletCgroups",
        "systemCgroups",
        "cgroupRoot",
        "cgroupsPerQOS",
        "cgroupDriver",
        "cpuManagerPolicy",
        "singleProcessOOMKill",
        "cpuManagerPolicyOptions",
        "cpuManagerReconcilePeriod",
        "draManagerReconcilePeriod",
        "memoryManagerPolicy",
        "topologyManagerPolicy",
        "topologyManagerScope",
        "topologyManagerPolicyOptions",
        "qosReserved",
        "runtimeRequestTimeout",
        "hairpinMode",
        "maxPods",
        "podCIDR",
        "podPidsLimit",
        "resolvConf",
        "runOnce",
        "cpuCFSQuota",
        "cpuCFSQuotaPeriod",
        "nodeStatusMaxImages",
        "maxOpenFiles",
        "contentType",
        "kubeAPIQPS",
        "kubeAPIBurst",
        "serializeImagePulls",
        "maxParallelImagePulls",
        "evictionHard",
        "evictionSoft",
        "evictionSoftGracePeriod",
        "evictionPressureTransitionPeriod",
        "evictionMaxPodGracePeriod",
        "evictionMinimumReclaim",
        "mergeDefaultEvictionSettings",
        "podsPerCore",
        "enableControllerAttachDetach",
        "protectKernelDefaults",
        "makeIPTablesUtilChains",
        "iptablesMasqueradeBit",
        "iptablesDropBit",
        "featureGates",
        "failSwapOn",
        "memorySwap",
        "containerLogMaxSize",
        "containerLogMaxFiles",
        "containerLogMaxWorkers",
        "containerLogMonitorInterval",
        "configMapAndSecretChangeDetectionStrategy",
        "systemReserved",
        "kubeReserved",
        "reservedSystemCPUs",
        "showHiddenMetricsForVersion",
        "systemReservedCgroup",
        "kubeReservedCgroup",
        "enforceNodeAllocatable",
        "allowedUnsafeSysctls",
        "volumePluginDir",
        "providerID",
        "kernelMemcgNotification",
        "logging",
        "enableSystemLogHandler",
        "enableSystemLogQuery",
        "shutdownGracePeriod",
        "shutdownGracePeriodCriticalPods",
        "shutdownGracePeriodByPodPriority",
        "crashLoopBackOff",
        "reservedMemory",
        "enableProfilingHandler",
        "enableDebugFlagsHandler",
        "seccompDefault",
        "memoryThrottlingFactor",
        "memoryReservationPolicy",
        "registerWithTaints",
        "registerNode",
        "tracing",
        "localStorageCapacityIsolation",
        "containerRuntimeEndpoint",
        "imageServiceEndpoint",
        "failCgroupV1",
        "userNamespaces",
    }
)
"""Top-level JSON fields of upstream ``KubeletConfiguration`` (``k8s.io/kubelet/config/v1beta1``)."""


class KubeletConfiguration(SpecModel):
    """``spec.kubelet``: the 12 fields Karpenter reads for scheduling, typed; any other upstream
    KubeletConfiguration field is kept as given (v1.14 open map).

    Validation as ``ValidateKubeletConfig``: eviction signal names, thresholds (``"100Mi"`` or
    ``"10%"``), every ``evictionSoft`` signal with a grace period and vice versa, reserved
    resources among cpu/memory/ephemeral-storage/pid, non-negative counts, image GC high > low,
    ``registerWithTaints`` is Karpenter's. ``max_pods`` may be a CEL expression string (NodeClassCEL).
    """

    model_config = ConfigDict(extra="allow")

    cluster_dns: list[str] | None = Field(default=None, alias="clusterDNS")
    max_pods: int | str | None = Field(default=None)
    pods_per_core: int | None = Field(default=None, ge=0)
    system_reserved: dict[str, str] | None = None
    kube_reserved: dict[str, str] | None = None
    eviction_hard: dict[str, str] | None = None
    eviction_soft: dict[str, str] | None = None
    eviction_soft_grace_period: dict[str, str] | None = None
    eviction_max_pod_grace_period: int | None = Field(default=None, ge=0)
    image_gc_high_threshold_percent: int | None = Field(default=None, ge=0, le=100, alias="imageGCHighThresholdPercent")
    image_gc_low_threshold_percent: int | None = Field(default=None, ge=0, le=100, alias="imageGCLowThresholdPercent")
    cpu_cfs_quota: bool | None = Field(default=None, alias="cpuCFSQuota")

    @field_validator("max_pods")
    @classmethod
    def _max_pods(cls, value: int | str | None) -> int | str | None:
        if isinstance(value, int) and value < 0:
            raise ValueError("can't be negative")
        return value

    @field_validator("system_reserved", "kube_reserved")
    @classmethod
    def _reserved(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for key, amount in (value or {}).items():
            if key not in _RESERVED_RESOURCES:
                raise ValueError(
                    f"{key!r} isn't a reservable resource, must be one of {', '.join(_RESERVED_RESOURCES)}"
                )
            if str(amount).startswith("-"):
                raise ValueError(f"{key}: {amount!r} can't be a negative resource quantity")
        return value

    @field_validator("eviction_hard", "eviction_soft")
    @classmethod
    def _thresholds(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for key, threshold in (value or {}).items():
            if key not in _EVICTION_SIGNALS:
                raise ValueError(
                    f"{key!r} isn't a valid eviction signal, must be one of {', '.join(_EVICTION_SIGNALS)}"
                )
            _check_threshold(key, threshold)
        return value

    @field_validator("eviction_soft_grace_period")
    @classmethod
    def _grace(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for key, period in (value or {}).items():
            if key not in _EVICTION_SIGNALS:
                raise ValueError(
                    f"{key!r} isn't a valid eviction signal, must be one of {', '.join(_EVICTION_SIGNALS)}"
                )
            seconds = parse_duration(period)
            if seconds is None or seconds < 0:
                raise ValueError(f"{key}: {period!r} must be a non-negative duration")
        return value

    @model_validator(mode="after")
    def _cross_field(self) -> KubeletConfiguration:
        extra = self.model_extra or {}
        unknown = sorted(set(extra) - UPSTREAM_KUBELET_FIELDS)
        if unknown:
            raise ValueError(f"{unknown[0]}: unknown field, not a KubeletConfiguration field")
        if "registerWithTaints" in extra:
            raise ValueError("registerWithTaints: can't be set, Karpenter sets it from the NodeClaim's taints")
        soft, grace = set(self.eviction_soft or {}), set(self.eviction_soft_grace_period or {})
        if soft != grace:
            raise ValueError(
                f"evictionSoft and evictionSoftGracePeriod must name the same signals: {sorted(soft ^ grace)}"
            )
        high, low = self.image_gc_high_threshold_percent, self.image_gc_low_threshold_percent
        if high is not None and low is not None and high <= low:
            raise ValueError(
                f"imageGCHighThresholdPercent ({high}) must be greater than imageGCLowThresholdPercent ({low})"
            )
        return self


def _check_threshold(key: str, threshold: str) -> None:
    if threshold.endswith("%"):
        try:
            pct = float(threshold[:-1])
        except ValueError:
            pct = -1.0
        if not 0 <= pct <= 100:
            raise ValueError(f"{key}: {threshold!r} must be a percentage or a resource quantity")
        return
    try:
        parse_quantity(threshold)
    except QuantityError as exc:
        raise ValueError(f"{key}: {threshold!r} must be a percentage or a resource quantity") from exc


PARSED_KUBELET_FIELDS: Final = tuple(f.alias or name for name, f in KubeletConfiguration.model_fields.items())
"""The JSON names of the fields Karpenter parses (``ParsedKubeletConfig``, the typed fields of
:class:`KubeletConfiguration`, in their order): the ones it maps into every AMI family's bootstrap."""
