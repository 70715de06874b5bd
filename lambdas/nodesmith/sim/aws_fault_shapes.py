"""The protocol shapes of the embedded AWS's injected faults: what AWS sends, byte for byte where it matters.

* Errors of the EC2 query protocol are ``<Response><Errors><Error><Code>..</Code><Message>..</Message></Error>
  </Errors><RequestID>..</RequestID></Response>`` (EC2 API reference, "Error codes for the Amazon EC2 API"); of
  the other query services ``<ErrorResponse><Error><Type>..</Type><Code>..</Code>..``; of the JSON services
  (SQS, DynamoDB, SSM, EventBridge) ``{"__type": "<namespace>#<Code>", "message": ..}``, and SQS adds the
  ``x-amzn-query-error: <Code>;<Sender|Receiver>`` header of its query-compatible JSON protocol.
* Codes and statuses per service and kind are :data:`ERRORS`: EC2 throttles with ``RequestLimitExceeded`` (HTTP
  503), DynamoDB with ``ProvisionedThroughputExceededException``, the others with ``ThrottlingException`` (400);
  server errors are each service's documented 500 code, or ``ServiceUnavailable`` (503).
* A CreateFleet ``instant`` answer lists ``errorSet`` items (``launchTemplateAndOverrides`` with the request's
  ``launchTemplateSpecification`` and ``overrides``, ``lifecycle``, ``errorCode``, ``errorMessage``) beside its
  ``fleetInstanceSet`` (botocore's EC2 model, ``CreateFleetError`` and ``CreateFleetInstance``).
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = [
    "EC2_NAMESPACE",
    "ERRORS",
    "Answer",
    "FleetError",
    "error_answer",
    "fleet_error_items",
    "instant_fleet_answer",
    "not_found_answer",
]

EC2_NAMESPACE = "http://ec2.amazonaws.com/doc/2016-11-15/"

Answer = tuple[int, list[tuple[str, str]], bytes]
"""An HTTP answer: status, headers, body."""

_DEFAULT = "*"
ERRORS: Mapping[str, Mapping[str, tuple[str, int, str]]] = {
    "throttle": {
        "ec2": ("RequestLimitExceeded", 503, "Request limit exceeded."),
        "dynamodb": (
            "ProvisionedThroughputExceededException",
            400,
            "The level of configured provisioned throughput for the table was exceeded.",
        ),
        _DEFAULT: ("ThrottlingException", 400, "Rate exceeded"),
    },
    "internal_error": {
        "ec2": ("InternalError", 500, "An internal error has occurred."),
        "sqs": ("InternalFailure", 500, "The request processing has failed because of an unknown error."),
        "events": ("InternalException", 500, "An internal error has occurred."),
        _DEFAULT: ("InternalServerError", 500, "An internal error has occurred."),
    },
    "unavailable": {
        _DEFAULT: ("ServiceUnavailable", 503, "The request has failed due to a temporary failure of the server."),
    },
}
"""Kind -> service -> (error code, HTTP status, message); ``"*"`` for services not named."""

_CAPACITY_MESSAGES = {
    "InsufficientInstanceCapacity": (
        "We currently do not have sufficient {type} capacity in the Availability Zone you requested ({zone}). "
        "Our system will be working on provisioning additional capacity."
    ),
    "UnfulfillableCapacity": "Unable to fulfill capacity due to your request configuration. Please adjust your "
    "request and try again.",
    "MaxSpotInstanceCountExceeded": "Max spot instance count exceeded",
}


def _request_id() -> str:
    return str(uuid.uuid4())


def error_answer(*, kind: str, service: str, json_protocol: bool, content_type: str = "") -> Answer:
    """The error answer of ``kind`` (a key of :data:`ERRORS`) from ``service`` in its protocol (``json_protocol``:
    the request carried ``X-Amz-Target``; ``content_type`` is echoed for JSON)."""
    table = ERRORS[kind]
    code, status, message = table.get(service) or table[_DEFAULT]
    request_id = _request_id()
    fault = "Receiver" if status >= 500 else "Sender"
    if json_protocol:
        headers = [
            ("Content-Type", content_type or "application/x-amz-json-1.0"),
            ("x-amzn-RequestId", request_id),
        ]
        if service == "sqs":
            headers.append(("x-amzn-query-error", f"{code};{fault}"))
        body = json.dumps({"__type": f"com.amazonaws.{service}#{code}", "message": message}).encode()
        return status, headers, body
    return _xml_error(service=service, code=code, status=status, message=message, fault=fault)


def _xml_error(*, service: str, code: str, status: int, message: str, fault: str = "Sender") -> Answer:
    request_id = _request_id()
    if service == "ec2":
        text = (
            '<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error>'
            f"<Code>{escape(code)}</Code><Message>{escape(message)}</Message>"
            f"</Error></Errors><RequestID>{request_id}</RequestID></Response>"
        )
    else:
        text = (
            f"<ErrorResponse><Error><Type>{fault}</Type><Code>{escape(code)}</Code>"
            f"<Message>{escape(message)}</Message></Error><RequestId>{request_id}</RequestId></ErrorResponse>"
        )
    return status, [("Content-Type", "text/xml"), ("x-amzn-RequestId", request_id)], text.encode()


def not_found_answer(instance_ids: Sequence[str]) -> Answer:
    """EC2's ``InvalidInstanceID.NotFound`` (HTTP 400) for ids it does not know (yet)."""
    ids = ", ".join(instance_ids)
    message = (
        f"The instance ID '{ids}' does not exist"
        if len(instance_ids) == 1
        else f"The instance IDs '{ids}' do not exist"
    )
    return _xml_error(service="ec2", code="InvalidInstanceID.NotFound", status=400, message=message)


class FleetError:
    """One CreateFleet override that answers ``code``: its launch template (``template``: the request's
    ``LaunchTemplateSpecification`` fields) and ``override`` fields (``InstanceType``, ``SubnetId``, ...), in the
    request's capacity type ``lifecycle`` (``spot`` or ``on-demand``)."""

    def __init__(self, *, template: Mapping[str, str], override: Mapping[str, str], lifecycle: str, code: str):
        self.template = dict(template)
        self.override = dict(override)
        self.lifecycle = lifecycle
        self.code = code

    def message(self) -> str:
        """The ``errorMessage`` EC2 gives with the code."""
        text = _CAPACITY_MESSAGES.get(self.code, self.code)
        return text.format(type=self.override.get("InstanceType", ""), zone=self.override.get("AvailabilityZone", ""))


def _fields(values: Mapping[str, str]) -> str:
    return "".join(f"<{k[0].lower()}{k[1:]}>{escape(v)}</{k[0].lower()}{k[1:]}>" for k, v in values.items())


def fleet_error_items(errors: Sequence[FleetError]) -> str:
    """The ``<item>`` elements of a CreateFleet ``errorSet`` for ``errors``."""
    return "".join(
        "<item><launchTemplateAndOverrides>"
        f"<launchTemplateSpecification>{_fields(e.template)}</launchTemplateSpecification>"
        f"<overrides>{_fields(e.override)}</overrides>"
        f"</launchTemplateAndOverrides><lifecycle>{escape(e.lifecycle)}</lifecycle>"
        f"<errorCode>{escape(e.code)}</errorCode><errorMessage>{escape(e.message())}</errorMessage></item>"
        for e in errors
    )


def instant_fleet_answer(errors: Sequence[FleetError]) -> Answer:
    """A CreateFleet ``instant`` answer that launched nothing: a fleet id, ``errors``, no instances (HTTP 200)."""
    fleet_id = f"fleet-{uuid.uuid4()}"
    text = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<CreateFleetResponse xmlns="{EC2_NAMESPACE}">'
        f"<requestId>{_request_id()}</requestId><fleetId>{fleet_id}</fleetId>"
        f"<errorSet>{fleet_error_items(errors)}</errorSet><fleetInstanceSet/></CreateFleetResponse>"
    )
    return 200, [("Content-Type", "text/xml")], text.encode()
