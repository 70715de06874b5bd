"""The interruption function wakes the reconcile function with an asynchronous Invoke; the reconcile
handler tells a wake from a schedule tick. Asserted with botocore's Stubber (the Invoke request sent)."""

from __future__ import annotations

import json
import math

import boto3
import pytest
from botocore.stub import Stubber

from nodesmith.adapters.aws.wake import PROVISION_EVENT_KEY, ReconcileWaker, provision_after, provision_event


def test_a_wake_is_an_asynchronous_invoke_of_the_reconcile_function_carrying_the_cordon_time() -> None:
    client = boto3.client("lambda", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    waker = ReconcileWaker(function_name="nodesmith-reconcile", client=client)
    with Stubber(client) as stub:
        stub.add_response(
            "invoke",
            {"StatusCode": 202},
            {
                "FunctionName": "nodesmith-reconcile",
                "InvocationType": "Event",
                "Payload": json.dumps({PROVISION_EVENT_KEY: {"after": 1700000000.5}}).encode(),
            },
        )
        waker.wake(1700000000.5)
        stub.assert_no_pending_responses()


def test_a_refused_invoke_raises_so_the_batch_runs_the_pass_itself() -> None:
    client = boto3.client("lambda", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:
        stub.add_client_error("invoke", "TooManyRequestsException", http_status_code=429)
        with pytest.raises(client.exceptions.TooManyRequestsException):
            ReconcileWaker(function_name="nodesmith-reconcile", client=client).wake(1.0)


def test_the_reconcile_handler_tells_a_wake_from_a_schedule_tick() -> None:
    assert provision_after(provision_event(1700000000.0)) == 1700000000.0
    assert provision_after({}) is None
    assert provision_after({"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}) is None
    assert provision_after("not an event") is None


@pytest.mark.parametrize("after", [None, "soon", True, math.inf, math.nan])
def test_a_wake_without_a_finite_cordon_time_is_rejected_naming_the_field(after: object) -> None:
    with pytest.raises(ValueError, match=f"{PROVISION_EVENT_KEY}.after"):
        provision_after({PROVISION_EVENT_KEY: {"after": after}})


def test_a_waker_needs_the_function_name() -> None:
    with pytest.raises(ValueError, match="NODESMITH_RECONCILE_FUNCTION"):
        ReconcileWaker(function_name="")
