"""The embedded moto server with a fault layer: a WSGI middleware in front of moto's application.

:class:`FaultMiddleware` reads each request's service (the SigV4 credential scope) and operation (``X-Amz-Target``
or the query ``Action``) and, while its :class:`~nodesmith.sim.aws_faults.FaultInjector` has a plan, answers with
the plan's faults in the service's protocol (:mod:`nodesmith.sim.aws_fault_shapes`) or rewrites the exchange:

* any call of EC2, SQS, DynamoDB, SSM or EventBridge may be throttled or fail with a 5xx instead of reaching moto;
* ``CreateFleet``: the overrides chosen to fail are taken out of the request moto sees (moto launches the first
  one left) and come back as ``errorSet`` items; when all fail the answer is a fleet that launched nothing;
* ``DescribeInstances``: instances launched (``CreateFleet``, ``RunInstances``) less than the plan's lag ago are
  ``InvalidInstanceID.NotFound`` when named by id and dropped from filtered answers;
* SQS (JSON protocol): ``ReceiveMessage`` answers of a standard queue also carry due duplicates of earlier
  deliveries (a FIFO queue delivers each message once; with receipt
  handles of their own, which ``DeleteMessage``, ``DeleteMessageBatch``, ``ChangeMessageVisibility`` and its batch
  accept without moto, as SQS accepts an outdated handle), ``SendMessage`` and ``SendMessageBatch`` entries may get
  a ``DelaySeconds``.

Without a plan a request costs one path comparison and one attribute read. ``POST``/``GET`` on
:data:`~nodesmith.sim.aws_faults.CONTROL_PATH` set the plan and read the counts (the server answers them itself,
so a moto in another process is configured the same way). Requests without a SigV4 ``Authorization`` header
(moto's own ``/moto-api``) are never touched.
"""

from __future__ import annotations

import io
import json
import re
import urllib.parse
from typing import TYPE_CHECKING, Any
from xml.etree import ElementTree

from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server

from nodesmith.sim.aws_fault_shapes import (
    Answer,
    FleetError,
    error_answer,
    fleet_error_items,
    instant_fleet_answer,
    not_found_answer,
)
from nodesmith.sim.aws_faults import CONTROL_PATH, FaultInjector, FaultPlan

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

__all__ = ["FaultMiddleware", "FaultyMotoServer"]

_SCOPE = re.compile(r"Credential=[^/,]+/\d{8}/[^/,]+/([^/,]+)/aws4_request")
_FAULTY = frozenset({"ec2", "sqs", "dynamodb", "ssm", "events"})
_OVERRIDE = re.compile(r"LaunchTemplateConfigs\.(\d+)\.Overrides\.(\d+)\.(.+)")
_TEMPLATE = re.compile(r"LaunchTemplateConfigs\.(\d+)\.LaunchTemplateSpecification\.(.+)")
_INSTANCE_ID = re.compile(r">(i-[0-9a-f]+)<")
StartResponse = Any


class _Call:
    """One AWS request: service, operation, body, and whether it speaks a JSON protocol."""

    def __init__(self, environ: dict[str, Any], service: str, body: bytes) -> None:
        self.environ = environ
        self.service = service
        self.body = body
        target = str(environ.get("HTTP_X_AMZ_TARGET", ""))
        self.json = bool(target)
        self.form: list[tuple[str, str]] = []
        if self.json:
            self.operation = target.rsplit(".", 1)[-1]
        else:
            self.form = urllib.parse.parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)
            self.operation = next((v for k, v in self.form if k == "Action"), "")

    @property
    def name(self) -> str:
        return f"{self.service}:{self.operation}"

    def document(self) -> dict[str, Any]:
        """The JSON body (empty when not JSON)."""
        if not self.json or not self.body:
            return {}
        loaded = json.loads(self.body)
        return loaded if isinstance(loaded, dict) else {}


class FaultMiddleware:
    """WSGI middleware applying ``injector``'s plan to the requests for ``app`` (see the module docstring)."""

    def __init__(self, app: Callable[..., Iterable[bytes]], injector: FaultInjector) -> None:
        self.app = app
        self.injector = injector

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == CONTROL_PATH:
            return self._control(environ, start_response)
        if not self.injector.active:
            return self.app(environ, start_response)
        scope = _SCOPE.search(str(environ.get("HTTP_AUTHORIZATION", "")))
        if scope is None or scope.group(1) not in _FAULTY:
            return self.app(environ, start_response)
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        call = _Call(environ, scope.group(1), body)
        kind = self.injector.call_error(service=call.service, operation=call.operation)
        if kind is not None:
            content_type = str(environ.get("CONTENT_TYPE", ""))
            return _send(start_response, error_answer(kind=kind, service=call.service, json_protocol=call.json,
                                                      content_type=content_type))  # fmt: skip
        handler = _HANDLERS.get(call.name)
        answer = handler(self, call) if handler is not None else self._forward(call, body)
        return _send(start_response, answer)

    # -- plumbing ----------------------------------------------------------------------------------

    def _forward(self, call: _Call, body: bytes) -> Answer:
        """Moto's answer to ``call`` with ``body``."""
        environ = dict(call.environ)
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        captured: dict[str, Any] = {}
        chunks: list[bytes] = []

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], Any]:
            captured["status"], captured["headers"] = int(status.split(" ", 1)[0]), list(headers)
            return chunks.append

        result = self.app(environ, start)
        try:
            chunks.extend(result)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
        return captured["status"], captured["headers"], b"".join(chunks)

    def _control(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") == "POST":
            length = int(environ.get("CONTENT_LENGTH") or 0)
            raw = json.loads(environ["wsgi.input"].read(length) or b"null")
            try:
                self.injector.configure(FaultPlan.model_validate(raw) if raw is not None else None)
            except ValueError as exc:
                return _send(start_response, (400, [("Content-Type", "text/plain")], str(exc).encode()))
            return _send(start_response, (200, [("Content-Type", "application/json")], b"{}"))
        counts = self.injector.counts().model_dump_json().encode()
        return _send(start_response, (200, [("Content-Type", "application/json")], counts))

    # -- EC2 -----------------------------------------------------------------------------------------

    def _create_fleet(self, call: _Call) -> Answer:
        overrides: dict[tuple[int, int], dict[str, str]] = {}
        templates: dict[int, dict[str, str]] = {}
        for key, value in call.form:
            if match := _OVERRIDE.fullmatch(key):
                overrides.setdefault((int(match[1]), int(match[2])), {})[match[3]] = value
            elif match := _TEMPLATE.fullmatch(key):
                templates.setdefault(int(match[1]), {})[match[2]] = value
        order = sorted(overrides)
        failing = self.injector.fleet_errors(len(order))
        if not failing:
            return self._remember_launches(self._forward(call, call.body))
        lifecycle = next((v for k, v in call.form if k == "TargetCapacitySpecification.DefaultTargetCapacityType"), "")
        errors = [
            FleetError(template=templates.get(order[i][0], {}), override=overrides[order[i]],
                       lifecycle=lifecycle or "on-demand", code=code)
            for i, code in sorted(failing.items())
        ]  # fmt: skip
        if len(failing) == len(order):
            return instant_fleet_answer(errors)
        dropped = {order[i] for i in failing}
        status, headers, body = self._forward(call, _without_overrides(call.form, dropped))
        if status == 200:
            items = fleet_error_items(errors)
            text = body.decode()
            if "<errorSet/>" in text:
                text = text.replace("<errorSet/>", f"<errorSet>{items}</errorSet>", 1)
            elif "<errorSet>" in text:
                text = text.replace("<errorSet>", f"<errorSet>{items}", 1)
            else:
                text = text.replace("</CreateFleetResponse>", f"<errorSet>{items}</errorSet></CreateFleetResponse>", 1)
            body = text.encode()
        return self._remember_launches((status, headers, body))

    def _remember_launches(self, answer: Answer) -> Answer:
        if answer[0] == 200:
            self.injector.remember_launch(_INSTANCE_ID.findall(answer[2].decode()))
        return answer

    def _run_instances(self, call: _Call) -> Answer:
        return self._remember_launches(self._forward(call, call.body))

    def _describe_instances(self, call: _Call) -> Answer:
        asked = [v for k, v in call.form if re.fullmatch(r"InstanceId\.\d+", k)]
        hidden = self.injector.hidden(asked)
        if hidden:
            self.injector.count("describe_not_found", call.name)
            return not_found_answer(sorted(hidden))
        status, headers, body = self._forward(call, call.body)
        if status != 200 or not self.injector.plan.describe_lag_seconds:
            return status, headers, body
        listed = _INSTANCE_ID.findall(body.decode())
        hidden = self.injector.hidden(listed)
        if not hidden:
            return status, headers, body
        self.injector.count("describe_hidden", call.name, len(hidden))
        return status, headers, _drop_instances(body, hidden)

    # -- SQS -----------------------------------------------------------------------------------------

    def _receive(self, call: _Call) -> Answer:
        status, headers, body = self._forward(call, call.body)
        if status != 200 or not call.json:
            return status, headers, body
        request, answer = call.document(), json.loads(body or b"{}")
        queue_url = str(request.get("QueueUrl", ""))
        if queue_url.endswith(".fifo"):
            return status, headers, body  # FIFO queues deliver each message once
        messages = list(answer.get("Messages") or [])
        # copies of earlier deliveries first: a message is never duplicated within the receive that delivered it
        extra = self.injector.take_duplicates(queue_url, int(request.get("MaxNumberOfMessages") or 1) - len(messages))
        self.injector.received(queue_url, messages)
        if not extra:
            return status, headers, body
        answer["Messages"] = messages + extra
        return status, headers, json.dumps(answer).encode()

    def _delete_or_change(self, call: _Call) -> Answer:
        if not call.json:
            return self._forward(call, call.body)
        request = call.document()
        if "Entries" not in request:  # DeleteMessage, ChangeMessageVisibility
            if self.injector.is_duplicate_handle(str(request.get("ReceiptHandle", ""))):
                return 200, [("Content-Type", str(call.environ.get("CONTENT_TYPE", "")))], b"{}"
            return self._forward(call, call.body)
        entries = list(request.get("Entries") or [])
        ours = [e for e in entries if self.injector.is_duplicate_handle(str(e.get("ReceiptHandle", "")))]
        if not ours:
            return self._forward(call, call.body)
        rest = [e for e in entries if e not in ours]
        answer: dict[str, Any] = {"Successful": [], "Failed": []}
        status, headers = 200, [("Content-Type", str(call.environ.get("CONTENT_TYPE", "")))]
        if rest:
            status, headers, body = self._forward(call, json.dumps({**request, "Entries": rest}).encode())
            if status != 200:
                return status, headers, body
            answer = {"Successful": [], "Failed": [], **json.loads(body or b"{}")}
        answer["Successful"] = list(answer.get("Successful") or []) + [{"Id": e.get("Id")} for e in ours]
        return status, headers, json.dumps(answer).encode()

    def _send_messages(self, call: _Call) -> Answer:
        request = call.document()
        if not call.json or str(request.get("QueueUrl", "")).endswith(".fifo"):
            return self._forward(call, call.body)  # FIFO queues take no per-message delay
        delay = self.injector.plan.sqs.delay_seconds
        changed = False
        if "Entries" in request:
            for entry in request["Entries"]:
                if "DelaySeconds" not in entry and self.injector.delay_message(call.name):
                    entry["DelaySeconds"], changed = delay, True
        elif "DelaySeconds" not in request and self.injector.delay_message(call.name):
            request["DelaySeconds"], changed = delay, True
        return self._forward(call, json.dumps(request).encode() if changed else call.body)


_HANDLERS: dict[str, Callable[[FaultMiddleware, _Call], Answer]] = {
    "ec2:CreateFleet": FaultMiddleware._create_fleet,
    "ec2:RunInstances": FaultMiddleware._run_instances,
    "ec2:DescribeInstances": FaultMiddleware._describe_instances,
    "sqs:ReceiveMessage": FaultMiddleware._receive,
    "sqs:DeleteMessage": FaultMiddleware._delete_or_change,
    "sqs:DeleteMessageBatch": FaultMiddleware._delete_or_change,
    "sqs:ChangeMessageVisibility": FaultMiddleware._delete_or_change,
    "sqs:ChangeMessageVisibilityBatch": FaultMiddleware._delete_or_change,
    "sqs:SendMessage": FaultMiddleware._send_messages,
    "sqs:SendMessageBatch": FaultMiddleware._send_messages,
}


def _send(start_response: StartResponse, answer: Answer) -> list[bytes]:
    status, headers, body = answer
    kept = [(k, v) for k, v in headers if k.lower() not in ("content-length", "transfer-encoding")]
    start_response(f"{status} {'OK' if status == 200 else 'Error'}", [*kept, ("Content-Length", str(len(body)))])
    return [body]


def _without_overrides(form: list[tuple[str, str]], dropped: set[tuple[int, int]]) -> bytes:
    """The CreateFleet form without the ``dropped`` (config, override) indexes, both renumbered from 1 (a config
    left without overrides goes too: moto would launch its template as it is)."""
    kept_overrides: dict[int, list[int]] = {}
    for key, _ in form:
        if match := _OVERRIDE.fullmatch(key):
            index = (int(match[1]), int(match[2]))
            if index not in dropped and index[1] not in kept_overrides.setdefault(index[0], []):
                kept_overrides[index[0]].append(index[1])
    configs = sorted(c for c, kept in kept_overrides.items() if kept)
    config_number = {c: n for n, c in enumerate(configs, start=1)}
    out: list[tuple[str, str]] = []
    for key, value in form:
        match = re.match(r"LaunchTemplateConfigs\.(\d+)\.(.*)", key)
        if match is None:
            out.append((key, value))
            continue
        config = int(match[1])
        if config not in config_number:
            continue
        rest = match[2]
        if override := re.match(r"Overrides\.(\d+)\.(.*)", rest):
            if int(override[1]) not in kept_overrides[config]:
                continue
            rest = f"Overrides.{kept_overrides[config].index(int(override[1])) + 1}.{override[2]}"
        out.append((f"LaunchTemplateConfigs.{config_number[config]}.{rest}", value))
    return urllib.parse.urlencode(out).encode()


def _drop_instances(body: bytes, hidden: set[str]) -> bytes:
    """A DescribeInstances answer without the ``hidden`` instances (and reservations left empty)."""
    root = ElementTree.fromstring(body)
    if root.tag.startswith("{"):
        ElementTree.register_namespace("", root.tag[1:].split("}", 1)[0])
    reservations = root.find("{*}reservationSet")
    if reservations is None:
        return body
    for reservation in list(reservations):
        instances = reservation.find("{*}instancesSet")
        if instances is None:
            continue
        for item in list(instances):
            if item.findtext("{*}instanceId", default="") in hidden:
                instances.remove(item)
        if len(instances) == 0:
            reservations.remove(reservation)
    return bytes(ElementTree.tostring(root, encoding="utf-8", xml_declaration=True))


class FaultyMotoServer(ThreadedMotoServer):
    """moto's threaded server with :class:`FaultMiddleware` in front (``faults`` is its injector, no plan yet)."""

    def __init__(self, *, ip_address: str = "127.0.0.1", port: int = 0, verbose: bool = False) -> None:
        super().__init__(ip_address=ip_address, port=port, verbose=verbose)
        self.faults = FaultInjector()

    def _server_entry(self) -> None:  # moto's, with the middleware around its application
        app = FaultMiddleware(DomainDispatcherApplication(create_backend_app), self.faults)
        self._server = make_server(self._ip_address, self._port, app, True, request_handler=MotoRequestHandler)
        self._server_ready_event.set()
        self._server.serve_forever()
