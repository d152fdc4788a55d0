"""tests/scripts/slow_rank.py's custom loop on 2 Ray Train workers (a local Ray cluster bound to 127.0.0.1):
rank 1 sleeps 40 ms before each step. Rank 0's watch (no launcher here) names it on its stderr, which Ray
hands to this driver.

Usage: ray_slow.py OUT_DIR STEPS
"""

from __future__ import annotations

import os
import sys


def train_loop(config: dict) -> None:
    sys.path.insert(0, config["repo"])
    from tests.scripts import slow_rank

    slow_rank.main("loop", "between", {1}, config["steps"])


def main(argv: list[str]) -> int:
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.tensorflow import TensorflowTrainer

    out, steps = os.path.abspath(argv[0]), int(argv[1])
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ray.init(
        num_cpus=2,
        _node_ip_address="127.0.0.1",
        include_dashboard=False,
        log_to_driver=True,
        runtime_env={"env_vars": {"PYTHONPATH": repo, "TF_CPP_MIN_LOG_LEVEL": "2"}},
    )
    try:
        trainer = TensorflowTrainer(
            train_loop,
            train_loop_config={"steps": steps, "repo": repo},
            scaling_config=ScalingConfig(num_workers=2, use_gpu=False, resources_per_worker={"CPU": 1}),
            run_config=RunConfig(storage_path=os.path.join(out, "ray"), name="slow"),
        )
        trainer.fit()
    finally:
        ray.shutdown()
    print("ray slow done", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
