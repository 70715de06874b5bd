"""Build the official Kubernetes client for an EKS cluster (or the embedded emulator).

Authentication modes (``Settings.kube_auth``):

* ``eks``: a bearer token minted exactly like ``aws eks get-token`` (awscli
  ``customizations/eks/get_token.py``): a presigned STS ``GetCallerIdentity`` GET URL with the
  signed header ``x-k8s-aws-id: <cluster name>`` and ``X-Amz-Expires=60``, encoded as
  ``k8s-aws-v1.`` + base64url without padding. EKS accepts such a token for 15 minutes (the CLI
  reports 14); :class:`EksTokenSource` re-mints it before that through the client's
  ``refresh_api_key_hook``, so a long-lived client never sends an expired token.
* ``token``: a static bearer token.
* ``none``: no credentials (the emulator).

``kubernetes`` is imported inside the functions: importing its API classes is slow, which a Lambda
cold start should pay only when it talks to the cluster. The official client has no
client-side rate limiter (client-go's QPS/burst); bursts are bounded by the connection pool
(``pool_maxsize``: a drain round evicts several pods in parallel) and the API server's priority and
fairness (429 with Retry-After, retried by :class:`~nodesmith.adapters.kube.calls.KubeRest` within its
:class:`~nodesmith.adapters.kube.retry.RetryPolicy`).
"""

from __future__ import annotations

import base64
import binascii
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from nodesmith.core.errors import KubernetesError

if TYPE_CHECKING:
    from collections.abc import Callable

    from kubernetes.client import ApiClient, Configuration

__all__ = [
    "CLUSTER_ID_HEADER",
    "DEFAULT_CONNECTION",
    "NO_CREDENTIALS",
    "PRESIGN_EXPIRES_SECONDS",
    "TOKEN_LIFETIME_SECONDS",
    "TOKEN_PREFIX",
    "EksTokenSource",
    "KubeConnection",
    "KubeCredentials",
    "build_api_client",
    "eks_token",
]

TOKEN_PREFIX = "k8s-aws-v1."
CLUSTER_ID_HEADER = "x-k8s-aws-id"
PRESIGN_EXPIRES_SECONDS = 60
TOKEN_LIFETIME_SECONDS = 14 * 60
"""How long ``aws eks get-token`` says a token is good for (EKS accepts 15 minutes)."""
REFRESH_MARGIN_SECONDS = 120
"""Re-mint this long before :data:`TOKEN_LIFETIME_SECONDS` runs out."""

KubeAuth = Literal["eks", "token", "none"]


def _sts_client(session: Any, region: str | None) -> Any:
    if session is None:
        import boto3

        session = boto3.session.Session()
    return session.client("sts", region_name=region)


def _presign(sts: Any, cluster_name: str) -> str:
    """The ``k8s-aws-v1.`` token for a presigned GetCallerIdentity URL of ``sts``."""
    url: str = sts.generate_presigned_url(
        "get_caller_identity", Params={}, ExpiresIn=PRESIGN_EXPIRES_SECONDS, HttpMethod="GET"
    )
    return TOKEN_PREFIX + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


def _with_cluster_header(sts: Any, cluster_name: str) -> Any:
    """Make ``sts`` sign ``x-k8s-aws-id: <cluster_name>`` into GetCallerIdentity requests."""

    def add_header(request: Any, **_: Any) -> None:
        request.headers[CLUSTER_ID_HEADER] = cluster_name

    sts.meta.events.register("before-sign.sts.GetCallerIdentity", add_header)
    return sts


def eks_token(*, cluster_name: str, session: Any = None, region: str | None = None) -> str:
    """Mint one EKS bearer token like ``aws eks get-token --cluster-name <cluster_name>``.

    ``session`` is a ``boto3.Session`` (default credentials chain when None); ``region`` defaults
    to the session's. Raises ``KubernetesError`` when no credentials are available.
    """
    if not cluster_name:
        raise KubernetesError("eks auth needs the cluster name (NODESMITH_CLUSTER_NAME)")
    sts = _with_cluster_header(_sts_client(session, region), cluster_name)
    try:
        return _presign(sts, cluster_name)
    except Exception as exc:  # botocore NoCredentialsError and friends
        raise KubernetesError(f"cannot mint an EKS token for {cluster_name}: {exc}") from exc


class EksTokenSource:
    """A cached EKS token, re-minted when older than ``lifetime`` seconds (thread-safe).

    Install :meth:`refresh_hook` as ``Configuration.refresh_api_key_hook``: the client calls it
    before every request, and it only signs again when the token is due (a presign is local
    SigV4 work, no network call).
    """

    def __init__(
        self,
        *,
        cluster_name: str,
        session: Any = None,
        region: str | None = None,
        lifetime: float = TOKEN_LIFETIME_SECONDS - REFRESH_MARGIN_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not cluster_name:
            raise KubernetesError("eks auth needs the cluster name (NODESMITH_CLUSTER_NAME)")
        self.cluster_name = cluster_name
        self.lifetime = lifetime
        self._clock = clock
        self._session = session
        self._region = region
        self._sts: Any = None
        self._token = ""
        self._minted_at = float("-inf")
        self._lock = threading.Lock()
        self.mints = 0

    def token(self) -> str:
        """The current token, minting a new one if none exists or it is due."""
        with self._lock:
            now = self._clock()
            if not self._token or now - self._minted_at >= self.lifetime:
                if self._sts is None:
                    self._sts = _with_cluster_header(_sts_client(self._session, self._region), self.cluster_name)
                try:
                    self._token = _presign(self._sts, self.cluster_name)
                except Exception as exc:
                    raise KubernetesError(f"cannot mint an EKS token for {self.cluster_name}: {exc}") from exc
                self._minted_at = now
                self.mints += 1
            return self._token

    def refresh_hook(self, configuration: Configuration) -> None:
        """``refresh_api_key_hook``: put a fresh ``Bearer`` token into ``configuration``."""
        configuration.api_key["BearerToken"] = self.token()
        configuration.api_key_prefix["BearerToken"] = "Bearer"


def _ca_pem(cluster_ca_data: str) -> str:
    """The PEM text of ``certificateAuthority.data`` (base64 of PEM, as EKS returns it)."""
    try:
        pem = base64.b64decode(cluster_ca_data, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise KubernetesError(f"cluster CA data is not base64 PEM: {exc}") from exc
    if "BEGIN CERTIFICATE" not in pem:
        raise KubernetesError("cluster CA data does not contain a PEM certificate")
    return pem


@dataclass(frozen=True, kw_only=True)
class KubeCredentials:
    """What the authentication mode needs besides the endpoint.

    ``eks`` needs ``cluster_name`` (the EKS cluster the token is for); ``session`` (a ``boto3.Session``) and
    ``region`` pick the AWS credentials and STS endpoint that sign it (None: boto3's defaults). ``token`` needs
    ``kube_token``, a static bearer token. Names match :class:`nodesmith.handlers.settings.Settings`.
    """

    cluster_name: str = ""
    kube_token: str = ""
    session: Any = None
    region: str | None = None


@dataclass(frozen=True, kw_only=True)
class KubeConnection:
    """The HTTP connection settings of the client.

    ``pool_maxsize`` bounds concurrent connections to the API server (a count); ``retries`` is how often urllib3
    retries a connection that could not be made (nothing was sent, so any request is safe to repeat). urllib3
    retries nothing else: not a lost answer, not a 429 or 503 with ``Retry-After`` (its default would sleep as
    long as the header says, uncapped) — :class:`~nodesmith.adapters.kube.calls.KubeRest` decides those.
    """

    pool_maxsize: int = 50
    retries: int = 3


NO_CREDENTIALS = KubeCredentials()
"""No cluster name, token or session: enough for ``kube_auth="none"`` (the emulator)."""

DEFAULT_CONNECTION = KubeConnection()
"""50 pooled connections, 3 connection retries."""


def build_api_client(
    *,
    cluster_endpoint: str,
    kube_auth: KubeAuth = "eks",
    cluster_ca_data: str = "",
    credentials: KubeCredentials = NO_CREDENTIALS,
    connection: KubeConnection = DEFAULT_CONNECTION,
) -> ApiClient:
    """A ``kubernetes.client.ApiClient`` for ``cluster_endpoint``.

    ``cluster_ca_data`` is base64 PEM (EKS ``certificateAuthority.data``); empty means the system trust store.
    ``kube_auth`` is ``eks`` (needs ``credentials.cluster_name``), ``token`` (needs ``credentials.kube_token``)
    or ``none``. ``connection`` sizes the connection pool and its connect retries.

    Raises ``KubernetesError`` for inconsistent settings (missing token, bad CA data).
    """
    from kubernetes.client import ApiClient, Configuration
    from urllib3.util.retry import Retry

    config = Configuration(host=cluster_endpoint.rstrip("/"))
    retries = connection.retries
    config.connection_pool_maxsize = connection.pool_maxsize
    config.retries = Retry(
        total=retries, connect=retries, read=False, status=0, other=0, respect_retry_after_header=False
    )
    if cluster_ca_data:
        config.ca_cert_data = _ca_pem(cluster_ca_data)
    if kube_auth == "eks":
        source = EksTokenSource(
            cluster_name=credentials.cluster_name, session=credentials.session, region=credentials.region
        )
        config.refresh_api_key_hook = source.refresh_hook  # type: ignore[assignment]
        source.refresh_hook(config)
    elif kube_auth == "token":
        if not credentials.kube_token:
            raise KubernetesError("kube_auth=token needs a token (NODESMITH_KUBE_TOKEN)")
        config.api_key["BearerToken"] = credentials.kube_token
        config.api_key_prefix["BearerToken"] = "Bearer"
    elif kube_auth != "none":
        raise KubernetesError(f"unknown kube_auth {kube_auth!r}: expected eks, token or none")
    return ApiClient(config)
