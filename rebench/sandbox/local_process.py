"""One command of the local backend, watched from the event loop (rebench.sandbox.local runs it)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess

from rebench.sandbox.output import OutputCapture

READ_CHUNK = 65536


class Capture(OutputCapture):
    """One pipe's output, and whether the pipe was closed."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = asyncio.Event()


class RunningCommand:
    """Watches a Popen child from the event loop: its exit through a pidfd, its pipes
    through readers, its stdin through a writer."""

    def __init__(self, proc: subprocess.Popen[bytes], stdin: bytes | None) -> None:
        self.proc = proc
        self.loop = asyncio.get_running_loop()
        self.exited = asyncio.Event()
        self.out = Capture()
        self.err = Capture()
        self._fds: list[int] = []
        self._pidfd = os.pidfd_open(proc.pid)
        self.loop.add_reader(self._pidfd, self._on_exit)
        assert proc.stdout is not None and proc.stderr is not None
        for stream, capture in ((proc.stdout, self.out), (proc.stderr, self.err)):
            fd = stream.fileno()
            os.set_blocking(fd, False)
            self.loop.add_reader(fd, self._on_output, fd, capture)
            self._fds.append(fd)
        self._stdin = memoryview(stdin or b"")
        if proc.stdin is not None:
            os.set_blocking(proc.stdin.fileno(), False)
            self.loop.add_writer(proc.stdin.fileno(), self._on_stdin)

    def _on_exit(self) -> None:
        self.loop.remove_reader(self._pidfd)
        self.proc.wait()
        self.exited.set()

    def _on_output(self, fd: int, capture: Capture) -> None:
        try:
            chunk = os.read(fd, READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if chunk:
            capture.add(chunk)
        else:
            self.loop.remove_reader(fd)
            capture.closed.set()

    def _on_stdin(self) -> None:
        assert self.proc.stdin is not None
        fd = self.proc.stdin.fileno()
        try:
            written = os.write(fd, self._stdin[:READ_CHUNK])
            self._stdin = self._stdin[written:]
        except BlockingIOError:
            return
        except OSError:
            self._stdin = memoryview(b"")
        if not self._stdin:
            self.loop.remove_writer(fd)
            self.proc.stdin.close()

    async def pipes_closed(self) -> None:
        await self.out.closed.wait()
        await self.err.closed.wait()

    def close(self) -> None:
        """Stop watching and close our ends of the pipes (a background child that still
        writes to them gets SIGPIPE, as it would after a terminal closed)."""
        self.loop.remove_reader(self._pidfd)
        os.close(self._pidfd)
        if not self.exited.is_set():  # cancelled: the tree was just SIGKILLed, collect the child
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=2)
        for fd in self._fds:
            self.loop.remove_reader(fd)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None and not stream.closed:
                if stream is self.proc.stdin:
                    self.loop.remove_writer(stream.fileno())
                stream.close()
