"""moto for ``bench/interruptions.py``, in a process of its own: :func:`moto_host` serves it with the bench's
shortcuts (:func:`patch_moto`, which keep moto's quadratic and per-request paths out of the measurement; the
world lists them in ``EMULATOR_SHORTCUTS``) and answers the simulated kubelet's instance reads."""

from __future__ import annotations

import gc
import threading
import time
from typing import Any

__all__ = ["moto_host", "patch_moto"]


def moto_host(cluster_name: str, conn: Any) -> None:
    """``multiprocessing`` target: moto with the bench's shortcuts (:func:`patch_moto`), seeded for
    ``cluster_name``; sends ``(endpoint_url, environ)`` on ``conn`` and serves until the process is ended.
    ``"instances"`` on ``conn`` asks for the live instances, ``"freeze"`` for :func:`gc.freeze` (answered
    ``"frozen"``)."""
    from nodesmith.sim import aws as embedded_aws

    patch_moto()
    embedded = embedded_aws.start()
    embedded_aws.seed(cluster_name=cluster_name)
    conn.send((embedded.endpoint_url, embedded.environ))
    region = embedded.environ["AWS_DEFAULT_REGION"]
    while True:  # serve the simulated kubelet's instance reads (and one freeze) until the process is ended
        asked = conn.recv()
        if asked == "instances":
            conn.send(_live_instances(cluster_name, region))
        elif asked == "freeze":  # the world is set up: full garbage collections skip it from now on
            gc.freeze()
            conn.send("frozen")


def _live_instances(cluster_name: str, region: str) -> list[dict[str, Any]]:
    """What the adapter's ``list_instances`` DescribeInstances returns (our live instances), read from moto's
    memory in boto3's shape, for :func:`~nodesmith.adapters.aws.instances.instance_from_ec2`, without the
    XML round trip (a kubelet knows its own instance; only the simulation needs the list)."""
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends

    from nodesmith.adapters.aws.instances import LIVE_STATES, NODECLASS_TAG, NODEPOOL_TAG

    backend = ec2_backends[DEFAULT_ACCOUNT_ID][region]
    out: list[dict[str, Any]] = []
    for inst in list(backend.all_instances()):
        tags = dict(backend.tags.get(inst.id, {}))
        if inst.state not in LIVE_STATES or tags.get(f"kubernetes.io/cluster/{cluster_name}") != "owned":
            continue
        if NODEPOOL_TAG not in tags or NODECLASS_TAG not in tags:
            continue
        out.append(
            {
                "InstanceId": inst.id,
                "InstanceType": inst.instance_type,
                "Placement": {"AvailabilityZone": inst.placement.zone},
                "State": {"Name": inst.state},
                "LaunchTime": inst.launch_time,
                "PrivateDnsName": inst.private_dns_name,
                "ImageId": inst.image_id,
                "SubnetId": inst.subnet_id or "",
                "InstanceLifecycle": inst.lifecycle or "",
                "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
            }
        )
    return out


def _patch_jsonpath() -> None:
    """Memoise ``jsonpath_ng.ext.parse`` by expression text: a compiled expression is only read by ``find``,
    so sharing one is the same answer (moto imports ``parse`` from the module at every call)."""
    import functools

    import jsonpath_ng.ext

    parse = getattr(jsonpath_ng.ext, "parse")  # noqa: B009 - not in the module's __all__
    setattr(jsonpath_ng.ext, "parse", functools.lru_cache(maxsize=256)(parse))  # noqa: B010


def patch_moto() -> None:
    """Take moto's quadratic paths out of the measurement (same answers):

    * SQS: the retention check of every received message reads the retention period instead of all
      queue attributes, and a queue's attributes (whose Approximate* counts scan every message, read on
      every SendMessage) are recomputed at most once a second (and at once after SetQueueAttributes);
    * SQS: a queue's visible messages are found with one clock read per scan, not two per message
      (every waiting long poll rescans the queue on each new message);
    * DynamoDB: a conditional write checks and writes under one lock, atomic as in DynamoDB (moto's
      server threads could otherwise both pass the check of one idempotency record or lease), and a
      Query or Scan reads under the same lock (moto's threads changed a table's items while a Query
      iterated them: a 500, "dictionary changed size during iteration");
    * EC2: an instance's tags are read from the tag store by id instead of filtering every tag of the
      account (done per instance by every DescribeInstances);
    * SQS: a receive copies the queue's in-flight FIFO messages before reading their groups (moto's
      server threads changed the set mid-iteration, a 500 on ReceiveMessage);
    * SQS: a receipt handle is matched without building a list per message, and a delete finds its
      message in one scan of the queue instead of two plus a rebuild (every entry of every
      DeleteMessageBatch and ChangeMessageVisibilityBatch scans the 2,000-odd messages of a burst);
    * server: the backend serving a host name (``ec2.us-east-1.amazonaws.com``) is looked up once per
      name, not by trying moto's few hundred URL patterns on every request under the dispatcher's one
      lock (a tenth of the moto process's CPU at 1,000 nodes, and every request queued behind it);
    * query protocol (EC2, SQS): whether any parameter starts with a prefix is answered by a binary search
      in the request's sorted parameter names, not a scan of them all per structure member (quadratic in
      a CreateFleet's overrides: 13% of the moto process's CPU samples at 1,000 nodes);
    * server: an action's handler is looked up in a per-class list of method names made once, not by
      ``inspect.getmembers`` on every request (5%);
    * SQS: the current time in milliseconds is ``time.time()``, not a ``datetime`` difference, in the
      per-message checks behind a queue's Approximate* counts (5%);
    * response serializer (EC2's DescribeInstances above all): the attribute names to try for a member
      are worked out once per (object class, member shape), and a member's response transformer once
      per key path, instead of for every attribute of every object in every response (:func:`_patch_serializer`);
    * EventBridge: a JSONPath expression is compiled once per text, not for each of the eight paths of the
      default input template of every event sent to a target (moto builds a new parser each time: 15 of
      the 15.5 s that 900 events took in ``PutEvents``, which spread a 1,000-node burst's delivery over
      tens of seconds).
    """
    _patch_serializer()
    _patch_jsonpath()
    from moto.ec2.models.core import TaggedEC2Resource
    from moto.ec2.utils import EC2_PREFIX_TO_RESOURCE, get_prefix
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication
    from moto.sqs.models import Queue, SQSBackend

    def valid(self: Any, queue_name: str, message: Any) -> bool:
        queue = self.get_queue(queue_name)
        return bool(int(queue.message_retention_period) + message.sent_timestamp / 1000 > time.time())

    attributes = Queue.attributes.fget  # type: ignore[attr-defined]
    set_attributes = Queue._set_attributes

    def cached_attributes(self: Any) -> dict[str, Any]:
        entry = self.__dict__.get("_bench_attributes")
        if entry is None or time.monotonic() - entry[0] > 1.0:
            entry = (time.monotonic(), attributes(self))
            self.__dict__["_bench_attributes"] = entry
        return dict(entry[1])

    def set_and_forget(self: Any, *args: Any, **kwargs: Any) -> Any:
        self.__dict__.pop("_bench_attributes", None)
        return set_attributes(self, *args, **kwargs)

    def get_tags(self: Any) -> list[dict[str, str]]:
        rid = getattr(self, "id", None)
        if not rid:
            return []
        kind = EC2_PREFIX_TO_RESOURCE.get(get_prefix(rid), "")
        tags = self.ec2_backend.tags.get(rid, {})
        return [{"resource_id": rid, "key": k, "value": v, "resource_type": kind} for k, v in tags.items()]

    from moto.core.utils import unix_time_millis

    def visible_messages(self: Any) -> list[Any]:
        now = unix_time_millis()
        return [m for m in self._messages if now > m.visible_at and not now < m.delayed_until]

    from moto.dynamodb.models import DynamoDBBackend

    write_lock = threading.RLock()

    def atomic(write: Any) -> Any:
        def locked(self: Any, *args: Any, **kwargs: Any) -> Any:
            with write_lock:
                return write(self, *args, **kwargs)

        return locked

    for name in ("put_item", "update_item", "delete_item", "transact_write_items", "query", "scan"):
        setattr(DynamoDBBackend, name, atomic(getattr(DynamoDBBackend, name)))

    def pending_groups(self: Any) -> set[str]:
        return {m.group_id for m in list(self._pending_messages) if m.group_id is not None}

    from moto.sqs.exceptions import ReceiptHandleIsInvalid
    from moto.sqs.models import Message

    def had_handle(self: Any, receipt_handle: str) -> bool:
        return bool(receipt_handle == self.receipt_handle or receipt_handle in self._old_receipt_handles)

    def delete_in_one_scan(self: Any, receipt_handle: str) -> None:
        if receipt_handle in self.deleted_messages:
            return  # already deleted: moto (and SQS) accept it again
        for i, m in enumerate(self._messages):
            if receipt_handle == m.receipt_handle or receipt_handle in m._old_receipt_handles:
                self.pending_messages.discard(m)
                self.deleted_messages.update(m.all_receipt_handles)
                self._messages = self._messages[:i] + self._messages[i + 1 :]  # a new list, as moto assigns one
                return
        raise ReceiptHandleIsInvalid()

    backend_for_host = DomainDispatcherApplication.get_backend_for_host
    backends_by_host: dict[str | None, Any] = {}

    def cached_backend_for_host(self: Any, host: str | None) -> Any:
        if host not in backends_by_host:  # a pure function of the host name: moto's patterns never change
            backends_by_host[host] = backend_for_host(self, host)
        return backends_by_host[host]

    DomainDispatcherApplication.get_backend_for_host = cached_backend_for_host  # type: ignore[method-assign]
    Message.had_receipt_handle = had_handle  # type: ignore[method-assign]
    Queue.delete_message = delete_in_one_scan  # type: ignore[method-assign]
    Queue.pending_message_groups = property(pending_groups)  # type: ignore[assignment, method-assign]
    SQSBackend.is_message_valid_based_on_retention_period = valid  # type: ignore[method-assign]
    Queue.messages = property(visible_messages)  # type: ignore[assignment, method-assign]
    Queue.attributes = property(cached_attributes)  # type: ignore[assignment, method-assign]
    Queue._set_attributes = set_and_forget  # type: ignore[method-assign]
    TaggedEC2Resource.get_tags = get_tags  # type: ignore[method-assign]

    import bisect
    import functools

    import moto.core.responses
    import moto.sqs.models
    from moto.core.parse import QueryParser

    def gonna_recurse(self: Any, query_params: dict[str, Any], prefix: str) -> bool:
        if prefix == "":
            return False
        # One sorted list per request: the parse passes the same (never written) parameters object all the
        # way down. Holding it keeps its id from being reused. Not len(query_params): werkzeug's
        # CombinedMultiDict rebuilds its key set for that, which made the check as quadratic as moto's scan.
        cached = self.__dict__.get("_bench_keys")
        if cached is None or cached[0] is not query_params:
            cached = (query_params, sorted(query_params))
            self.__dict__["_bench_keys"] = cached
        keys = cached[1]
        at = bisect.bisect_left(keys, prefix)  # the keys starting with prefix, if any, begin here
        return not (at < len(keys) and keys[at].startswith(prefix))

    QueryParser._gonna_recurse = gonna_recurse  # type: ignore[method-assign]
    moto.core.responses.method_names_from_class = functools.cache(moto.core.responses.method_names_from_class)  # type: ignore[attr-defined]
    millis = moto.sqs.models.unix_time_millis  # type: ignore[attr-defined]
    moto.sqs.models.unix_time_millis = lambda dt=None: time.time() * 1000.0 if dt is None else millis(dt)  # type: ignore[attr-defined]


def _patch_serializer() -> None:
    """Memoise what moto's ``AttributePicker`` works out for every member of every object it serializes:
    the candidate attribute names (its alias providers read only the object's class, its ``Meta`` and the
    member's shape and parent shape) and the response transformer of the member's key path. The values
    are still read from each object, in the same order, so the answers are the same. A DescribeInstances
    of 10 instances (client and server) cost 33-42 ms of CPU with the other shortcuts and 24 ms with this
    one; serializing it was the moto process's largest cost while 1,000 nodes are cordoned."""
    from moto.core.constants import MISSING
    from moto.core.serialize import AttributePicker, AttributePickerContext
    from moto.core.utils import get_value

    names: dict[tuple[Any, ...], tuple[Any, Any, tuple[str, ...]]] = {}
    transforms: dict[tuple[int, str], tuple[Any, Any]] = {}

    def candidates(self: AttributePicker, context: AttributePickerContext) -> tuple[str, ...]:
        shape = context.shape
        parent = getattr(shape, "parent", None)
        obj = context.obj
        key = (type(self), type(obj), id(getattr(obj, "Meta", None)), context.key, id(shape), id(parent))
        entry = names.get(key)
        if entry is None or entry[0] is not shape or entry[1] is not parent:
            if len(names) > 100_000:
                names.clear()
            entry = (shape, parent, tuple(self.get_possible_keys(context)))
            names[key] = entry  # holds shape and parent, so their ids are not reused while cached
        return entry[2]

    def transform_for(self: AttributePicker, key_path: str) -> Any:
        table = self.response_transformers
        if not table:
            return None
        entry = transforms.get((id(table), key_path))
        if entry is None or entry[0] is not table:
            found = next((t for path, t in table.items() if key_path.endswith(path)), None)
            entry = (table, found)
            transforms[(id(table), key_path)] = entry
        return entry[1]

    def pick(self: AttributePicker, context: AttributePickerContext) -> Any:
        obj = context.obj
        value = None
        for name in candidates(self, context):
            found = get_value(obj, name, MISSING)
            if found is not MISSING:
                value = found
                break
        transform = transform_for(self, f"{context.key_path}.{context.key}")
        return value if transform is None else transform(value)

    AttributePicker.__call__ = pick  # type: ignore[method-assign]
