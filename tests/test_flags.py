"""absl flags: validated at parse time on an isolated FlagValues; configure_from_flags in fresh processes."""

from __future__ import annotations

import json

import pytest
from absl import flags

from tests.helpers import run_py
from tfdevices import flags as tfd_flags
from tfdevices.core.errors import InputError


def parse(*args: str) -> flags.FlagValues:
    fv = flags.FlagValues()
    tfd_flags.define_flags(fv)
    fv(["prog", *args])
    return fv


def test_defaults():
    fv = parse()
    assert {n: fv[n].value for n in tfd_flags.NAMES} == {
        "gpus": "all",
        "min_free_memory": None,
        "memory_growth": None,
        "memory_limit": None,
        "virtual_devices": None,
        "strategy": "auto",
        "cross_device_ops": "auto",
        "logdir": "logs",
        "log_placement": False,
    }


@pytest.mark.parametrize(
    "args, name, value",
    [
        (["--gpus=auto:2"], "gpus", "auto:2"),
        (["--gpus=0,2"], "gpus", "0,2"),
        (["--gpus", "none"], "gpus", "none"),
        (["--min_free_memory=8GiB"], "min_free_memory", "8GiB"),
        (["--memory_growth"], "memory_growth", True),
        (["--nomemory_growth"], "memory_growth", False),
        (["--memory_limit=512MiB"], "memory_limit", "512MiB"),
        (["--virtual_devices=4"], "virtual_devices", 4),
        (["--strategy=one_device"], "strategy", "one_device"),
        (["--cross_device_ops=hierarchical_copy"], "cross_device_ops", "hierarchical_copy"),
        (["--log_placement", "--logdir=/tmp/x"], "log_placement", True),
        (["--log_placement"], "logdir", "logs"),  # --logdir's default: logs under the working directory
    ],
)
def test_good_flags(args, name, value):
    assert parse(*args)[name].value == value


@pytest.mark.parametrize(
    "args, words",
    [
        (["--gpus=auto"], "--gpus 'auto'"),
        (["--gpus=GPU:1"], "--gpus 'GPU:1'"),
        (["--gpus="], "--gpus ''"),
        (["--min_free_memory=8"], "--min_free_memory '8': a bare number is ambiguous"),
        (["--min_free_memory=lots"], "--min_free_memory 'lots': not a size"),
        (["--memory_limit=4XB"], "--memory_limit '4XB': unknown unit"),
        (["--virtual_devices=0"], "virtual_devices"),
        (["--virtual_devices=two"], "virtual_devices"),
        (["--strategy=mirror"], "strategy"),
        (["--cross_device_ops=NCCL"], "cross_device_ops"),
        (["--memory_growth=maybe"], "memory_growth"),
        (["--log_placement", "--logdir="], "--logdir='': expected a directory"),
    ],
)
def test_bad_flags_fail_at_parse_time(args, words):
    with pytest.raises(flags.Error) as info:
        parse(*args)
    assert words in str(info.value)


def test_define_flags_twice_is_a_no_op():
    fv = flags.FlagValues()
    tfd_flags.define_flags(fv)
    tfd_flags.define_flags(fv)
    assert set(tfd_flags.NAMES) <= set(fv)


def test_configure_needs_defined_and_parsed_flags():
    with pytest.raises(InputError, match="the tfdevices flags are not defined"):
        tfd_flags.configure_from_flags(flags.FlagValues())
    fv = flags.FlagValues()
    tfd_flags.define_flags(fv)
    with pytest.raises(InputError, match="the flags are not parsed yet"):
        tfd_flags.configure_from_flags(fv)


CONFIGURE = """
    import json, sys
    from absl import flags
    from tfdevices import flags as tfd_flags
    fv = flags.FlagValues()
    tfd_flags.define_flags(fv)
    fv(["prog", *{args!r}])
    s = tfd_flags.configure_from_flags(fv, cpu_virtual_devices={cpu!r})
    import tensorflow as tf
    with s.scope():  # what configure_from_flags returns is the tf.distribute strategy
        in_scope = tf.distribute.get_strategy() is s and tf.Variable(1.0) is not None
    table = s.table()
    print(json.dumps({{"kind": s.kind, "devices": list(s.tf_devices), "ops": s.cross_device_ops, "logdir": s.logdir,
                      "replicas": s.num_replicas_in_sync, "mask": s.runtime.mask, "spec": s.selection.spec,
                      "logical": list(s.runtime.logical_devices), "in_scope": in_scope,
                      "strategy": isinstance(s, tf.distribute.Strategy),
                      "table": [s.selection.table() in table, s.runtime.table() in table,
                                s.info.table() in table]}}))
"""


@pytest.mark.parametrize(
    "args, cpu, expected",
    [
        (
            ["--gpus=none", "--virtual_devices=3", "--logdir=runs/a"],
            None,
            {
                "kind": "mirrored",
                "devices": ["CPU:0", "CPU:1", "CPU:2"],
                "ops": "reduction_to_one_device",
                "replicas": 3,
                "logdir": "runs/a",
            },
        ),
        (
            ["--gpus=none", "--strategy=one_device"],
            2,
            {"kind": "one_device", "devices": ["CPU:0"], "ops": "none", "replicas": 1},
        ),
        (
            ["--gpus=none", "--strategy=mirrored", "--cross_device_ops=hierarchical_copy"],
            2,
            {"kind": "mirrored", "devices": ["CPU:0", "CPU:1"], "ops": "hierarchical_copy", "replicas": 2},
        ),
        ([], None, {"kind": "one_device", "devices": ["CPU:0"], "ops": "none", "replicas": 1, "logdir": "logs"}),
    ],
)
def test_configure_from_flags(args, cpu, expected):
    out = json.loads(run_py(CONFIGURE.format(args=args, cpu=cpu)).stdout.strip().splitlines()[-1])
    assert {k: out[k] for k in expected} == expected
    assert out["strategy"] and out["in_scope"] and out["table"] == [True, True, True]
    assert out["mask"] == "-1"  # no GPU on this machine (or selected): masked before TensorFlow started


def test_configure_from_flags_error_names_the_reason():
    proc = run_py(
        CONFIGURE.format(args=["--gpus=none", "--virtual_devices=2", "--cross_device_ops=nccl"], cpu=None), check=False
    )
    assert proc.returncode != 0
    assert "StrategyError: cross_device_ops='nccl' cannot work here: CPU devices take part" in proc.stderr


def test_log_placement_captures_and_writes(tmp_path):
    proc = run_py(f"""
        import json, os
        from absl import flags
        import tensorflow as tf
        from tfdevices import flags as tfd_flags
        fv = flags.FlagValues()
        tfd_flags.define_flags(fv)
        fv(["prog"])
        assert tfd_flags.log_placement(lambda: 1, flag_values=fv) is None
        fv = flags.FlagValues()
        tfd_flags.define_flags(fv)
        fv(["prog", "--log_placement", "--logdir={tmp_path}"])
        step = tf.function(lambda x: tf.reduce_sum(x * 2.0))
        report = tfd_flags.log_placement(step, tf.ones([3]), flag_values=fv)
        print(json.dumps({{"devices": list(report.devices), "files": os.listdir("{tmp_path}")}}))
    """)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["devices"] == ["CPU:0"]
    assert any(f.startswith("events.out.tfevents") for f in out["files"])


def test_logdir_that_is_a_file_or_under_one_fails_at_parse_time(tmp_path):
    from absl import flags as absl_flags

    from tfdevices.flags import define_flags, max_virtual_devices

    blocker = tmp_path / "file"
    blocker.write_text("x")
    for logdir, words in ((blocker, "is a file"), (blocker / "run", "lies under")):
        fv = absl_flags.FlagValues()
        define_flags(fv)
        with pytest.raises(absl_flags.IllegalFlagValueError, match=words):
            fv(["prog", f"--logdir={logdir}"])
    fv = absl_flags.FlagValues()
    define_flags(fv)
    with pytest.raises(absl_flags.IllegalFlagValueError, match="virtual_devices"):
        fv(["prog", f"--virtual_devices={max_virtual_devices() + 1}"])
    fv = absl_flags.FlagValues()
    define_flags(fv)
    fv(["prog", f"--logdir={tmp_path / 'new' / 'run'}", f"--virtual_devices={max_virtual_devices()}"])
    assert fv.virtual_devices == max_virtual_devices()
