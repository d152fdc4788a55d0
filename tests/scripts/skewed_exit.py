"""tests/scripts/keras3_fit.py's fit, then rank 0 stays on for SECONDS after it while rank 1 is done.

Usage: skewed_exit.py OUT_DIR SECONDS
TensorFlow's coordination service declares a task unhealthy when its heartbeats stop for about 10 s:
without a barrier at exit, rank 0 then prints "The tasks have crashed ..." although both succeed.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import tfdevices
from tests.scripts import keras3_fit

if __name__ == "__main__":
    keras3_fit.main([sys.argv[1], "1", "2"])
    if tfdevices.launch_info().rank == 0:
        time.sleep(float(sys.argv[2]))
