"""Kubernetes timestamps: RFC 3339 in UTC with second precision (``metav1.Time``)."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["parse_rfc3339", "rfc3339"]


def rfc3339(epoch: float) -> str:
    """``2024-05-01T12:00:00Z`` for epoch seconds."""
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str) -> float:
    """Epoch seconds of a Kubernetes timestamp (``Z`` or an offset)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
