"""tests/scripts/stuck_rank.py's custom loop on 2 Ray Train workers (a local Ray cluster bound to 127.0.0.1):
rank 1 sleeps SECONDS before step 5. Rank 0's stall watch (no launcher here) says so on its stderr, which
Ray hands to this driver.

Usage: ray_stuck.py OUT_DIR SECONDS
"""

from __future__ import annotations

import os
import sys


def train_loop(config: dict) -> None:
    sys.path.insert(0, config["repo"])
    from tests.scripts import stuck_rank

    stuck_rank.main("loop", {1}, config["seconds"], 8)


def main(argv: list[str]) -> int:
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.tensorflow import TensorflowTrainer

    out, seconds = os.path.abspath(argv[0]), float(argv[1])
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    window = os.environ.get("TFDEVICES_STALL_WINDOW", "6")
    ray.init(
        num_cpus=2,
        _node_ip_address="127.0.0.1",
        include_dashboard=False,
        log_to_driver=True,
        runtime_env={"env_vars": {"PYTHONPATH": repo, "TF_CPP_MIN_LOG_LEVEL": "2", "TFDEVICES_STALL_WINDOW": window}},
    )
    try:
        trainer = TensorflowTrainer(
            train_loop,
            train_loop_config={"seconds": seconds, "repo": repo},
            scaling_config=ScalingConfig(num_workers=2, use_gpu=False, resources_per_worker={"CPU": 1}),
            run_config=RunConfig(storage_path=os.path.join(out, "ray"), name="stuck"),
        )
        trainer.fit()
    finally:
        ray.shutdown()
    print("ray stuck done", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
