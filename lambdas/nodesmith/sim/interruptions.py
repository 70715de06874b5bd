"""Real-format EC2 interruption events put on an EventBridge bus, as AWS would emit them.

Used by the demo and ``nodesmith playground interrupt``: the event goes through the bus's rules to
the interruption queue, exactly as a real warning would, so the interruption handler sees nothing
special.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["put_spot_interruption"]


def put_spot_interruption(events: Any, *, instance_id: str, zone: str, region: str = "us-east-1") -> str:
    """Put an ``EC2 Spot Instance Interruption Warning`` for ``instance_id`` on the default bus.

    ``events`` is a boto3 EventBridge client. The shape (source ``aws.ec2``, the instance ARN in
    ``resources``, detail ``{"instance-id", "instance-action": "terminate"}``) is the one in the EC2
    documentation (``spot-instance-termination-notices``). Returns the entry's event id;
    RuntimeError when PutEvents reports the entry failed.
    """
    response = events.put_events(
        Entries=[
            {
                "Source": "aws.ec2",
                "DetailType": "EC2 Spot Instance Interruption Warning",
                "Resources": [f"arn:aws:ec2:{zone}:instance/{instance_id}"],
                "Detail": json.dumps({"instance-id": instance_id, "instance-action": "terminate"}),
            }
        ]
    )
    if response.get("FailedEntryCount"):
        raise RuntimeError(f"PutEvents failed in {region}: {response['Entries']}")
    return str(response["Entries"][0].get("EventId", ""))
