"""RFC 3339 timestamps as the Kubernetes API server writes them, to and from epoch seconds (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["from_rfc3339", "to_rfc3339"]


def to_rfc3339(epoch: float) -> str:
    """Epoch seconds -> RFC 3339 UTC with second precision (``2026-01-02T03:04:05Z``), truncated."""
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def from_rfc3339(value: str | None) -> float | None:
    """RFC 3339 string -> epoch seconds (no zone means UTC); None when absent or unparseable."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()
