import pytest

from rebench.budget import format_duration, parse_duration
from rebench.errors import RebenchError


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30m", 1800), ("2h", 7200), ("1h30m", 5400), ("90s", 90), ("1h2m3s", 3723), (" 8H ", 28800)],
)
def test_parses_budgets(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "30", "2 h", "1.5h", "-5m", "0s", "30m2h", "10d", "h", "2hours"])
def test_rejects_anything_else_with_the_value_in_the_message(text: str) -> None:
    with pytest.raises(RebenchError) as info:
        parse_duration(text)
    assert repr(text) in str(info.value)
    assert "\n" not in str(info.value)


def test_format_round_trips() -> None:
    for seconds in (90, 1800, 5400, 3723, 28800):
        assert parse_duration(format_duration(seconds)) == seconds
