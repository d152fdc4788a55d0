"""A TensorFlow worker for the listen tests: MultiWorkerMirroredStrategy forms, one all-reduce runs, and the
worker holds while a test reads its sockets.

Usage: listen_worker.py HOLD_DIR [ORDER]
ORDER is how the script begins, as users write theirs (default ``tensorflow``):

- ``tensorflow``: ``import tensorflow``, then ``tf.distribute.MultiWorkerMirroredStrategy()``;
- ``build_strategy``: ``import tfdevices``, then ``tfdevices.build_strategy("multi_worker")`` (the guides' worker);
- ``tfdevices_tensorflow``: ``import tfdevices``, then ``import tensorflow``, then the strategy;
- ``keras``: ``import keras`` (Keras 3) first, then ``build_strategy``;
- ``tf_keras``: ``import tf_keras`` (Keras 2; ``TF_USE_LEGACY_KERAS=1`` set by the test) first, then ``build_strategy``;
- ``configure``: ``tfdevices.configure()``, then ``import tensorflow``, then ``build_strategy`` (the README's order);
- ``training``: ``import tfdevices.training`` first, then ``build_strategy``;
- ``undo``: ``import tensorflow`` (where the loopback mend applies), then the mend is undone before the strategy
  starts TensorFlow's server: the server binds its port as TensorFlow has it, as if through a path the mend does
  not catch;
- ``no_check``: as ``undo``, and the worker's own listen check reads no socket from then on: only the launcher's
  check is left; ``no_check:R``: so on rank R only, the others as ``tensorflow``.

Once the job formed, prints ``mend STATE: DETAIL`` (the loopback mend's own report), ``mends JSON`` (every mend's
state in this worker, with the modules each waits for and whether they are imported), the all-reduced sum, then
``ready RANK``, and waits (at most 120 s) for HOLD_DIR/go.
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

#: The modules whose import arms each mend of a launched worker (its sitecustomize's hooks).
WAITS_FOR = {
    "loopback": ("tensorflow",),
    "step_progress": ("tensorflow",),
    "collective_wait": ("tensorflow",),
    "keras_fit": ("keras.src.backend.tensorflow.trainer",),
    "fit_progress": ("keras.src.callbacks.callback_list", "tf_keras.src.callbacks"),
}


def begin(order: str):
    """The script's first lines, as ORDER has them; returns the strategy."""
    if order in ("tensorflow", "undo", "no_check"):
        import tensorflow as tf

        if order != "tensorflow":
            from tfdevices.mends import loopback

            loopback.MEND.undo()
        if order == "no_check":  # the worker's own check reads no socket from now on
            from tfdevices.jobs import listen_check

            listen_check.listening = lambda *args, **kwargs: []
        return tf.distribute.MultiWorkerMirroredStrategy()
    if order == "tfdevices_tensorflow":
        import tensorflow as tf

        import tfdevices

        return tf.distribute.MultiWorkerMirroredStrategy()
    if order == "keras":
        import keras  # noqa: F401
    elif order == "tf_keras":
        import tf_keras  # noqa: F401
    elif order == "configure":
        import tfdevices

        tfdevices.configure()
        import tensorflow  # noqa: F401
    elif order == "training":
        import tfdevices.training
    elif order != "build_strategy":
        raise SystemExit(f"listen_worker.py: no order {order!r}")
    import tfdevices

    return tfdevices.build_strategy("multi_worker")


def main(argv: list[str]) -> int:
    order = argv[1] if len(argv) > 1 else "tensorflow"
    if order.startswith("no_check:"):
        order = "no_check" if os.environ.get("RANK") == order.partition(":")[2] else "tensorflow"
    strategy = begin(order)
    import tensorflow as tf

    from tfdevices.mends import MENDS, loopback

    rank = strategy.cluster_resolver.task_id

    @tf.function
    def summed() -> tf.Tensor:
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(rank + 1.0)), axis=None)

    total = summed()
    status = loopback.MEND.status()
    print(f"mend {status.state}: {status.detail}", flush=True)
    mends = {}
    for mend in MENDS:
        now = mend.status()
        modules = WAITS_FOR.get(mend.name, ())
        mends[mend.name] = {
            "state": now.state.value,
            "detail": now.detail,
            "waits_for": [m for m in modules if m in sys.modules],
            "preview": mend.preview().state.value,
        }
    print("mends " + json.dumps(mends), flush=True)
    print(f"sum {float(total):g}", flush=True)
    print(f"ready {rank}", flush=True)
    deadline = time.monotonic() + 120
    while not os.path.exists(os.path.join(argv[0], "go")) and time.monotonic() < deadline:
        time.sleep(0.1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
