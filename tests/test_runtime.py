"""configure() in fresh processes: before import, after import, after the runtime started."""

from __future__ import annotations

import json

import pytest

from tests.helpers import run_py


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
    assert message.startswith("cannot configure devices (mask=None, memory_growth=None, memory_limit=None, "
                              "virtual_devices=3): TensorFlow's runtime has already started; it was started by <string>:")
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


@pytest.mark.parametrize("kwargs, first_words", [
    ({"memory_growth": True, "virtual_devices": 2}, "memory_growth=True cannot be combined"),
    ({"memory_growth": True, "memory_limit": "1GiB"}, "memory_growth=True cannot be combined"),
    ({"memory_growth": "yes"}, "memory_growth='yes': must be True, False or None"),
    ({"virtual_devices": 0}, "virtual_devices=0: must be a whole number >= 1"),
    ({"virtual_devices": True}, "virtual_devices=True: must be a whole number >= 1"),
    ({"virtual_devices": "4"}, "virtual_devices='4': must be a whole number >= 1"),
    ({"memory_limit": "4"}, "memory_limit '4': a bare number is ambiguous"),
    ({"memory_limit": "512KiB"}, "memory_limit='512KiB': below 1 MiB"),
])
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

    cfg = RuntimeConfig(mask="2,5", method="environment", gpu_map=(("2", "GPU:0"), ("5", "GPU:1")),
                        memory_growth=None, memory_limit=None, virtual_devices=None, split=None,
                        logical_devices=("GPU:0", "GPU:1", "CPU:0"))
    assert cfg.tf_name_for(5) == "GPU:1"
    assert cfg.tf_name_for("2") == "GPU:0"
    with pytest.raises(Exception, match=r"^GPU '3' is not configured for TensorFlow; configured NVML GPUs: 2, 5"):
        cfg.tf_name_for(3)


# --- the GPU paths, planned from inventories made of data (no GPU needed) ---

from tfdevices import Selection, select  # noqa: E402
from tfdevices.runtime import plan_runtime  # noqa: E402
from tests import inventories as inv  # noqa: E402

GiB = 1 << 30


def test_plan_masks_two_gpus_before_import():
    plan = plan_runtime(select("2,0", inv.eight()), memory_growth=True)
    assert dict(plan.env) == {"CUDA_VISIBLE_DEVICES": "0,2", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert plan.visible_ordinals is None and plan.gpu_count == 2
    assert plan.memory_growth is True and plan.gpu_limits == ()
    assert plan.config.gpu_map == (("0", "GPU:0"), ("2", "GPU:1"))
    assert plan.config.logical_devices == ("GPU:0", "GPU:1", "CPU:0")
    assert plan.config.tf_name_for(2) == "GPU:1"


def test_plan_splits_each_gpu_from_its_free_memory():
    plan = plan_runtime(select("0,2", inv.eight()), virtual_devices=2)
    assert plan.gpu_limits == (int(78 * GiB * 0.95) // 2, int(39 * GiB * 0.95) // 2)
    assert plan.per_gpu == 2 and plan.cpu_split is None
    assert plan.config.split == "GPU" and plan.config.memory_limit is None  # the shares differ
    assert plan.config.gpu_map == (("0", "GPU:0"), ("2", "GPU:2"))
    assert plan.config.logical_devices == ("GPU:0", "GPU:1", "GPU:2", "GPU:3", "CPU:0")


def test_plan_memory_limit_per_gpu():
    plan = plan_runtime(select("auto:2", inv.eight()), memory_limit=4 * GiB)
    assert plan.gpu_limits == (4 * GiB, 4 * GiB) and plan.per_gpu == 1
    assert plan.config.memory_limit == 4 * GiB and plan.config.split is None
    assert "memory limit       4.0 GiB" in plan.config.table()


def test_plan_after_import_uses_cuda_ordinals_of_the_current_mask():
    masked = inv.eight(visible=[6, 2])  # CUDA_VISIBLE_DEVICES=6,2 when TensorFlow was imported
    plan = plan_runtime(select("2", masked), tf_imported=True)
    assert plan.env == () and plan.visible_ordinals == (1,)
    assert plan.config.method == "tf.config" and plan.config.gpu_map == (("2", "GPU:0"),)


def test_plan_after_import_cannot_reach_a_hidden_gpu():
    hidden = inv.eight(visible=[6]).get("2")
    with pytest.raises(Exception, match=r"^GPU 2 selected, but hidden from CUDA in this process"):
        plan_runtime(Selection(spec="2", gpus=(hidden,)), tf_imported=True)


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


@pytest.mark.parametrize("value", ["\u0663", "9" * 5000, "2000", "-1"])
def test_virtual_devices_variable_takes_ascii_digits_only(value):
    from tfdevices.core.errors import EnvVarError
    from tfdevices.runtime import configure_worker

    with pytest.raises(EnvVarError, match="TFDEVICES_VIRTUAL_DEVICES=.* is not a whole number >= 1"):
        configure_worker({"TFDEVICES_VIRTUAL_DEVICES": value})
