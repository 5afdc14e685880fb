"""One writer at a time: an advisory lock file naming its owner (pid, host, start time).

The lock is the kernel's (`fcntl.flock`), so a killed owner never leaves it held: the next
process takes it at once and, finding the dead owner's record still in the file, says it took
over. A clean release removes the file; a process that locked a file just removed (it opened it
before the removal) sees that the path now names another file and locks that one instead.

Used for run directories (`python -m train`, `python -m distill`: a second run on the same
directory stops at once) and the local registry (publishes wait their turn).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

LOCK_FILE = ".drafthub.lock"


class LockHeld(RuntimeError):
    """Another live process holds the lock: the message names it and what to do."""


def _owner_text() -> str:
    return json.dumps(
        {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    )


def _describe(text: str) -> str:
    try:
        owner = json.loads(text)
        return f"pid {owner['pid']} on {owner['host']} (since {owner['since']})"
    except (ValueError, KeyError, TypeError):
        return "another process"


@contextmanager
def exclusive(directory: str | Path, what: str, wait_seconds: float = 0.0) -> Iterator[None]:
    """Hold `directory`'s lock for the block; raise LockHeld if a live process keeps it past `wait_seconds`.

    A directory nobody may write to is not locked: no run can change it (a finished run re-read in place).
    """
    root = Path(directory)
    if root.exists() and not os.access(root, os.W_OK):
        yield
        return
    created = not root.exists()
    root.mkdir(parents=True, exist_ok=True)
    path = root / LOCK_FILE
    fd = _acquire(path, f"{what} {root}", time.monotonic() + wait_seconds)
    try:
        previous = os.pread(fd, 4096, 0).decode(errors="replace")
        if previous.strip():  # a record nobody removed: its owner died holding the lock
            print(f"[lock] {what} {root}: took over the lock of {_describe(previous)}, which is gone", file=sys.stderr)
        os.ftruncate(fd, 0)
        os.pwrite(fd, _owner_text().encode(), 0)
        try:
            yield
        finally:  # released (an error is a release too; only a killed owner leaves its record behind)
            path.unlink()  # while still holding it: nothing left behind, nothing to take over
            if created and not any(root.iterdir()):  # a run that failed before writing leaves no directory
                root.rmdir()
    finally:
        os.close(fd)  # closing releases the flock (a killed owner's too)


def _acquire(path: Path, what: str, deadline: float) -> int:
    """An fd holding the flock of the file now at `path` (one a releasing owner unlinked does not count)."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe(os.pread(fd, 4096, 0).decode(errors="replace"))
            os.close(fd)
            if time.monotonic() >= deadline:
                raise LockHeld(
                    f"{what} is in use by {holder}; wait for it to finish (or stop it) — one run per directory"
                ) from None
            time.sleep(0.05)
            continue
        try:
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)  # we locked a file its owner had just removed: take the one at the path now
