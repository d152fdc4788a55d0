"""A stuck rank's frames: every rank on this machine asked for its Python stack, the stuck ones' top frames read.

Each rank's ``stack_dumps`` mend points ``faulthandler`` at ``rank{R}.txt`` in the job's stacks directory and
writes every thread's stack there on ``SIGUSR1``. :func:`ask_stacks` signals the ranks whose records this
machine holds, waits for the dumps asked for, and returns the top frames of the program's own thread
(:func:`top_frames`). The watch calls it for its own machine's ranks; a launcher on another machine calls
it when node 0's launcher asks for the frames of a rank of its own (:mod:`tfdevices.jobs.node_exchange`), and
a rank answers rank 0's ask through TensorFlow's coordination service with :func:`top_frames`
(:mod:`tfdevices.jobs.coordination_keys`). TensorFlow-free.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Sequence

from tfdevices.jobs.progress import RankProgress

#: How long the ranks are given to write the stacks asked for (faulthandler writes at once; the processes
#: must be scheduled).
WAIT_S = 2.0


def ask_stacks(
    records: Sequence[RankProgress],
    directory: str,
    wanted: Sequence[int],
    signal_pid: Callable[[int, int], None] = os.kill,
) -> dict[int, list[str]]:
    """Asks each rank of ``records`` (this machine's) for its Python stack; returns the top frames of each rank in
    ``wanted`` that wrote one (innermost first), by rank.
    """
    paths = {r.rank: os.path.join(directory, f"rank{r.rank}.txt") for r in records}
    sizes = {rank: _size(path) for rank, path in paths.items()}  # where each file ends now: the dump comes after
    for record in records:
        try:
            signal_pid(record.pid, signal.SIGUSR1)
        except OSError:
            continue
    asked = [rank for rank in wanted if rank in paths]
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline and not all(_size(paths[r]) > sizes[r] for r in asked):
        time.sleep(0.1)
    frames = {rank: top_frames(paths[rank], sizes[rank]) for rank in asked}
    return {rank: lines for rank, lines in frames.items() if lines}


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def top_frames(path: str, offset: int = 0, limit: int = 6) -> list[str]:
    """The innermost frames of the program's own thread in the latest ``faulthandler`` dump past ``offset``.

    The program's thread is the one with a frame of the program's own code (not the standard library, an
    installed package or tfdevices): the main thread of a script, the training thread of a Ray worker.
    """
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            f.seek(offset)
            text = f.read(1 << 20)
    except OSError:
        return []
    blocks = [b for b in text.split("\n\n") if "most recent call first" in b]
    if not blocks:
        return []
    frames = [[line.strip() for line in b.splitlines() if line.strip().startswith("File ")] for b in blocks]
    own = [f for f in frames if any(_own_code(line) for line in f)]
    chosen = next((f for f in own if any("<module>" in line for line in f)), own[0] if own else frames[-1])
    return chosen[:limit]


_LIBRARY = (os.sep + "site-packages" + os.sep, os.sep + "lib" + os.sep + "python", os.sep + "tfdevices" + os.sep)


def _own_code(frame: str) -> bool:
    path = frame.split('"', 2)[1] if frame.count('"') >= 2 else ""
    return bool(path) and not any(part in path for part in _LIBRARY)
