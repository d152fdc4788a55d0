"""configure() in fresh processes: before import, after import, after the runtime started."""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers import run_cli, run_py


def _last_json(proc) -> dict:
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_before_import_masks_with_the_environment_and_splits_the_cpu():
    proc = run_py("""
        import json, os, sys
        import tfdevices
        cfg = tfdevices.configure(tfdevices.select("none", tfdevices.Inventory()), virtual_devices=4)
        import tensorflow as tf
        print(json.dumps({
            "imported_before": cfg.method,
            "env": [os.environ["CUDA_VISIBLE_DEVICES"], os.environ["CUDA_DEVICE_ORDER"]],
            "planned": list(cfg.logical_devices),
            "real": [d.name for d in tf.config.list_logical_devices()],
            "again_is_noop": tfdevices.configure(tfdevices.select("none", tfdevices.Inventory()),
                                                 virtual_devices=4) is cfg,
        }))
    """)
    out = _last_json(proc)
    assert out["imported_before"] == "environment"
    assert out["env"] == ["-1", "PCI_BUS_ID"]
    assert out["planned"] == ["CPU:0", "CPU:1", "CPU:2", "CPU:3"]
    assert out["real"] == [f"/device:CPU:{i}" for i in range(4)]
    assert out["again_is_noop"] is True


def test_after_import_uses_tf_config_and_a_second_change_before_start_is_allowed():
    proc = run_py("""
        import json, os
        import tensorflow as tf
        import tfdevices
        first = tfdevices.configure(tfdevices.select("none", tfdevices.Inventory()), virtual_devices=2)
        second = tfdevices.configure(tfdevices.select("none", tfdevices.Inventory()), virtual_devices=3)
        print(json.dumps({
            "method": second.method,
            "env_untouched": "CUDA_VISIBLE_DEVICES" not in os.environ,
            "planned": list(second.logical_devices),
            "real": [d.name for d in tf.config.list_logical_devices("CPU")],
            "visible_gpus": len(tf.config.get_visible_devices("GPU")),
        }))
    """)
    out = _last_json(proc)
    assert out["method"] == "tf.config"
    assert out["env_untouched"] is True
    assert out["planned"] == ["CPU:0", "CPU:1", "CPU:2"]
    assert out["real"] == [f"/device:CPU:{i}" for i in range(3)]
    assert out["visible_gpus"] == 0


def test_after_runtime_start_a_change_names_the_line_that_started_it():
    proc = run_py("""
        import tfdevices
        cfg = tfdevices.configure(virtual_devices=2)
        import tensorflow as tf
        x = tf.constant(1.0)  # starts the runtime
        assert tfdevices.runtime.runtime_started()
        assert tfdevices.configure(virtual_devices=2) is cfg  # same config: no-op
        try:
            tfdevices.configure(virtual_devices=3)
        except tfdevices.RuntimeInitializedError as err:
            print(err)
    """)
    message = proc.stdout.strip().splitlines()[-1]
    assert message.startswith(
        "cannot configure devices (mask=None, memory_growth=None, memory_limit=None, "
        "virtual_devices=3): TensorFlow's runtime has already started; it was started by <string>:"
    )
    assert "it was started by <string>:5 " in message  # line 5 of the script: x = tf.constant(1.0)
    assert "split=2" in message
    assert "HINT: call tfdevices.configure() first thing" in message


def test_after_runtime_start_without_tfdevices_watching_says_so():
    proc = run_py("""
        import tensorflow as tf
        import tfdevices
        assert not tfdevices.runtime.runtime_started()
        tf.config.list_logical_devices()  # starts the runtime
        try:
            tfdevices.configure(memory_growth=True)
        except tfdevices.RuntimeInitializedError as err:
            print(type(err).__mro__[1].__name__, isinstance(err, RuntimeError), err)
    """)
    line = proc.stdout.strip().splitlines()[-1]
    assert line.startswith("TfDevicesError True cannot configure devices (mask=None, memory_growth=True")
    assert "something in this process started it" in line


def test_memory_limit_without_gpu_is_noted_not_applied():
    proc = run_py("""
        import json, tfdevices
        cfg = tfdevices.configure(tfdevices.select("none", tfdevices.Inventory()), memory_limit="1GiB")
        print(json.dumps({"limit": cfg.memory_limit, "notes": list(cfg.notes), "table": cfg.table()}))
    """)
    out = _last_json(proc)
    assert out["limit"] is None
    assert out["notes"] == ["memory_limit not applied: no GPU is visible"]
    assert "note               memory_limit not applied" in out["table"]


@pytest.mark.parametrize(
    "kwargs, first_words",
    [
        ({"memory_growth": True, "virtual_devices": 2}, "memory_growth=True cannot be combined"),
        ({"memory_growth": True, "memory_limit": "1GiB"}, "memory_growth=True cannot be combined"),
        ({"memory_growth": "yes"}, "memory_growth='yes': must be True, False or None"),
        ({"virtual_devices": 0}, "virtual_devices=0: must be a whole number from 1 to 1024"),
        ({"virtual_devices": True}, "virtual_devices=True: must be a whole number from 1 to 1024"),
        ({"virtual_devices": "4"}, "virtual_devices='4': must be a whole number from 1 to 1024"),
        ({"virtual_devices": 10**30}, "virtual_devices=1000000000000000000000000000000: must be a whole number"),
        ({"memory_limit": "4"}, "memory_limit '4': a bare number is ambiguous"),
        ({"memory_limit": "512KiB"}, "memory_limit='512KiB': below 1 MiB"),
        ({"memory_limit": []}, "memory_limit=[]: a list needs 1 to 1024 sizes"),
        ({"memory_limit": ["1GiB", "1GiB"], "virtual_devices": 3}, "memory_limit lists 2 sizes but virtual_devices=3"),
        ({"memory_limit": {}}, "memory_limit={}: names no GPU"),
        ({"memory_limit": {"GPU:0": "1GiB"}}, "memory_limit: key 'GPU:0' is not a GPU's NVML key"),
        ({"memory_limit": {"0": "1GiB", 0: "2GiB"}}, "memory_limit names a GPU twice"),
        ({"memory_limit": {"1": ["1GiB", "1KiB"]}}, "memory_limit['1']=['1GiB', '1KiB']: below 1 MiB"),
    ],
)
def test_bad_arguments_fail_before_touching_tensorflow(kwargs, first_words):
    import sys

    import tfdevices

    had_tf = "tensorflow" in sys.modules
    with pytest.raises(tfdevices.InputError) as err:
        tfdevices.configure(**kwargs)
    assert str(err.value).startswith(first_words)
    assert ("tensorflow" in sys.modules) == had_tf


def test_a_spec_goes_through_select():
    import tfdevices

    with pytest.raises(tfdevices.SelectionError, match=r"^GPU spec 'auto:1': only 0 of 0 GPUs qualify"):
        tfdevices.configure("auto:1", inventory=tfdevices.Inventory())


def test_tf_name_for_a_gpu_that_is_not_configured():
    from tfdevices.runtime import RuntimeConfig

    cfg = RuntimeConfig(
        mask="2,5",
        method="environment",
        gpu_map=(("2", "GPU:0"), ("5", "GPU:1")),
        memory_growth=None,
        memory_limit=None,
        virtual_devices=None,
        split=None,
        logical_devices=("GPU:0", "GPU:1", "CPU:0"),
    )
    assert cfg.tf_name_for(5) == "GPU:1"
    assert cfg.tf_name_for("2") == "GPU:0"
    with pytest.raises(Exception, match=r"^GPU '3' is not configured for TensorFlow; configured NVML GPUs: 2, 5"):
        cfg.tf_name_for(3)


# --- the GPU paths, planned from inventories made of data (no GPU needed) ---

from tests import inventories as inv  # noqa: E402
from tfdevices import Selection, select  # noqa: E402
from tfdevices.runtime import plan_runtime  # noqa: E402

GiB = 1 << 30


def test_plan_masks_two_gpus_before_import():
    plan = plan_runtime(select("0,2", inv.eight()), memory_growth=True)
    assert dict(plan.env) == {"CUDA_VISIBLE_DEVICES": "0,2", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert plan.visible_ordinals is None and plan.gpu_count == 2
    assert plan.memory_growth is True and plan.gpu_limits == () and plan.config.notes == ()
    assert plan.config.gpu_map == (("0", "GPU:0"), ("2", "GPU:1"))
    assert plan.config.logical_devices == ("GPU:0", "GPU:1", "CPU:0")
    assert plan.config.tf_name_for(2) == "GPU:1"


def test_plan_splits_each_gpu_from_its_free_memory():
    plan = plan_runtime(select("0,2", inv.eight()), virtual_devices=2)
    assert plan.gpu_limits == ((int(78 * GiB * 0.95) // 2,) * 2, (int(39 * GiB * 0.95) // 2,) * 2)
    assert plan.cpu_split is None
    assert plan.config.split == "GPU" and plan.config.memory_limit is None  # the shares differ
    assert plan.config.gpu_map == (("0", "GPU:0"), ("2", "GPU:2"))
    assert plan.config.logical_devices == ("GPU:0", "GPU:1", "GPU:2", "GPU:3", "CPU:0")


def test_plan_memory_limit_per_gpu():
    plan = plan_runtime(select("auto:2", inv.eight()), memory_limit=4 * GiB)
    assert plan.gpu_limits == ((4 * GiB,), (4 * GiB,))
    assert plan.config.memory_limit == 4 * GiB and plan.config.split is None
    assert "memory limit       4.0 GiB" in plan.config.table()


def test_plan_after_import_uses_cuda_ordinals_of_the_current_mask():
    masked = inv.eight(visible=[6, 2])  # CUDA_VISIBLE_DEVICES=6,2 when TensorFlow was imported
    plan = plan_runtime(select("2", masked), tf_imported=True)
    assert plan.env == () and plan.visible_ordinals == (1,)
    assert plan.config.method == "tf.config" and plan.config.gpu_map == (("2", "GPU:0"),)


def test_plan_after_import_cannot_reach_a_hidden_gpu(monkeypatch):
    hidden = inv.eight(visible=[6]).get("2")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6-a-value-of-the-environment")
    with pytest.raises(Exception, match=r"^GPU 2 selected, but hidden from CUDA in this process") as raised:
        plan_runtime(Selection(spec="2", gpus=(hidden,)), tf_imported=True)
    assert "a-value-of-the-environment" not in str(raised.value)  # nothing tfdevices prints holds one


def test_plan_mig_instance_is_masked_by_uuid():
    plan = plan_runtime(select("0:1", inv.mig()))
    assert dict(plan.env)["CUDA_VISIBLE_DEVICES"] == "MIG-bbbb-1111"
    assert plan.config.gpu_map == (("0:1", "GPU:0"),)


def test_plan_split_without_selection_needs_a_limit():
    with pytest.raises(Exception, match=r"^virtual_devices=2: splitting a GPU needs each part's memory"):
        plan_runtime(None, virtual_devices=2, gpu_count=2)
    plan = plan_runtime(None, virtual_devices=2, memory_limit=GiB, gpu_count=2)
    assert plan.config.logical_devices == ("GPU:0", "GPU:1", "GPU:2", "GPU:3", "CPU:0")
    assert plan.config.method == "unchanged" and plan.env == ()


def test_plan_cpu_only_splits_the_cpu():
    plan = plan_runtime(select("none", inv.eight()), virtual_devices=4, memory_limit=GiB)
    assert dict(plan.env)["CUDA_VISIBLE_DEVICES"] == "-1"
    assert plan.cpu_split == 4 and plan.gpu_limits == ()
    assert plan.config.logical_devices == ("CPU:0", "CPU:1", "CPU:2", "CPU:3")
    assert plan.config.notes == ("memory_limit not applied: no GPU is visible",)


def test_plan_memory_limit_by_gpu_and_uneven_splits():
    """A dict by NVML index: one size or a list (an uneven split) each; a GPU not named keeps TensorFlow's default."""
    plan = plan_runtime(select("0,2,5", inv.eight()), memory_limit={"5": "4GiB", "0": ["6GiB", "2GiB"]})
    assert plan.gpu_limits == ((6 * GiB, 2 * GiB), (), (4 * GiB,))
    assert plan.config.gpu_map == (("0", "GPU:0"), ("2", "GPU:2"), ("5", "GPU:3"))
    assert plan.config.logical_devices == ("GPU:0", "GPU:1", "GPU:2", "GPU:3", "CPU:0")
    assert plan.config.memory_limit is None and plan.config.virtual_devices is None  # neither is one number
    assert "memory limit       GPU 0: 6.0 GiB + 2.0 GiB; GPU 5: 4.0 GiB" in plan.config.table()
    listed = plan_runtime(select("0,2", inv.eight()), memory_limit=["3GiB", "3GiB"])
    assert listed.gpu_limits == ((3 * GiB,) * 2,) * 2 and listed.config.virtual_devices == 2
    assert listed.config.memory_limit == 3 * GiB and listed.config.split == "GPU"


def test_plan_memory_limit_for_a_gpu_not_selected_is_an_error():
    with pytest.raises(Exception, match=r"^memory_limit names GPU 7, which is not selected; selected: 0, 2\."):
        plan_runtime(select("0,2", inv.eight()), memory_limit={"7": "1GiB"})


def test_memory_growth_without_gpu_is_a_no_op_said_once():
    proc = run_py("""
        import json, logging, tfdevices
        said = []
        handler = type("H", (logging.Handler,), {"emit": lambda s, r: said.append(r.getMessage())})
        logging.getLogger("tfdevices").addHandler(handler())
        cfg = tfdevices.configure(memory_growth=True)          # a portable script, on a machine without a GPU
        again = tfdevices.configure(memory_growth=True)
        print(json.dumps({"notes": list(cfg.notes), "said": said, "same": cfg is again, "growth": cfg.memory_growth}))
    """)
    out = _last_json(proc)
    assert out == {
        "notes": ["memory_growth=True not applied: no GPU is visible"],
        "said": ["tfdevices: memory_growth=True not applied: no GPU is visible"],
        "same": True,
        "growth": True,
    }


NODE8 = os.path.join(os.path.dirname(__file__), "data", "node-8gpu.json")


def test_dry_run_plans_against_a_saved_inventory_without_touching_anything():
    proc = run_py(f"""
        import json, os, sys, tfdevices
        os.environ["TFDEVICES_INVENTORY"] = {NODE8!r}
        cfg = tfdevices.configure("0,2", virtual_devices=2, dry_run=True)
        by_gpu = tfdevices.configure("auto:2", memory_limit={{"0": "8GiB", "2": ["4GiB", "4GiB"]}}, dry_run=True)
        print(json.dumps({{"tf": "tensorflow" in sys.modules, "mask": os.environ.get("CUDA_VISIBLE_DEVICES"),
                          "current": tfdevices.runtime.current() is not None, "table": cfg.table(),
                          "logical": list(cfg.logical_devices), "by_gpu": by_gpu.table()}}))
    """)
    out = _last_json(proc)
    assert (out["tf"], out["mask"], out["current"]) == (False, None, False)  # nothing applied, TensorFlow untouched
    assert out["logical"] == ["GPU:0", "GPU:1", "GPU:2", "GPU:3", "CPU:0"]
    table = out["table"]
    assert (
        "mask               CUDA_VISIBLE_DEVICES=0,2 (via dry run: nothing applied; would set "
        "CUDA_VISIBLE_DEVICES=0,2, CUDA_DEVICE_ORDER=PCI_BUS_ID)" in table
    )
    assert "GPUs (NVML -> TF)  0 -> GPU:0 and GPU:1, 2 -> GPU:2 and GPU:3" in table
    assert "logical split      GPU x 2" in table
    assert "memory limit       GPU 0: 37.0 GiB + 37.0 GiB; GPU 2: 18.5 GiB + 18.5 GiB" in table  # 95% of free / 2
    assert "memory limit       GPU 0: 8.0 GiB; GPU 2: 4.0 GiB + 4.0 GiB" in out["by_gpu"]


def test_cli_configure_dry_run_prints_the_table():
    proc = run_cli("configure", "--dry-run", "--inventory", NODE8, "0,2", "--memory-limit", "0=8GiB,2=4GiB")
    assert proc.returncode == 0, proc.stderr
    assert "CUDA_VISIBLE_DEVICES=0,2" in proc.stdout and "GPU 0: 8.0 GiB; GPU 2: 4.0 GiB" in proc.stdout
    split = run_cli("configure", "--dry-run", "--inventory", NODE8, "1", "--memory-limit", "6GiB+2GiB")
    assert "GPU 1: 6.0 GiB + 2.0 GiB" in split.stdout and "1 -> GPU:0" in split.stdout, split.stdout + split.stderr
    bad = run_cli("configure", "--dry-run", "--inventory", NODE8, "0", "--memory-limit", "9=1GiB")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--memory-limit names GPU 9" in bad.stderr
    nodry = run_cli("configure", "0")
    assert nodry.returncode == 2 and "--dry-run" in nodry.stderr


def test_cli_configure_dry_run_without_a_spec_plans_for_the_visible_gpus():
    proc = run_cli("configure", "--dry-run", "--inventory", NODE8, "--memory-limit", "4GiB")
    assert proc.returncode == 0, proc.stderr
    assert "memory limit       4.0 GiB" in proc.stdout
    assert "logical devices    GPU:0, GPU:1, GPU:2, GPU:3, GPU:4, GPU:5, GPU:6, GPU:7, CPU:0" in proc.stdout


@pytest.mark.parametrize("value", ["\u0663", "9" * 5000, "2000", "-1"])
def test_virtual_devices_variable_takes_ascii_digits_only(value):
    from tfdevices.core.errors import EnvVarError
    from tfdevices.runtime import configure_worker

    with pytest.raises(EnvVarError, match="^TFDEVICES_VIRTUAL_DEVICES is not a whole number >= 1"):
        configure_worker({"TFDEVICES_VIRTUAL_DEVICES": value})
