"""When the Ray driver joins again in token mode, and how a refusal in Ray's log is told."""

from __future__ import annotations

from pathlib import Path

from rebench.scheduler.ray_auth import auth_refusal, token_at_hand, token_mode


def test_a_token_is_at_hand_by_variable_path_or_the_default_file(tmp_path: Path) -> None:
    assert not token_at_hand({}, home=tmp_path)
    assert token_at_hand({"RAY_AUTH_TOKEN": "abc"}, home=tmp_path)
    assert not token_at_hand({"RAY_AUTH_TOKEN": "  "}, home=tmp_path)
    assert token_at_hand({"RAY_AUTH_TOKEN_PATH": "/somewhere"}, home=tmp_path)
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("t" * 64)
    assert token_at_hand({}, home=tmp_path)


def test_token_mode_only_when_the_user_chose_no_mode_and_has_a_token(tmp_path: Path) -> None:
    assert token_mode({"PATH": "/bin"}, home=tmp_path) is None  # no token: the refusal is final
    assert token_mode({"RAY_AUTH_TOKEN": "abc"}, home=tmp_path) == {"RAY_AUTH_TOKEN": "abc", "RAY_AUTH_MODE": "token"}
    assert token_mode({"RAY_AUTH_TOKEN": "abc", "RAY_AUTH_MODE": "token"}, home=tmp_path) is None  # tried already
    assert token_mode({"RAY_AUTH_TOKEN": "abc", "RAY_AUTH_MODE": "disabled"}, home=tmp_path) is None


def test_a_refusal_is_read_only_after_the_drivers_offset(tmp_path: Path) -> None:
    log = tmp_path / "ray-driver.log"
    log.write_bytes(b"old: Unauthenticated: RPC error: InvalidAuthToken: Authentication token is missing\n")
    offset = log.stat().st_size
    assert auth_refusal(log, 0) is not None
    assert auth_refusal(log, offset) is None  # an earlier driver's refusal is not this one's
    with log.open("ab") as out:
        out.write(b"[W gcs_client.cc:210] Failed to get cluster ID: InvalidAuthToken: missing or incorrect\n")
    said = auth_refusal(log, offset)
    assert said is not None and "InvalidAuthToken" in said and "RAY_AUTH_TOKEN" in said and "\n" not in said
    assert auth_refusal(tmp_path / "missing.log", 0) is None
