"""Reading through /proc: every process of the scoring call (any helper process, and any
process of another user than the agent and root), its environ, open files and memory, and
whether it can be signalled. Copies what it could read into procdump/ in the solution."""

import os
import sys
import time

from common import SOL, helpers, log

os.makedirs(f"{SOL}/procdump", exist_ok=True)
seen = set()
deadline = time.time() + (float(sys.argv[1]) if len(sys.argv) > 1 else 60)


def others():
    found = {pid for pid, _ in helpers(main_only=False)}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in (1, os.getpid()):
            try:
                uid = os.stat(f"/proc/{entry}").st_uid
            except OSError:
                continue
            if uid not in (0, os.getuid()):
                found.add(int(entry))
    return found


def grab(pid):
    for name in ("environ", "fd", "mem"):
        path = f"/proc/{pid}/{name}"
        try:
            if name == "fd":
                data = "\n".join(os.readlink(f"{path}/{fd}") for fd in os.listdir(path)).encode()
                for fd in os.listdir(path):
                    with open(f"{path}/{fd}", "rb") as handle:
                        data += b"\n" + handle.read(1 << 20)
            elif name == "mem":
                data = b""
                with open(f"/proc/{pid}/maps") as maps, open(path, "rb") as mem:
                    for line in maps:
                        start, end = (int(x, 16) for x in line.split()[0].split("-"))
                        if "r" in line.split()[1] and end - start < (64 << 20):
                            try:
                                mem.seek(start)
                                data += mem.read(end - start)
                            except OSError:
                                continue
            else:
                with open(path, "rb") as handle:
                    data = handle.read()
        except OSError as exc:
            log(f"{name} of {pid}: refused ({exc.strerror})")
            continue
        with open(f"{SOL}/procdump/{pid}.{name}", "wb") as handle:
            handle.write(data)
        log(f"READ {name} of {pid} ({len(data)} bytes)")
    try:
        os.kill(pid, 0)
        log(f"SIGNAL {pid}: allowed")
    except OSError as exc:
        log(f"signal {pid}: refused ({exc.strerror})")


while time.time() < deadline:
    for pid in others() - seen:
        seen.add(pid)
        grab(pid)
    time.sleep(0.002)
log(f"done, {len(seen)} processes seen")
