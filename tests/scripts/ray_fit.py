"""Keras 3 ``fit`` on 2 Ray Train workers through tfdevices, on a local Ray cluster bound to 127.0.0.1.

Usage: ray_fit.py OUT_DIR [EPOCHS] [STEPS_PER_EPOCH]
Each worker runs tests/scripts/keras3_fit.py's training (same model, data and fit, with metrics and
validation_data) inside ``ray.train.tensorflow.TensorflowTrainer``, with ``tfdevices.launch_info()`` and
``tfdevices.build_strategy("auto")``, and writes OUT_DIR/result-rank{R}.json with what Ray's context
and launch_info said.
"""

from __future__ import annotations

import json
import os
import sys


def train_loop(config: dict) -> None:
    sys.path.insert(0, config["repo"])
    import tfdevices

    info = tfdevices.launch_info()
    sys.argv = ["keras3_fit.py", config["out"], str(config["epochs"]), str(config["steps"])]
    from tests.scripts import keras3_fit

    keras3_fit.main(sys.argv[1:])
    path = os.path.join(config["out"], f"result-rank{info.rank}.json")
    with open(path) as f:
        result = json.load(f)
    result.update(
        source=info.source,
        rank=info.rank,
        world_size=info.world_size,
        local_rank=info.local_rank,
        legacy_keras=os.environ.get("TF_USE_LEGACY_KERAS"),
    )
    with open(path, "w") as f:
        json.dump(result, f)


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_on_ray(train_loop, config: dict, out: str, name: str) -> None:
    """``train_loop(config)`` on 2 Ray Train workers (``config["repo"]`` set) of a local Ray cluster on 127.0.0.1."""
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.tensorflow import TensorflowTrainer

    ray.init(
        num_cpus=2,
        _node_ip_address="127.0.0.1",
        include_dashboard=False,
        log_to_driver=True,
        runtime_env={"env_vars": {"PYTHONPATH": REPO, "TF_CPP_MIN_LOG_LEVEL": "2"}},
    )
    try:
        trainer = TensorflowTrainer(
            train_loop,
            train_loop_config={**config, "repo": REPO},
            scaling_config=ScalingConfig(num_workers=2, use_gpu=False, resources_per_worker={"CPU": 1}),
            run_config=RunConfig(storage_path=os.path.join(out, "ray"), name=name),
        )
        trainer.fit()
    finally:
        ray.shutdown()


def main(argv: list[str]) -> int:
    out = os.path.abspath(argv[0])
    epochs = int(argv[1]) if len(argv) > 1 else 2
    steps = int(argv[2]) if len(argv) > 2 else 4
    run_on_ray(train_loop, {"out": out, "epochs": epochs, "steps": steps}, out, "fit")
    print("ray fit done", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
