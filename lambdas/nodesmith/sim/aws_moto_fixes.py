"""Five of :func:`nodesmith.sim.aws.fix_moto`'s fixes to moto's models: an EventBridge target without an input
transformer receives the event itself (:func:`deliver_events_whole`), an EC2 resource's tags are read by its id
(:func:`tags_by_resource_id`), an instance is found by its id without copying every reservation
(:func:`instances_by_id`), a FIFO queue drops a repeated deduplication id for five minutes even after the
first message was deleted (:func:`fifo_deduplication_outlives_deletion`), and an EC2 fleet's instances get their
launch template's security groups (:func:`fleet_security_groups_from_template`). All patch moto's classes in this
process; call them through ``fix_moto``."""

from __future__ import annotations

import threading
from typing import Any

__all__ = [
    "EVENT_ENVELOPE",
    "deliver_events_whole",
    "fifo_deduplication_outlives_deletion",
    "fleet_security_groups_from_template",
    "instances_by_id",
    "tags_by_resource_id",
]

DEDUPLICATION_SECONDS = 300
"""SQS's deduplication interval for FIFO queues (Amazon SQS developer guide, "Using the message deduplication ID")."""


EVENT_ENVELOPE = ("version", "id", "detail-type", "source", "account", "time", "region", "resources", "detail")
"""The fields of an event EventBridge delivers to a target that has no input transformer (``Input``,
``InputPath`` or ``InputTransformer``): the event itself (EventBridge user guide, "Amazon EventBridge events")."""


def deliver_events_whole(parser: Any) -> None:
    """Make moto deliver an event to a target without an input transformer as EventBridge does: the event's
    envelope (:data:`EVENT_ENVELOPE`), ``account`` included, as it was put; a target's own transformer is still
    applied by moto. ``parser`` is moto's ``EventTemplateParser``."""
    transform = parser.parse

    def parse(input_template: str | None, input_paths_map: dict[str, Any], event: dict[str, Any]) -> dict[str, Any]:
        if input_template or input_paths_map:
            return transform(input_template, input_paths_map, event)  # type: ignore[no-any-return]
        return {key: event[key] for key in EVENT_ENVELOPE if key in event}

    parser.parse = staticmethod(parse)


def tags_by_resource_id() -> None:
    """Make moto's ``TaggedEC2Resource.get_tags`` read the resource's own tags by its id, as EC2 renders a resource's
    tags: ``resource_id``, ``key``, ``value`` and ``resource_type`` per tag (the answer moto's scan of every tag of the
    account, filtered by ``resource-id``, gives)."""
    from moto.ec2.models.core import TaggedEC2Resource
    from moto.ec2.utils import EC2_PREFIX_TO_RESOURCE, get_prefix

    def get_tags(self: Any) -> list[dict[str, str]]:
        resource_id = getattr(self, "id", None)
        if not resource_id:
            return []
        kind = EC2_PREFIX_TO_RESOURCE.get(get_prefix(resource_id), "")
        own = dict(self.ec2_backend.tags.get(resource_id) or {})
        return [{"resource_id": resource_id, "key": k, "value": v, "resource_type": kind} for k, v in own.items()]

    TaggedEC2Resource.get_tags = get_tags  # type: ignore[method-assign]


def instances_by_id() -> None:
    """Make moto's ``InstanceBackend.get_instance`` find an instance through an index by id kept on the backend, filled
    from the newest reservations on a miss, where moto copied every reservation of the account for each lookup. moto
    looks up every instance it launches (to attach its root volume), so a fleet of N instances cost N such copies:
    quadratic, beyond reach for a 20,000-node world. moto never removes an instance from its reservation, so an
    indexed instance stays valid; an unknown id still raises moto's ``InvalidInstanceID.NotFound``."""
    from moto.ec2.exceptions import InvalidInstanceIdError
    from moto.ec2.models.instances import InstanceBackend

    def get_instance(self: Any, instance_id: str) -> Any:
        index: dict[str, Any] = self.__dict__.setdefault("_instances_by_id", {})
        found = index.get(instance_id)
        if found is not None:
            return found
        for reservation in reversed(list(self.reservations.values())):  # the newest first: a launch looks up its own
            for instance in list(reservation.instances):
                index.setdefault(instance.id, instance)
            if instance_id in index:
                return index[instance_id]
        raise InvalidInstanceIdError(instance_id)

    InstanceBackend.get_instance = get_instance  # type: ignore[method-assign]


def fifo_deduplication_outlives_deletion(queue_class: Any) -> None:
    """Make a FIFO queue of moto (``queue_class``: moto's ``Queue``) drop a message whose deduplication id (within its
    message group when the queue's ``DeduplicationScope`` is ``messageGroup``) it accepted in the last
    :data:`DEDUPLICATION_SECONDS`, as SQS does: "any messages sent with the same message deduplication ID are accepted
    successfully but aren't delivered during the 5-minute deduplication interval", whether or not the first one was
    received and deleted meanwhile. moto compares only with the messages still on the queue."""
    add_message = queue_class.add_message
    lock = threading.Lock()

    def deduplicated(self: Any, message: Any) -> None:
        key = message.deduplication_id
        if not self.fifo_queue or key is None:
            add_message(self, message)
            return
        if self.attributes.get("DeduplicationScope") == "messageGroup":
            key = (message.group_id, key)
        now = message.sent_timestamp / 1000
        with lock:
            seen: dict[Any, float] = self.__dict__.setdefault("_nodesmith_deduplication", {})
            for old in [k for k, at in seen.items() if now - at >= DEDUPLICATION_SECONDS]:
                del seen[old]
            if key in seen:
                return
            seen[key] = now
        add_message(self, message)

    queue_class.add_message = deduplicated


def _template_security_groups(data: dict[str, Any]) -> list[str]:
    """The security group ids a launch template's ``data`` gives its instances: ``SecurityGroupIds``, else the
    ``Groups`` of its primary network interface (``DeviceIndex`` 0), else none (EC2 API reference,
    ``RequestLaunchTemplateData``)."""
    if data.get("SecurityGroupIds"):
        return list(data["SecurityGroupIds"])
    for interface in data.get("NetworkInterfaces") or []:
        if int(interface.get("DeviceIndex", 0)) == 0 and interface.get("Groups"):
            return list(interface["Groups"])
    return []


def fleet_security_groups_from_template() -> None:
    """Make moto's ``CreateFleet`` launch each instance into its launch template's security groups
    (:func:`_template_security_groups`), as EC2 does. moto reads a ``GroupSet`` key that launch template data never
    has, so every fleet instance landed in the VPC's ``default`` group: a node Karpenter's drift check then finds
    drifted (``SecurityGroupDrift``) the moment it is described."""
    from moto.ec2.models.fleets import Fleet

    def with_template_groups(launch: Any) -> Any:
        def launch_into_template_groups(self: Any, weight_to_add: float) -> Any:
            for spec in self.launch_specs:
                template_spec = spec.launch_template_spec or {}
                if spec.group_set or "LaunchTemplateId" not in template_spec:
                    continue
                template = self.ec2_backend.get_launch_template(template_id=template_spec["LaunchTemplateId"])
                version = template.get_version(template_spec.get("Version", template.default_version_number))
                spec.group_set = _template_security_groups(version.data)
            return launch(self, weight_to_add)

        return launch_into_template_groups

    Fleet.create_spot_requests = with_template_groups(Fleet.create_spot_requests)  # type: ignore[method-assign]
    Fleet.create_on_demand_requests = with_template_groups(Fleet.create_on_demand_requests)  # type: ignore[method-assign]
