from rebench.clock import AttemptClock


class FakeTime:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_working_time_excludes_pauses() -> None:
    now = FakeTime()
    clock = AttemptClock(now=now)
    clock.start()
    now.t += 10
    with clock.paused_for("baseline-score"):
        now.t += 30
    now.t += 5
    assert clock.wall_seconds() == 45
    assert clock.working_seconds() == 15
    assert [p.reason for p in clock.pauses] == ["baseline-score"]


def test_overlapping_pauses_count_once() -> None:
    now = FakeTime()
    clock = AttemptClock(now=now)
    clock.start()
    first = clock.pause("provider-retry")
    now.t += 4
    second = clock.pause("scoring")
    now.t += 4
    clock.resume(first)
    now.t += 4
    clock.resume(second)
    now.t += 1
    assert clock.paused_seconds() == 12
    assert clock.working_seconds() == 1


def test_open_pause_freezes_working_time_and_stop_closes_it() -> None:
    now = FakeTime()
    clock = AttemptClock(now=now)
    clock.start()
    now.t += 2
    clock.pause("infrastructure")
    assert clock.paused
    now.t += 100
    assert clock.working_seconds() == 2
    clock.stop()
    now.t += 50
    assert not clock.paused
    assert clock.wall_seconds() == 102
    assert clock.working_seconds() == 2


def test_not_started_is_zero() -> None:
    clock = AttemptClock(now=FakeTime())
    assert clock.wall_seconds() == 0 and clock.working_seconds() == 0
