"""Kubernetes API errors as the emulator raises and serves them.

Every failure the emulator reports is an :class:`ApiError`; the HTTP layer turns it into a
``meta/v1 Status`` body with the same ``code`` and ``reason`` a real API server would send, so the
official client raises ``ApiException`` with the usual ``status``. Reasons follow
``k8s.io/apimachinery/pkg/apis/meta/v1`` ``StatusReason``.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ApiError",
    "already_exists",
    "bad_request",
    "conflict",
    "expired",
    "internal_error",
    "invalid",
    "not_found",
    "status_body",
    "too_large_resource_version",
    "too_many_requests",
    "unsupported_media_type",
]


class ApiError(Exception):
    """A failed API call: HTTP ``code``, Status ``reason`` and ``message``, optional ``details``."""

    def __init__(self, code: int, reason: str, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details or {}

    def status(self) -> dict[str, Any]:
        """This error as a ``meta/v1 Status`` object (``status: Failure``)."""
        return status_body(code=self.code, reason=self.reason, message=self.message, details=self.details)


def status_body(
    *, code: int, reason: str = "", message: str = "", details: dict[str, Any] | None = None, success: bool = False
) -> dict[str, Any]:
    """A ``meta/v1 Status`` object; ``success=True`` gives the ``status: Success`` form."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if success else "Failure",
        "code": code,
    }
    if message:
        body["message"] = message
    if reason:
        body["reason"] = reason
    if details:
        body["details"] = details
    return body


def _details(kind: str, name: str, group: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": kind}
    if group:
        details["group"] = group
    return details


def not_found(plural: str, name: str, group: str = "") -> ApiError:
    """404 NotFound: ``pods "x" not found`` (``plural.group`` for grouped resources)."""
    qualified = f"{plural}.{group}" if group else plural
    return ApiError(404, "NotFound", f'{qualified} "{name}" not found', details=_details(plural, name, group))


def already_exists(plural: str, name: str, group: str = "") -> ApiError:
    """409 AlreadyExists on create."""
    qualified = f"{plural}.{group}" if group else plural
    return ApiError(409, "AlreadyExists", f'{qualified} "{name}" already exists', details=_details(plural, name, group))


def conflict(plural: str, name: str, group: str = "", why: str = "") -> ApiError:
    """409 Conflict: a stale ``resourceVersion`` or a failed UID precondition."""
    qualified = f"{plural}.{group}" if group else plural
    why = why or "the object has been modified; please apply your changes to the latest version and try again"
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified} "{name}": {why}',
        details=_details(plural, name, group),
    )


def bad_request(message: str) -> ApiError:
    """400 BadRequest (malformed body, unsupported selector)."""
    return ApiError(400, "BadRequest", message)


def invalid(kind: str, name: str, message: str) -> ApiError:
    """422 Invalid: the object fails validation."""
    return ApiError(422, "Invalid", f'{kind} "{name}" is invalid: {message}', details={"name": name, "kind": kind})


def expired(message: str = "too old resource version") -> ApiError:
    """410 Expired: a watch asked for a resourceVersion older than the retained history."""
    return ApiError(410, "Expired", message)


def too_large_resource_version(wanted: int, current: int) -> ApiError:
    """504 "Too large resource version": a list or watch asked for a version newer than the store's (the API
    server's watch cache answers so once it has waited for it: ``storage.NewTooLargeResourceVersionError``)."""
    return ApiError(504, "Timeout", f"Too large resource version: {wanted}, current: {current}")


def too_many_requests(
    message: str, *, causes: list[dict[str, str]] | None = None, retry_after_seconds: int = 0
) -> ApiError:
    """429 TooManyRequests, as the Eviction API answers when a PodDisruptionBudget forbids it (``causes``) or
    API Priority and Fairness rejects a request (``retry_after_seconds``: ``details.retryAfterSeconds``, which the
    HTTP layer also sends as the ``Retry-After`` header, as the API server's response writers do)."""
    details: dict[str, Any] = {}
    if causes:
        details["causes"] = causes
    if retry_after_seconds > 0:
        details["retryAfterSeconds"] = retry_after_seconds
    return ApiError(429, "TooManyRequests", message, details=details)


def internal_error(message: str) -> ApiError:
    """500 InternalError."""
    return ApiError(500, "InternalError", message)


def unsupported_media_type(content_type: str, accepted: str) -> ApiError:
    """415 UnsupportedMediaType for a patch type the resource does not accept."""
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format ({content_type}) - accepted media types include: {accepted}",
    )
