from pathlib import Path

import pytest

from rebench.environments.metadata import load_metadata
from rebench.environments.registry import EnvironmentRegistry
from rebench.errors import ConfigError, EnvironmentNotFound
from rebench.sandbox.base import SandboxPaths

from .conftest import REPO, run_cli

GOOD = """
name = "demo"
title = "Demo"
version = "0.1.0"
summary = "s"

[profiles.tiny]
direction = "lower"
final_score = "best"
anchors = { start = 2.0, reference = 1.0 }
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "environment.toml"
    path.write_text(text)
    return path


def test_valid_file_loads(tmp_path: Path) -> None:
    meta = load_metadata(write(tmp_path, GOOD))
    assert meta.profile("tiny").anchors.reference == 1.0
    assert meta.best_of_k == "max"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (('direction = "lower"', 'direction = "down"'), "profiles.tiny.direction"),
        (('final_score = "best"', 'final_score = "max"'), "profiles.tiny.final_score"),
        (('title = "Demo"\n', ""), "field title"),
        (("reference = 1.0", "reference = 2.0"), "start and reference must differ"),
        (('summary = "s"', 'summary = "s"\ncolour = "red"'), "colour: unknown field"),
        (('name = "demo"', 'name = "Demo Env"'), "field name"),
    ],
)
def test_malformed_file_names_file_and_field(tmp_path: Path, change: tuple[str, str], expected: str) -> None:
    path = write(tmp_path, GOOD.replace(*change))
    with pytest.raises(ConfigError) as info:
        load_metadata(path)
    message = str(info.value)
    assert str(path) in message and expected in message
    assert "\n" not in message


def test_bad_toml_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_metadata(write(tmp_path, "name = "))


def test_a_file_that_is_not_utf8_is_one_line_with_the_offset(tmp_path: Path) -> None:
    path = tmp_path / "environment.toml"
    path.write_bytes(GOOD.replace('summary = "s"', 'summary = "caf\xe9"').encode("latin-1"))
    with pytest.raises(ConfigError) as info:
        load_metadata(path)
    offset = GOOD.index('summary = "s"') + len('summary = "caf')
    assert str(info.value) == (f"{path}: not UTF-8 text (byte 0xe9 at offset {offset}); TOML files are UTF-8")


def test_every_missing_and_unknown_key_is_named(tmp_path: Path) -> None:
    """A misspelt required key gives two errors (the key missing, the misspelling unknown); both are named."""
    with pytest.raises(ConfigError) as info:
        load_metadata(write(tmp_path, GOOD.replace('title = "Demo"', 'titel = "Demo"').replace('summary = "s"',
                                                                                                'sumary = "s"')))
    message = str(info.value)
    for key in ("field title", "field summary", "titel: unknown field", "sumary: unknown field"):
        assert key in message, message
    assert "more)" not in message and "\n" not in message


def test_unknown_profile_lists_allowed(tmp_path: Path) -> None:
    meta = load_metadata(write(tmp_path, GOOD))
    with pytest.raises(ConfigError, match="allowed: tiny"):
        meta.profile("paper")


def test_hidden_score_means_random_pick(tmp_path: Path) -> None:
    text = GOOD.replace('final_score = "best"', 'final_score = "last"\nscore_visible = false')
    assert load_metadata(write(tmp_path, text)).best_of_k == "mean"


def test_unknown_environment_lists_known(fixture_envs: Path) -> None:
    with pytest.raises(EnvironmentNotFound, match="allowed: counter"):
        EnvironmentRegistry().get("nope")


def test_instructions_are_filled_from_profile(fixture_envs: Path) -> None:
    env = EnvironmentRegistry().get("counter")
    text = env.instructions("tiny", SandboxPaths(solution="/x/solution"))
    assert "/x/solution/value.txt" in text and "profile tiny" in text


def test_kernel_instructions_state_the_final_rule_in_use() -> None:
    """The kernel's text says how its final score is taken: re-scored on tiny, the best call on
    paper, and whatever another rule a run chose (never "the best counts" under rescore_best)."""
    env = EnvironmentRegistry(REPO / "environments").get("triton_cumsum")
    paths = SandboxPaths(solution="/x/solution")
    tiny = env.instructions("tiny", paths)
    repeats = env.profile("tiny").rescore.repeats
    assert f"scored again {repeats} times each" in tiny and "**best** valid score" not in tiny
    assert "**best** valid score" in env.instructions("paper", paths)
    assert f"again {env.profile('paper').rescore.repeats} times" in env.instructions(
        "paper", paths, final_rule="rescore_best")
    assert env.mentions_final_rule() and "${" not in tiny


def test_kernel_metadata_is_faithful_in_paper_profile() -> None:
    env = EnvironmentRegistry(REPO / "environments").get("triton_cumsum")
    paper = env.profile("paper")
    assert paper.params["n_elements"] == 100_000_000
    assert paper.params["warmup_calls"] == 4 and paper.params["timed_calls"] == 1
    assert paper.params["call_timeout_s"] == 20
    assert paper.anchors.start == 1.5535302804958044 and paper.anchors.reference == 0.4700036292457356
    assert paper.direction == "lower" and paper.final_score == "best"
    assert env.metadata.metr_task_family == "ai_rd_triton_cumsum"


def test_cli_reports_malformed_environment_in_one_line(fixture_envs: Path, tmp_path: Path) -> None:
    toml = fixture_envs / "counter" / "environment.toml"
    toml.write_text(toml.read_text().replace('direction = "higher"', 'direction = "sideways"'))
    result = run_cli("envs", "show", "counter", "--db", str(tmp_path / "x.db"),
                     env={"REBENCH_ENVIRONMENTS": str(fixture_envs)})
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "environment.toml" in lines[0] and "direction" in lines[0] and "sideways" in lines[0]


def test_envs_show_says_how_the_final_score_is_taken_and_which_assets_an_operator_gives(tmp_path: Path) -> None:
    environments = {"REBENCH_ENVIRONMENTS": str(REPO / "environments")}
    kernel = run_cli("envs", "show", "triton_cumsum", "--db", str(tmp_path / "x.db"), env=environments)
    assert kernel.returncode == 0, kernel.stderr
    flat = " ".join(kernel.stdout.split())
    assert "final = median of 7 re-scores, best of the 2 best" in flat and "final = best valid" in flat
    embedding = run_cli("envs", "show", "fix_embedding", "--db", str(tmp_path / "x.db"), env=environments)
    flat = " ".join(embedding.stdout.split())
    assert "operator asset gpt2_xl (gpt2-xl.safetensors)" in flat and "rebench.kit.owt" in flat
