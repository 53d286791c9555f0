"""The GPUs of a human attempt, leased in the store like agents' (rebench.scheduler.leases).

`rebench human start --gpus 0,1` keeps the ids on the attempt's HumanSession. Every supervisor
of the attempt (the first, and the one `attach` starts) holds them as lease rows at the human
priority, beating for as long as it runs, so no `rebench run` on this host takes them meanwhile.
While no supervisor runs (between a detach and an attach) the rows lapse after the heartbeat
timeout, as every dead holder's do; the next supervisor takes them again.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from rebench.errors import RebenchError
from rebench.scheduler.leases import PRIORITY_HUMAN, LeaseBroker, active_leases
from rebench.store.db import Store


def busy_devices(store: Store, gpus: Sequence[int]) -> dict[int, str]:
    """Of `gpus`, those a live holder on this host has, each with who holds it (dead holders reclaimed first)."""
    free = set(LeaseBroker(store).free_devices(gpus, priority=PRIORITY_HUMAN))
    host = socket.gethostname()
    holders = {lease.device: (f"attempt {lease.attempt_id}" if lease.attempt_id else "a harness")
               + f" (process {lease.holder_pid})"
               for lease in active_leases(store) if lease.kind == "gpu" and lease.host == host}
    return {device: holders.get(device, "a waiting claim") for device in gpus if device not in free}


def check_free(store: Store, gpus: Sequence[int]) -> None:
    """One-line RebenchError naming each requested device that is leased now, and to whom."""
    busy = busy_devices(store, gpus)
    if busy:
        taken = "; ".join(f"GPU {device} is leased to {holder}" for device, holder in sorted(busy.items()))
        raise RebenchError(f"invalid --gpus {','.join(map(str, gpus))}: {taken}; wait for it to end or choose "
                           "other devices (`rebench campaigns list` shows what runs)")


@contextmanager
def leased(store: Store, attempt_id: int, gpus: Sequence[int], *, resume: bool,
           log: Callable[[str], None]) -> Iterator[None]:
    """Hold `gpus` for the attempt while the block runs. A fresh start that cannot have them fails;
    a resumed one goes on without the rows (its container has had the devices all along) and says so."""
    if not gpus:
        yield
        return
    broker = LeaseBroker(store)
    taken = broker.try_acquire(attempt_id, list(gpus), len(gpus), priority=PRIORITY_HUMAN)
    if taken is None:
        busy = ", ".join(f"GPU {d}: {h}" for d, h in sorted(busy_devices(store, gpus).items()))
        if not resume:
            raise RuntimeError(f"GPUs {','.join(map(str, gpus))} were taken before the attempt started ({busy})")
        log(f"attempt {attempt_id}: warning: its GPUs were leased to others while it had no supervisor ({busy}); "
            "its container keeps them")
    try:
        with broker.heartbeat():
            yield
    finally:
        broker.release_attempt(attempt_id, "human attempt's supervisor ended")
