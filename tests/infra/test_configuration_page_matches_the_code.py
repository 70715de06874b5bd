"""docs/configuration.md is what the code renders, and the catalogue it is rendered from matches the validation.

A context key read by ``NodesmithConfig.from_context`` without a catalogue entry, a range in the catalogue that
the validation does not enforce, or a page not regenerated after a change fails here. Pure Python (no jsii).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from infra.config import CONTEXT_PREFIX, ConfigError, NodesmithConfig
from infra.config_keys import CONTEXT_KEYS, ContextKey
from infra.docs import CONFIGURATION_PAGE, render_configuration
from nodesmith.handlers.settings import ENV, ENV_BY_FIELD, Settings

REPO = Path(__file__).resolve().parents[2]


def test_the_page_on_disk_is_the_rendered_page() -> None:
    assert CONFIGURATION_PAGE == REPO / "docs" / "configuration.md"
    assert CONFIGURATION_PAGE.read_text(encoding="utf-8") == render_configuration(), (
        "docs/configuration.md is out of date: run `python -m infra.docs`"
    )


def test_every_key_from_context_reads_is_in_the_catalogue_and_no_other() -> None:
    read: list[str] = []

    def record(key: str) -> None:
        read.append(key)

    NodesmithConfig.from_context(record)
    assert sorted(read) == sorted(CONTEXT_PREFIX + entry.key for entry in CONTEXT_KEYS)
    assert len({entry.key for entry in CONTEXT_KEYS}) == len(CONTEXT_KEYS)


def test_every_config_field_is_set_by_exactly_one_key() -> None:
    fields = sorted(field.name for field in dataclasses.fields(NodesmithConfig))
    assert sorted(entry.attribute for entry in CONTEXT_KEYS) == fields


def test_each_key_sets_the_attribute_the_catalogue_names() -> None:
    defaults = NodesmithConfig()
    for entry in CONTEXT_KEYS:
        value = _in_range_value(entry, defaults)
        config = NodesmithConfig.from_context({CONTEXT_PREFIX + entry.key: value}.get)
        assert str(getattr(config, entry.attribute)) == str(value).strip(), entry.key


def test_cdk_json_lists_the_catalogue_keys_in_its_order() -> None:
    context = json.loads((REPO / "cdk.json").read_text())["context"]
    ours = [key.removeprefix(CONTEXT_PREFIX) for key in context if key.startswith(CONTEXT_PREFIX)]
    assert ours == [entry.key for entry in CONTEXT_KEYS]


def _outcome(key: str, value: Any) -> str | None:
    """None when the value is accepted as far as ``key`` goes, else the error naming ``key``."""
    try:
        NodesmithConfig.from_context({CONTEXT_PREFIX + key: value}.get)
    except ConfigError as exc:
        return str(exc) if f"{CONTEXT_PREFIX}{key}:" in str(exc) else None
    return None


def _in_range_value(entry: ContextKey, defaults: NodesmithConfig) -> Any:
    if entry.choices:
        return entry.choices[-1] if not entry.choices[-1].isdigit() else int(entry.choices[-1])
    if entry.low is not None:
        return entry.low
    samples = {
        "clusterName": "prod-1",
        "clusterEndpoint": "https://ABC.gr7.eu-west-1.eks.amazonaws.com",
        "clusterCaData": "LS0tLS1CRUdJTg==",
        "nodeRoleArn": "arn:aws:iam::123456789012:role/KarpenterNodeRole-prod-1",
        "priceTable": "prices.json",
        "alarmTopicArn": "arn:aws:sns:eu-west-1:123456789012:pager",
        "featureGates": "NodeRepair=true",
    }
    assert entry.key in samples, f"give {entry.key} a sample value here"
    return samples[entry.key]


@pytest.mark.parametrize("entry", [e for e in CONTEXT_KEYS if e.low is not None], ids=lambda e: e.key)
def test_integer_ranges_are_the_ones_validation_enforces(entry: ContextKey) -> None:
    assert entry.low is not None
    assert _outcome(entry.key, entry.low) is None
    assert _outcome(entry.key, entry.low - 1) is not None
    if entry.high is not None:
        assert _outcome(entry.key, entry.high) is None
        assert _outcome(entry.key, entry.high + 1) is not None
    else:
        assert _outcome(entry.key, entry.low * 1000) is None


@pytest.mark.parametrize("entry", [e for e in CONTEXT_KEYS if e.choices], ids=lambda e: e.key)
def test_choices_are_the_ones_validation_enforces(entry: ContextKey) -> None:
    for choice in entry.choices:
        assert _outcome(entry.key, int(choice) if choice.isdigit() else choice) is None, choice
    assert _outcome(entry.key, "2" if entry.choices[0].isdigit() else "no-such-choice") is not None


@pytest.mark.parametrize("entry", [e for e in CONTEXT_KEYS if e.rule], ids=lambda e: e.key)
def test_rule_keys_accept_a_value_of_their_rule(entry: ContextKey) -> None:
    assert _outcome(entry.key, _in_range_value(entry, NodesmithConfig())) is None


def test_every_setting_has_a_variable_and_a_description_on_the_page() -> None:
    page = render_configuration()
    names = {value for key, value in vars(ENV).items() if key.isupper()}
    assert set(ENV_BY_FIELD.values()) == names
    assert set(ENV_BY_FIELD) == set(Settings.model_fields)
    for field, info in Settings.model_fields.items():
        assert info.description, field
        assert f"| `{ENV_BY_FIELD[field]}` | {info.description} |" in page


def test_a_setting_without_a_description_cannot_be_rendered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Settings.model_fields["eviction_workers"], "description", None)
    with pytest.raises(ValueError, match="eviction_workers"):
        render_configuration()


def test_settings_bounds_and_defaults_are_rendered_from_the_fields() -> None:
    page = render_configuration()
    assert "| `NODESMITH_EVICTION_WORKERS` | Evictions in flight per drain round. | `8` | 1..64 |" in page
    assert "| `NODESMITH_CLUSTER_NAME` |" in page and "| required | non-empty text |" in page
    assert "| `nodesmith:evictionWorkers` | Evictions in flight per drain round. | `8` | 1..64 |" in page


@pytest.mark.xdist_group("infra-synth")  # loads aws_cdk (jsii): on the worker that already has it
def test_a_variable_the_page_says_comes_from_a_context_key_carries_that_keys_value() -> None:
    from infra.stack import interruption_environment, reconcile_environment, termination_environment

    config = NodesmithConfig(cluster_ca_data="Q0E=", price_table="prices.json", feature_gates="NodeRepair=true",
                             eviction_workers=9, termination_retry_seconds=3, rebalance_action="drain")  # fmt: skip
    role = "arn:aws:iam::123456789012:role/KarpenterNodeRole-prod"
    environment = {
        **reconcile_environment(config, node_role_arn=role),
        **interruption_environment(config),
        **termination_environment(config),
    }
    rows = {line.split(" | ")[0]: line for line in render_configuration().splitlines() if line.startswith("| `")}
    keys = {entry.attribute: entry.key for entry in CONTEXT_KEYS}
    checked = 0
    for field, variable in ENV_BY_FIELD.items():
        if field in keys and rows[f"| `{variable}`"].endswith(f"| `{CONTEXT_PREFIX}{keys[field]}` |"):
            expected = role if field == "node_role_arn" else str(getattr(config, field))
            assert environment[variable] == expected, variable
            checked += 1
    assert checked >= 10
