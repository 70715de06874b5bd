"""``nodesmith playground``: the embedded AWS and Kubernetes kept running for the real ``kubectl``.

What Karpenter's kwok provider is to Karpenter: a fake cluster to try NodePools on by hand. The
playground starts an :class:`~nodesmith.cli.world.EmbeddedWorld` (moto on loopback, seeded like an
EKS cluster's VPC with subnets and security groups tagged ``karpenter.sh/discovery: <cluster>``,
the API emulator, simulated kubelet / kube-scheduler / ReplicaSet controllers) and one loop that
invokes the reconcile handler every ``tick`` seconds (the stack's schedule, shortened) and hands the
interruption and termination queues to their handlers (the SQS event source mappings). It writes,
in ``state_dir``:

* ``kubeconfig``: one cluster, context and user named after the embedded cluster, no credentials;
* ``playground.json``: the endpoints (:class:`PlaygroundState`), which ``nodesmith playground
  interrupt NODE`` reads to reach the running playground from another shell.

SIGINT (Ctrl-C) or SIGTERM stops the loop, the simulated components, the emulator and moto, and
removes ``playground.json``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import threading
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from nodesmith.cli.exits import EXIT_OK, StepFailed, report

if TYPE_CHECKING:
    from types import FrameType

    from nodesmith.cli.world import EmbeddedWorld

__all__ = [
    "DEFAULT_STATE_DIR",
    "Playground",
    "PlaygroundError",
    "PlaygroundState",
    "interrupt_node",
    "kubeconfig",
    "run_interrupt",
    "run_playground",
]

LOG = logging.getLogger(__name__)

DEFAULT_STATE_DIR = Path.home() / ".nodesmith" / "playground"
"""Where the kubeconfig and ``playground.json`` go unless ``--dir`` says otherwise."""

STATE_FILE = "playground.json"


class PlaygroundError(StepFailed):
    """The playground is not reachable, or a request to it cannot be carried out (the message says which): exit 1."""


@dataclass(frozen=True, slots=True)
class PlaygroundState:
    """How to reach a running playground: its cluster name, the API emulator's and moto's endpoints."""

    cluster_name: str
    kube_endpoint: str
    aws_endpoint: str
    region: str
    kubeconfig: str

    def write(self, state_dir: Path) -> Path:
        """Write ``playground.json`` in ``state_dir``; returns its path."""
        path = state_dir / STATE_FILE
        path.write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")
        return path

    @classmethod
    def read(cls, state_dir: Path) -> PlaygroundState:
        """The state in ``state_dir``; PlaygroundError when no playground wrote one or it is malformed."""
        path = state_dir / STATE_FILE
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            return cls(**{k: str(raw[k]) for k in cls.__slots__})
        except FileNotFoundError:
            raise PlaygroundError(f"no playground is running for {state_dir} ({path} is missing)") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise PlaygroundError(f"{path} is not a playground state file: {exc}") from None


def kubeconfig(*, cluster_name: str, endpoint: str) -> dict[str, Any]:
    """A kubeconfig with one cluster, context and user named ``cluster_name``, talking to ``endpoint``."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": {"server": endpoint}}],
        "users": [{"name": cluster_name, "user": {}}],
        "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": cluster_name}}],
        "current-context": cluster_name,
        "preferences": {},
    }


class Playground:
    """A running playground (context manager): the world, the kubeconfig and the Lambda loop.

    ``tick`` is the seconds between two reconcile passes (the deployed schedule runs one a minute);
    ``ready_delay`` the seconds a simulated node takes from registration to Ready.
    """

    def __init__(self, *, state_dir: Path, cluster_name: str, tick: float = 1.0, ready_delay: float = 1.0) -> None:
        if tick <= 0:
            raise ValueError(f"tick must be positive seconds, got {tick}")
        self.state_dir = state_dir
        self.cluster_name = cluster_name
        self.tick = tick
        self.ready_delay = ready_delay
        self.world: EmbeddedWorld | None = None
        self.passes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def kubeconfig_path(self) -> Path:
        """The kubeconfig the playground writes."""
        return self.state_dir / "kubeconfig"

    def start(self) -> PlaygroundState:
        """Start the world, write the kubeconfig and state file, start the loop; returns the state."""
        from nodesmith.cli.world import EmbeddedWorld

        self.state_dir.mkdir(parents=True, exist_ok=True)
        world = EmbeddedWorld(cluster_name=self.cluster_name, ready_delay=self.ready_delay)
        self.world = world.start()
        if world.kube is None or world.aws is None:  # pragma: no cover - start() sets both or raises
            raise PlaygroundError("the embedded world did not start")
        config = kubeconfig(cluster_name=self.cluster_name, endpoint=world.kube.endpoint)
        self.kubeconfig_path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        self.kubeconfig_path.chmod(0o600)
        state = PlaygroundState(
            cluster_name=self.cluster_name,
            kube_endpoint=world.kube.endpoint,
            aws_endpoint=world.aws.endpoint_url,
            region=world.aws.region,
            kubeconfig=str(self.kubeconfig_path),
        )
        state.write(self.state_dir)
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="playground-lambdas", daemon=True)
        self._thread.start()
        return state

    def _loop(self) -> None:
        """Reconcile, then the interruption and termination queues, every ``tick`` until stopped."""
        world = self.world
        while world is not None and not self._stop.is_set():
            try:
                world.reconcile()
                for _batch in world.deliver_interruptions(wait_seconds=0):
                    pass
                world.deliver_terminations(wait_seconds=0)
                self.passes += 1
            except Exception:  # a failed invocation is retried on the next tick, as Lambda's would be
                LOG.exception("a playground Lambda invocation failed; retrying on the next tick")
            self._stop.wait(self.tick)

    def stop(self) -> None:
        """Let the Lambda invocation in flight finish, stop the world, remove the state file (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            # the pass in flight finishes first: stopping moto under it would leave its calls hanging
            self._thread.join()
            self._thread = None
        if self.world is not None:
            self.world.stop()
            self.world = None
        with contextlib.suppress(FileNotFoundError):
            (self.state_dir / STATE_FILE).unlink()

    def __enter__(self) -> Playground:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def run_playground(*, state_dir: Path, cluster_name: str, tick: float) -> int:
    """Run the playground until SIGINT or SIGTERM; print the ``export KUBECONFIG=...`` line first. Exit code 0."""
    stop = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    playground = Playground(state_dir=state_dir, cluster_name=cluster_name, tick=tick)
    try:
        state = playground.start()
        print(f"Nodesmith playground: cluster {cluster_name!r}, Kubernetes API at {state.kube_endpoint}", flush=True)
        print(f"Subnets and security groups carry karpenter.sh/discovery: {cluster_name}", flush=True)
        print(f"Reconcile every {tick:g} s; spot warning: nodesmith playground interrupt NODE", flush=True)
        if playground.world is not None:
            print(f"Lambda logs: {playground.world.lambda_log}", flush=True)
        print("Ctrl-C stops it.", flush=True)
        print(f"export KUBECONFIG={state.kubeconfig}", flush=True)
        stop.wait()
    finally:
        playground.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print("playground stopped", flush=True)
    return 0


def _node_instance(state: PlaygroundState, node: str) -> tuple[str, str]:
    """(instance id, zone) of a Node, from its ``spec.providerID`` (``aws:///<zone>/<instance-id>``)."""
    url = f"{state.kube_endpoint}/api/v1/nodes/{node}"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            obj = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise PlaygroundError(f"node {node!r} not found in the playground") from None
        raise PlaygroundError(f"reading node {node!r}: HTTP {exc.code}") from None
    except OSError as exc:
        raise PlaygroundError(f"the playground at {state.kube_endpoint} does not answer: {exc}") from None
    provider_id = str((obj.get("spec") or {}).get("providerID") or "")
    parts = provider_id.removeprefix("aws:///").split("/")
    if not provider_id.startswith("aws:///") or len(parts) != 2 or not parts[1].startswith("i-"):
        raise PlaygroundError(f"node {node!r} has no EC2 providerID (got {provider_id!r})")
    zone, instance_id = parts
    return instance_id, zone


def interrupt_node(*, state: PlaygroundState, node: str) -> tuple[str, str]:
    """Put a spot interruption warning for ``node``'s instance on the playground's EventBridge.

    Returns (instance id, EventBridge entry id); PlaygroundError when the node or playground is not there.
    """
    import boto3

    from nodesmith.sim.interruptions import put_spot_interruption

    instance_id, zone = _node_instance(state, node)
    events = boto3.client(
        "events",
        region_name=state.region,
        endpoint_url=state.aws_endpoint,
        aws_access_key_id="playground",
        aws_secret_access_key="playground",
    )
    return instance_id, put_spot_interruption(events, instance_id=instance_id, zone=zone, region=state.region)


def run_interrupt(*, state_dir: Path, node: str) -> int:
    """``nodesmith playground interrupt NODE``: 0 when the warning was put, 1 with the reason otherwise."""
    try:
        instance_id, event_id = interrupt_node(state=PlaygroundState.read(state_dir), node=node)
    except PlaygroundError as exc:
        return report(exc)
    print(f"EC2 Spot Instance Interruption Warning put for {node} ({instance_id}), event {event_id}")
    return EXIT_OK
