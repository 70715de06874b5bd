"""boto3 clients for the EC2 side, created lazily and cached per process (one per service x region).

Every client shares one botocore ``Config``: adaptive retry mode (client-side rate limiting on
throttles; throttling codes, 5xx and connection errors retried up to 8 times after the first attempt: botocore's
``max_attempts`` in a retries config counts the retries, so a call makes at most 9 requests), 5 s connect / 30 s
read timeouts, and a ``nodesmith`` user agent.
``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL_<SERVICE>`` are honoured by botocore itself, which is
how the embedded AWS (moto server) is reached without any code path of its own.

Responses' ISO 8601 timestamps (EC2's ``LaunchTime``, ``AttachTime``, ...) are parsed with
:meth:`datetime.datetime.fromisoformat` (:func:`parse_timestamp`) instead of botocore's dateutil parser,
which is orders of magnitude slower and runs several times per instance of a DescribeInstances. Whatever
else botocore may return (epoch numbers, RFC 822, no zone) still goes to botocore's own parser, unchanged.

Nothing here runs at import time: the first call creates the boto3 session.
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

__all__ = [
    "DEFAULT_CONFIG",
    "SERVICE_CONFIG",
    "client",
    "parse_timestamp",
    "pricing_region",
    "reset_clients",
]

_LOCK = threading.Lock()
_CLIENTS: dict[tuple[str, str | None], Any] = {}
_SESSION: Any = None

DEFAULT_CONFIG: dict[str, Any] = {
    "retries": {"mode": "adaptive", "max_attempts": 8},
    "connect_timeout": 5,
    "read_timeout": 30,
    "user_agent_extra": "nodesmith",
    "tcp_keepalive": True,
}
"""Keyword arguments of the shared ``botocore.config.Config`` (seconds for timeouts)."""

SERVICE_CONFIG: dict[str, dict[str, Any]] = {
    # Prices have fallbacks (price table, estimates): fail fast rather than retry for seconds.
    "pricing": {"retries": {"mode": "standard", "max_attempts": 2}, "read_timeout": 15},
}
"""Per-service overrides of :data:`DEFAULT_CONFIG`."""


def parse_timestamp(value: Any) -> datetime:
    """A response timestamp as a datetime: an ISO 8601 string with a zone (``2026-11-26T21:50:00.000Z``) by
    :meth:`datetime.datetime.fromisoformat`, anything else by ``botocore.utils.parse_timestamp`` (botocore's
    default, which it also falls back to). Raises what botocore's parser raises for what neither reads."""
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            parsed = None
        if parsed is not None and parsed.tzinfo is not None:
            return parsed
    from botocore.utils import parse_timestamp as botocore_parse

    result: datetime = botocore_parse(value)
    return result


def pricing_region(region: str) -> str:
    """Region of the AWS Pricing API endpoint serving ``region``.

    The Pricing API is only in us-east-1, eu-central-1 and ap-south-1 (and cn-northwest-1 for the
    China partition); us-east-1 serves every commercial region.
    """
    return "cn-northwest-1" if region.startswith("cn-") else "us-east-1"


def client(service: str, *, region: str | None = None) -> Any:
    """The cached boto3 client for ``service`` in ``region`` (None: the session's default region).

    Thread-safe; clients themselves are thread-safe in boto3. Credentials come from the standard
    chain (Lambda role, environment, profile).
    """
    key = (service, region)
    cached = _CLIENTS.get(key)
    if cached is not None:
        return cached
    with _LOCK:
        cached = _CLIENTS.get(key)
        if cached is None:
            import boto3
            import botocore.session
            from botocore.config import Config

            global _SESSION  # noqa: PLW0603 - one session per process, created on first use
            if _SESSION is None:
                core = botocore.session.get_session()
                core.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=parse_timestamp)
                _SESSION = boto3.session.Session(botocore_session=core)
            config = Config(**{**DEFAULT_CONFIG, **SERVICE_CONFIG.get(service, {})})
            cached = _SESSION.client(service, region_name=region, config=config)
            _CLIENTS[key] = cached
    return cached


def reset_clients() -> None:
    """Forget every cached client and the session (tests switching endpoints or credentials)."""
    global _SESSION  # noqa: PLW0603
    with _LOCK:
        _CLIENTS.clear()
        _SESSION = None
