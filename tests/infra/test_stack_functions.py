"""The synthesized NodesmithStack's Lambda functions: runtime, tracing and logs, the settings each reads, event
sources and concurrency, the reconcile schedule, the state table and the stack outputs.

Every test reads the session's one synthesis (``synth`` in ``conftest.py``).
"""

from __future__ import annotations

from typing import Any

import pytest
from stack_synth import (
    CLUSTER,
    HANDLERS,
    INTERRUPTION,
    NODE_ROLE,
    RECONCILE,
    TERMINATION,
    Synth,
    as_list,
    event_source,
    interruption_queue,
    lambda_function,
    role_of,
    role_policy_statements,
    termination_queue,
)

pytestmark = pytest.mark.xdist_group("infra-synth")

# --- functions -------------------------------------------------------------------------------


@pytest.mark.parametrize("handler", HANDLERS)
def test_functions_share_runtime_tracing_and_json_logs(synth: Synth, handler: str) -> None:
    _, function = lambda_function(synth, handler)
    assert function["Runtime"] == "python3.11"
    assert function["Architectures"] == ["arm64"]
    assert function["TracingConfig"] == {"Mode": "Active"}
    assert function["LoggingConfig"]["LogFormat"] == "JSON"
    log_group = function["LoggingConfig"]["LogGroup"]["Ref"]
    assert synth.resources("AWS::Logs::LogGroup")[log_group]["RetentionInDays"] == 30


@pytest.mark.parametrize(
    ("handler", "expected"),
    [
        (
            RECONCILE,
            {"NODE_ROLE_ARN", "RECONCILE_MODE", "STATE_TABLE", "TERMINATION_QUEUE_URL",
             "TERMINATION_REQUEST_STALE_SECONDS", "REGISTRATION_TTL_SECONDS"},
        ),
        (INTERRUPTION, {"REBALANCE_ACTION", "STATE_TABLE", "TERMINATION_QUEUE_URL", "RECONCILE_FUNCTION"}),
        (
            TERMINATION,
            {"TERMINATION_QUEUE_URL", "EVICTION_WORKERS", "TERMINATION_RETRY_SECONDS",
             "TERMINATION_RETRY_MAX_SECONDS"},
        ),
    ],
)  # fmt: skip
def test_each_function_gets_the_settings_it_reads_under_the_handlers_env_names(
    synth: Synth, handler: str, expected: set[str]
) -> None:
    from nodesmith.handlers.settings import ENV, load_settings

    common = {"CLUSTER_NAME", "CLUSTER_ENDPOINT", "KUBE_AUTH"}  # no CA bundle configured: left out
    _, function = lambda_function(synth, handler)
    variables = function["Environment"]["Variables"]
    assert variables["POWERTOOLS_METRICS_NAMESPACE"] == "Nodesmith"
    ours = {k for k in variables if k.startswith("NODESMITH_")}
    assert ours == {getattr(ENV, name) for name in common | expected}
    # The literal values parse with the handlers' own settings model.
    settings = load_settings({k: v for k, v in variables.items() if isinstance(v, str)})
    assert settings.cluster_name == CLUSTER
    assert settings.kube_auth == "eks"
    if handler == RECONCILE:
        assert settings.node_role_arn == NODE_ROLE
        assert settings.registration_ttl_seconds == 900  # Karpenter's registration TTL
    if handler == TERMINATION:
        assert (settings.eviction_workers, settings.termination_retry_seconds) == (8, 2)
        assert settings.termination_retry_max_seconds == 10  # Karpenter's eviction backoff cap
        # its own queue: the backoff is a ChangeMessageVisibility on it
        queue_id, _ = termination_queue(synth)
        assert variables["NODESMITH_TERMINATION_QUEUE_URL"] == {"Ref": queue_id}


@pytest.mark.parametrize("handler", [INTERRUPTION, TERMINATION])
def test_queue_functions_consume_with_partial_batch_failures_and_bounded_concurrency(
    synth: Synth, handler: str
) -> None:
    queue_id, _ = (interruption_queue if handler == INTERRUPTION else termination_queue)(synth)
    mapping = event_source(synth, handler)
    assert mapping["EventSourceArn"] == {"Fn::GetAtt": [queue_id, "Arn"]}
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["BatchSize"] == 10
    assert 0 <= mapping.get("MaximumBatchingWindowInSeconds", 0) <= 1
    # a burst fans out to a bounded number of invocations, so the kube-apiserver is not flooded
    assert mapping["ScalingConfig"] == {"MaximumConcurrency": 25}


@pytest.mark.parametrize("handler", [INTERRUPTION, TERMINATION])
def test_queue_functions_reserve_at_least_their_event_source_s_concurrency(synth: Synth, handler: str) -> None:
    # never throttled by the account's other functions, and never throttled by their own event source
    _, function = lambda_function(synth, handler)
    mapping = event_source(synth, handler)
    assert function["ReservedConcurrentExecutions"] >= mapping["ScalingConfig"]["MaximumConcurrency"]


def test_the_interruption_function_is_sized_for_verification_not_scheduling(synth: Synth) -> None:
    _, function = lambda_function(synth, INTERRUPTION)
    assert function["MemorySize"] <= 1024
    assert function["Timeout"] <= 20


def test_the_reconcile_function_gets_the_memory_its_context_key_sizes(synth: Synth) -> None:
    _, function = lambda_function(synth, RECONCILE)
    assert function["MemorySize"] == 2048  # nodesmith:reconcileMemoryMiB, not the default 1024


def test_the_interruption_function_may_wake_the_reconcile_function_and_no_other(synth: Synth) -> None:
    from nodesmith.handlers.settings import ENV

    reconcile_id, _ = lambda_function(synth, RECONCILE)
    _, interruption = lambda_function(synth, INTERRUPTION)
    assert interruption["Environment"]["Variables"][ENV.RECONCILE_FUNCTION] == {"Ref": reconcile_id}
    scopes = [
        s["Resource"]
        for s in role_policy_statements(synth, role_of(interruption))
        if s["Effect"] == "Allow" and "lambda:InvokeFunction" in as_list(s["Action"])
    ]
    assert scopes == [{"Fn::GetAtt": [reconcile_id, "Arn"]}]


def test_reconcile_runs_every_minute_one_at_a_time_and_drops_stale_ticks(synth: Synth) -> None:
    function_id, function = lambda_function(synth, RECONCILE)
    _, rule = synth.one("AWS::Events::Rule", lambda p: "ScheduleExpression" in p)
    assert rule["ScheduleExpression"] == "rate(1 minute)"
    assert [t["Arn"] for t in rule["Targets"]] == [{"Fn::GetAtt": [function_id, "Arn"]}]
    assert function["ReservedConcurrentExecutions"] == 1
    assert function["Timeout"] == 900
    _, invoke = synth.one("AWS::Lambda::EventInvokeConfig", lambda p: p["FunctionName"] == {"Ref": function_id})
    assert invoke["MaximumRetryAttempts"] == 0


def test_state_table_is_on_demand_recoverable_encrypted_with_ttl(synth: Synth) -> None:
    _, table = synth.one("AWS::DynamoDB::Table", lambda p: True)
    assert table["BillingMode"] == "PAY_PER_REQUEST"
    assert table["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True
    assert table["SSESpecification"]["SSEEnabled"] is True
    assert table["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}


def test_state_table_access_is_what_each_function_calls(synth: Synth) -> None:
    table_id, _ = synth.one("AWS::DynamoDB::Table", lambda p: True)
    table_arn = {"Fn::GetAtt": [table_id, "Arn"]}

    def table_statements(handler: str) -> list[dict[str, Any]]:
        statements = role_policy_statements(synth, role_of(lambda_function(synth, handler)[1]))
        return [s for s in statements if any(a.startswith("dynamodb:") for a in as_list(s["Action"]))]

    # the lease (conditional UpdateItem, GetItem, DeleteItem) and the offering marks (PutItem, Query)
    (reconcile,) = table_statements(RECONCILE)
    assert set(as_list(reconcile["Action"])) == {
        "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:Query",
    }  # fmt: skip
    assert reconcile["Resource"] == table_arn and "Condition" not in reconcile
    # an interrupted spot offering's mark, and nothing under another partition key (the reconcile lease)
    (interruption,) = table_statements(INTERRUPTION)
    assert interruption["Action"] == "dynamodb:PutItem" and interruption["Resource"] == table_arn
    assert interruption["Condition"] == {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["offering"]}}
    assert table_statements(TERMINATION) == []


def test_no_physical_names(synth: Synth) -> None:
    names = {
        "AWS::SQS::Queue": "QueueName",
        "AWS::Lambda::Function": "FunctionName",
        "AWS::DynamoDB::Table": "TableName",
        "AWS::IAM::Role": "RoleName",
        "AWS::Logs::LogGroup": "LogGroupName",
        "AWS::Events::Rule": "Name",
        "AWS::CloudWatch::Alarm": "AlarmName",
        "AWS::CloudWatch::Dashboard": "DashboardName",
    }
    for cfn_type, prop in names.items():
        for logical_id, props in synth.resources(cfn_type).items():
            assert prop not in props, f"{logical_id} sets {prop}"


def test_outputs_name_the_queues_and_every_role(synth: Synth) -> None:
    outputs = synth.json["Outputs"]
    termination_queue_id, _ = termination_queue(synth)
    assert outputs["TerminationQueueUrl"]["Value"] == {"Ref": termination_queue_id}
    for name, handler in (("ReconcileRoleArn", RECONCILE), ("InterruptionRoleArn", INTERRUPTION),
                          ("TerminationRoleArn", TERMINATION)):  # fmt: skip
        assert outputs[name]["Value"] == {"Fn::GetAtt": [role_of(lambda_function(synth, handler)[1]), "Arn"]}
