"""The faults of a chaos run (``bench/chaos.py``): the rate per layer and where each layer's faults are switched on
and off in the embedded world. What each fault is: ``bench/README.md``."""

from __future__ import annotations

from typing import Any

from nodesmith.sim.aws_faults import FaultPlan, FleetFaults, SqsFaults, fault_counts, set_faults
from nodesmith.sim.cluster_faults import ClusterFaults
from nodesmith.sim.kube.faults import KubeFaults
from nodesmith.sim.lambda_runtime import Crashes, inject_crashes

NOT_READY_SECONDS = 30.0
"""How long a node that goes NotReady stays so."""
FAULT_LAYERS = ("kube", "aws", "lambda", "cluster")
"""Where faults are injected: the Kubernetes API emulator, the embedded AWS, the Lambda runtime, the cluster."""


def fault_rates(rate: float, mix: str = "") -> dict[str, float]:
    """Each of :data:`FAULT_LAYERS`'s fault rate (0..1): ``rate``, but for the layers ``mix`` names
    (``"kube=0.3,lambda=0"``: another rate for those). Raises ``ValueError`` naming the entry that is not
    ``<layer>=<rate>`` with a known layer and a rate in 0..1."""
    rates = dict.fromkeys(FAULT_LAYERS, rate)
    for entry in filter(None, (e.strip() for e in mix.split(","))):
        layer, _, value = entry.partition("=")
        if layer not in rates:
            raise ValueError(f"--mix {entry!r}: unknown layer {layer!r} (one of {', '.join(FAULT_LAYERS)})")
        try:
            rates[layer] = float(value)
        except ValueError:
            raise ValueError(f"--mix {entry!r}: {value!r} is not a rate") from None
    for layer, share in rates.items():
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"fault rate {share} for {layer} is outside 0..1")
    return rates


class Faults:
    """The faults of a run at ``rates`` (per :data:`FAULT_LAYERS`, 0: none; written R below), seeded by ``seed``
    (see ``bench/README.md``): the Kubernetes
    API emulator answers that share of requests with a fault; the embedded AWS throttles half that share of calls
    and fails a quarter with a 5xx, answers capacity errors for some overrides of twice that share of CreateFleets
    (for all of them in a quarter of those), does not describe an instance in its first 2 s, and delivers that
    share of SQS messages twice and half of it late; an invocation (the SQS ones and the reconcile schedule's)
    crashes with half that chance and runs into its timeout with a quarter, at a random one of its first 50 calls
    or as it returns; the cluster's instances never register their Node with half that chance, its Ready nodes go
    NotReady for :data:`NOT_READY_SECONDS` with half that chance, and that share of pod deletions are never
    confirmed."""

    def __init__(self, world: Any, *, rates: dict[str, float], seed: int) -> None:
        """``world``: the run's embedded world (``chaos.ChaosWorld``), its ``kube``, ``aws`` and ``kubelet``."""
        self.world = world
        kube, aws, crash, cluster = (rates[layer] for layer in FAULT_LAYERS)
        self.kube = KubeFaults(seed=seed, rates={"*": kube}) if kube else None
        self.crashes = Crashes(rate=crash / 2, timeouts=crash / 4, seed=seed) if crash else None
        self.cluster = ClusterFaults(seed=seed, never_register=cluster / 2, not_ready=cluster / 2,
                                     stuck_terminating=cluster, not_ready_seconds=NOT_READY_SECONDS,
                                     ) if cluster else None  # fmt: skip
        self.aws = FaultPlan(
            seed=seed, throttle={"*": aws / 2}, server_error={"*": aws / 4},
            fleet=FleetFaults(rate=min(1.0, 2 * aws), share=0.5, launch_nothing=0.25),
            describe_lag_seconds=2.0, sqs=SqsFaults(duplicate=aws, delay=aws / 2, delay_seconds=5),
        ) if aws else None  # fmt: skip
        self.aws_injected: dict[str, int] = {}

    def on(self) -> None:
        """Start injecting."""
        if self.world.kube is not None:
            self.world.kube.faults = self.kube
        if self.world.aws is not None:
            set_faults(self.world.aws, self.aws)
        inject_crashes(self.crashes)
        self.world.kubelet.faults = self.cluster

    def off(self) -> None:
        """Stop injecting (the bench's own end-of-run reads are not Nodesmith's)."""
        if self.world.kube is not None:
            self.world.kube.faults = None
        if self.world.aws is not None:
            self.aws_injected = dict(fault_counts(self.world.aws).by_kind)
            set_faults(self.world.aws, None)
        inject_crashes(None)
        self.world.kubelet.faults = None  # the kubelets come back: nodes down recover, stuck deletions are confirmed

    def injected(self) -> dict[str, int]:
        """Faults injected, by kind (the embedded AWS's as of :meth:`off`)."""
        counts = {f"kube_{k}": n for k, n in (self.kube.counts() if self.kube else {}).items()}
        counts |= {f"aws_{k}": n for k, n in self.aws_injected.items()}
        counts["lambda_crash"] = self.crashes.injected if self.crashes else 0
        counts["lambda_timeout"] = self.crashes.timeouts_injected if self.crashes else 0
        counts |= {f"cluster_{k}": n for k, n in (self.cluster.counts() if self.cluster else {}).items()}
        return counts
