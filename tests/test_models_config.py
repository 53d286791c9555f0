"""Model names, keys and the price table: everything that must fail before a sandbox starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from rebench.agents.base import AgentConfig
from rebench.errors import ConfigError, RebenchError
from rebench.models import check_model_available, load_prices, parse_model, price_for
from rebench.models.errors import redact
from rebench.models.prices import ModelPrice


def test_parse_model_names_each_provider() -> None:
    spec = parse_model("anthropic/claude-sonnet-4-5")
    assert (spec.provider, spec.name, spec.key_variable) == (
        "anthropic",
        "claude-sonnet-4-5",
        "ANTHROPIC_API_KEY",
    )
    assert parse_model("openai/gpt-5").key_variable == "OPENAI_API_KEY"
    local = parse_model("openai-compatible/org/model-7b", base_url="http://127.0.0.1:8000/v1")
    assert local.name == "org/model-7b" and not local.key_required


@pytest.mark.parametrize("bad", ["gpt-5", "google/gemini", "/x", "openai/", ""])
def test_bad_model_names_are_one_line_errors(bad: str) -> None:
    with pytest.raises(RebenchError) as err:
        parse_model(bad)
    message = str(err.value)
    assert "\n" not in message and repr(bad) in message and "openai-compatible" in message


def test_openai_compatible_needs_a_base_url() -> None:
    with pytest.raises(RebenchError, match="--base-url"):
        parse_model("openai-compatible/scripted")
    with pytest.raises(RebenchError, match="must start with http"):
        parse_model("openai-compatible/scripted", base_url="127.0.0.1:8000")


@pytest.mark.parametrize(
    ("model", "variable"),
    [("openai/gpt-5", "OPENAI_API_KEY"), ("anthropic/claude-sonnet-4-5", "ANTHROPIC_API_KEY")],
)
def test_missing_key_is_a_one_line_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, model: str, variable: str
) -> None:
    monkeypatch.delenv(variable, raising=False)
    with pytest.raises(RebenchError) as err:
        check_model_available(AgentConfig(name="modular", model=model))
    assert variable in str(err.value) and "\n" not in str(err.value)
    monkeypatch.setenv(variable, "   ")
    with pytest.raises(RebenchError, match=variable):
        check_model_available(AgentConfig(name="modular", model=model))
    monkeypatch.setenv(variable, "sk-present")
    check_model_available(AgentConfig(name="modular", model=model))


def test_local_server_needs_no_key_but_a_named_variable_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_COMPATIBLE_API_KEY", raising=False)
    check_model_available(
        AgentConfig(name="modular", model="openai-compatible/x", base_url="http://127.0.0.1:1/v1")
    )
    spec = parse_model("openai-compatible/x", base_url="http://h/v1", key_variable="MY_GATEWAY_KEY")
    assert spec.key_variable == "MY_GATEWAY_KEY"


def test_agents_without_a_model_need_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No key, no readable price table, a cost limit: each stops an agent with a model, none an agent without."""
    for variable in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("REBENCH_PRICES", str(tmp_path / "missing-prices.toml"))
    needs = {"args": {"prices": str(tmp_path / "missing-prices.toml")}, "cost_limit_usd": 1.0}
    with pytest.raises(RebenchError, match="OPENAI_API_KEY"):
        check_model_available(AgentConfig(name="modular", model="openai/gpt-5", **needs))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-present")
    with pytest.raises(RebenchError, match=r"missing-prices\.toml"):
        check_model_available(AgentConfig(name="modular", model="openai/gpt-5", **needs))
    monkeypatch.delenv("OPENAI_API_KEY")
    for name in ("replay", "reference"):
        assert check_model_available(AgentConfig(name=name, **needs)) is None


def test_cost_limit_needs_a_known_price(monkeypatch: pytest.MonkeyPatch) -> None:
    config = AgentConfig(
        name="modular",
        model="openai-compatible/unpriced",
        base_url="http://127.0.0.1:1/v1",
        cost_limit_usd=1.0,
    )
    with pytest.raises(RebenchError, match="--cost-limit needs a price"):
        check_model_available(config)


def test_bundled_prices_load_and_price_calls() -> None:
    table = load_prices()
    gpt5 = table["openai/gpt-5"]
    assert gpt5.priced and gpt5.context_window == 400000
    # 1M prompt tokens of which 400k cached, 100k output
    assert gpt5.cost_usd(1_000_000, 100_000, cached_tokens=400_000) == pytest.approx(
        0.6 * 1.25 + 0.4 * 0.125 + 0.1 * 10.0
    )
    claude = table["anthropic/claude-sonnet-4-5"]
    assert claude.cost_usd(1_000_000, 0, cache_write_tokens=1_000_000) == pytest.approx(3.75)
    assert ModelPrice().cost_usd(10**6, 10**6) == 0.0 and not ModelPrice().priced


def test_override_file_replaces_entries_key_by_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    override = tmp_path / "p.toml"
    override.write_text(
        '[models."openai/gpt-5"]\noutput_per_mtok = 99.0\n[models."openai-compatible/m"]\n'
        "input_per_mtok = 0.1\noutput_per_mtok = 0.2\n"
    )
    table = load_prices(override)
    assert table["openai/gpt-5"].output_per_mtok == 99.0
    assert table["openai/gpt-5"].input_per_mtok == 1.25
    assert table["openai-compatible/m"].priced
    monkeypatch.setenv("REBENCH_PRICES", str(override))
    assert price_for("openai/gpt-5").output_per_mtok == 99.0


def test_bad_price_tables_are_one_line_errors(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match="not found"):
        load_prices(missing)
    broken = tmp_path / "broken.toml"
    broken.write_text("[models\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_prices(broken)
    wrong = tmp_path / "wrong.toml"
    wrong.write_text('[models."openai/x"]\ninput_per_mtok = "cheap"\n')
    with pytest.raises(ConfigError, match="input_per_mtok"):
        load_prices(wrong)
    negative = tmp_path / "negative.toml"
    negative.write_text('[models."openai/x"]\noutput_per_mtok = -1\n')
    with pytest.raises(ConfigError, match="output_per_mtok"):
        load_prices(negative)
    typo = tmp_path / "typo.toml"
    typo.write_text('[models."openai/x"]\ninput_price = 1.0\n')
    with pytest.raises(ConfigError, match="input_price"):
        load_prices(typo)


def test_redact_removes_keys_and_their_halves() -> None:
    key = "sk-abcdefghijklmnopqrstuvwxyz"
    text = f"Incorrect API key provided: {key[:14]}***; full {key}"
    cleaned = redact(text, key)
    assert key not in cleaned and key[:14] not in cleaned


def test_core_imports_no_sdk_until_a_client_is_built() -> None:
    import subprocess
    import sys

    code = (
        "import sys, rebench.models, rebench.agents.modular.agent; "
        "print(sorted(m for m in ('openai', 'anthropic') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
