"""A process that reserves fake GPUs, for tests/gpus/test_reservation.py.

LOCK_DIR "default" means no lock_dir= (the machine's default lock directory).

Usage: reserve_worker.py race LOCK_DIR INVENTORY_JSON
           on each stdin line "go": reserve auto:1 (no wait), print "got N" or "busy";
           on "release": release and print "released"; on EOF: exit.
       reserve_worker.py hold LOCK_DIR INVENTORY_JSON SPEC [RELEASE_FILE]
           reserve SPEC, print "got N,M pid", then hold until RELEASE_FILE exists (or forever).
"""

from __future__ import annotations

import os
import sys
import time

from tfdevices.core.errors import ReservationError
from tfdevices.gpus.inventory import Inventory
from tfdevices.gpus.reservation import reserve


def main(argv: list[str]) -> int:
    mode, lock_dir, inv_path = argv[:3]
    lock_dir = None if lock_dir == "default" else lock_dir
    inventory = Inventory.load(inv_path)
    if mode == "race":
        held = None
        for line in sys.stdin:
            if line.strip() == "go":
                try:
                    held = reserve("auto:1", inventory, lock_dir=lock_dir, timeout=0)
                    print("got", *held.indices, flush=True)
                except ReservationError:
                    print("busy", flush=True)
            elif line.strip() == "release":
                if held is not None:
                    held.release()
                    held = None
                print("released", flush=True)
        return 0
    held = reserve(argv[3], inventory, lock_dir=lock_dir, timeout=0)
    print("got", ",".join(map(str, held.indices)), os.getpid(), flush=True)
    release_file = argv[4] if len(argv) > 4 else None
    while release_file is None or not os.path.exists(release_file):
        time.sleep(0.02)
    held.release()
    print("released", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
