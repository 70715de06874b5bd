"""Concurrent terminations share one TerminateInstances request (Karpenter's terminate batcher), and each caller
hears only about its own instances."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import pytest
from ec2_support import CLUSTER, ec2_provider

from nodesmith.adapters.aws.instances import Instances
from nodesmith.adapters.aws.terminate_batcher import BatchWindow, TerminateBatcher
from nodesmith.core.errors import LaunchError, TerminationError

if TYPE_CHECKING:
    from collections.abc import Callable

    from nodesmith.sim.aws import SeededAws


class CountingEc2:
    """Counts TerminateInstances requests made through the real EC2 client."""

    def __init__(self, ec2: Any) -> None:
        self.ec2, self.requests = ec2, list[list[str]]()

    def terminate_instances(self, **kwargs: Any) -> Any:
        self.requests.append(list(kwargs["InstanceIds"]))
        return self.ec2.terminate_instances(**kwargs)


def in_threads(calls: list[Callable[[], None]]) -> list[BaseException | None]:
    """Run ``calls`` at once; each one's exception (or None)."""
    errors: list[BaseException | None] = [None] * len(calls)

    def run(k: int) -> None:
        try:
            calls[k]()
        except BaseException as exc:
            errors[k] = exc

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return errors


def test_ten_concurrent_terminations_are_one_request_and_every_instance_ends(seeded: SeededAws, ec2: Any) -> None:
    out = ec2.run_instances(ImageId=seeded.images[("x86_64", "standard")], MinCount=10, MaxCount=10,
                            SubnetId=seeded.subnets["us-east-1a"])  # fmt: skip
    ids = [str(i["InstanceId"]) for i in out["Instances"]]
    counting = CountingEc2(ec2)
    instances = Instances(ec2=counting, cluster_name=CLUSTER)
    batcher = TerminateBatcher(send=lambda batch: instances.terminate(instance_ids=batch),
                               window=BatchWindow(idle_seconds=0.3, max_seconds=5.0))  # fmt: skip

    errors = in_threads([lambda i=i: batcher.terminate([i]) for i in ids])  # type: ignore[misc]

    assert errors == [None] * 10
    assert len(counting.requests) == 1 and sorted(counting.requests[0]) == sorted(ids)
    states = {i["InstanceId"]: i["State"]["Name"] for r in ec2.describe_instances()["Reservations"]
              for i in r["Instances"]}  # fmt: skip
    assert {states[i] for i in ids} == {"terminated"}


def test_a_refused_instance_fails_only_the_call_that_asked_for_it(seeded: SeededAws, ec2: Any) -> None:
    out = ec2.run_instances(ImageId=seeded.images[("x86_64", "standard")], MinCount=3, MaxCount=3,
                            SubnetId=seeded.subnets["us-east-1a"])  # fmt: skip
    first, protected, last = (str(i["InstanceId"]) for i in out["Instances"])
    ec2.modify_instance_attribute(InstanceId=protected, DisableApiTermination={"Value": True})
    instances = Instances(ec2=ec2, cluster_name=CLUSTER)
    batcher = TerminateBatcher(send=lambda batch: instances.terminate(instance_ids=batch),
                               window=BatchWindow(idle_seconds=0.3, max_seconds=5.0))  # fmt: skip

    errors = in_threads([lambda i=i: batcher.terminate([i]) for i in (first, protected, last)])  # type: ignore[misc]

    assert errors[0] is None and errors[2] is None
    assert isinstance(errors[1], TerminationError) and list(errors[1].failed) == [protected]


def test_a_request_wide_failure_reaches_every_caller_of_the_batch() -> None:
    def throttled(batch: Any) -> None:
        raise LaunchError("TerminateInstances failed: RequestLimitExceeded", code="RequestLimitExceeded")

    batcher = TerminateBatcher(send=throttled, window=BatchWindow(idle_seconds=0.3, max_seconds=5.0))
    errors = in_threads([lambda i=i: batcher.terminate([f"i-{i}"]) for i in range(3)])  # type: ignore[misc]
    assert [type(e) for e in errors] == [LaunchError] * 3


def test_a_batch_goes_at_its_item_limit_and_the_next_call_starts_another() -> None:
    sent: list[list[str]] = []
    batcher = TerminateBatcher(send=sent.append, window=BatchWindow(idle_seconds=0.3, max_seconds=5.0, max_items=4))
    errors = in_threads([lambda i=i: batcher.terminate([f"i-{i}a", f"i-{i}b"]) for i in range(3)])  # type: ignore[misc]
    assert errors == [None] * 3
    assert sorted(len(s) for s in sent) == [2, 4]


def test_a_lone_call_goes_after_the_idle_wait_without_waiting_for_the_longest() -> None:
    now, sleeps, sent = [0.0], list[float](), list[list[str]]()

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    batcher = TerminateBatcher(send=sent.append, clock=lambda: now[0], sleep=sleep)
    batcher.terminate(["i-1", "", "i-1"])
    assert sent == [["i-1"]] and sleeps == [pytest.approx(0.1)]
    batcher.terminate([])
    assert len(sent) == 1


def test_the_provider_terminates_through_the_batcher(seeded: SeededAws, ec2: Any) -> None:
    out = ec2.run_instances(ImageId=seeded.images[("x86_64", "standard")], MinCount=4, MaxCount=4,
                            SubnetId=seeded.subnets["us-east-1a"])  # fmt: skip
    ids = [str(i["InstanceId"]) for i in out["Instances"]]
    cloud = ec2_provider(ec2=ec2)
    counting = CountingEc2(ec2)
    cloud.instances = Instances(ec2=counting, cluster_name=CLUSTER)

    errors = in_threads([lambda i=i: cloud.terminate(instance_ids=[i]) for i in ids])  # type: ignore[misc]

    assert errors == [None] * 4
    assert len(counting.requests) < 4 and sorted(i for r in counting.requests for i in r) == sorted(ids)


def test_when_the_sending_call_is_stopped_the_others_fail_and_try_again() -> None:
    class Stopped(BaseException):
        pass

    def stopped(batch: Any) -> None:
        raise Stopped

    batcher = TerminateBatcher(send=stopped, window=BatchWindow(idle_seconds=0.3, max_seconds=5.0))
    errors = in_threads([lambda i=i: batcher.terminate([f"i-{i}"]) for i in range(3)])  # type: ignore[misc]
    assert sorted(type(e).__name__ for e in errors) == ["LaunchError", "LaunchError", "Stopped"]
