"""Strategies: pure decisions as tables (no TensorFlow), then every kind built on 4 logical CPUs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.helpers import run_py
from tfdevices.core.errors import LaunchError, SpecError, StrategyError, TfConfigError
from tfdevices.jobs.tfconfig import make_tf_config
from tfdevices.strategy import choose_cross_device_ops, cluster_from_env, decide_strategy
from tfdevices.training import KERAS3_FIT_MESSAGE

CPU4 = ["CPU:0", "CPU:1", "CPU:2", "CPU:3"]
GPU2 = ["CPU:0", "GPU:0", "GPU:1"]

# --------------------------------------------------------------------------- decide (pure)

DECISIONS = [
    # kind, devices, num_workers, explicit, source -> kind, devices, warns
    ("auto", ["CPU:0"], 1, False, "none", "one_device", ("CPU:0",), True),
    ("auto", CPU4, 1, False, "none", "mirrored", tuple(CPU4), True),
    ("auto", ["CPU:0", "GPU:0"], 1, False, "none", "one_device", ("GPU:0",), False),
    ("auto", GPU2, 1, False, "none", "mirrored", ("GPU:0", "GPU:1"), False),
    ("auto", GPU2, 2, False, "TF_CONFIG", "multi_worker", ("GPU:0", "GPU:1"), False),
    ("auto", ["CPU:0"], 4, False, "SLURM", "multi_worker", ("CPU:0",), True),
    ("auto", ["GPU:1"], 1, True, "none", "one_device", ("GPU:1",), False),
    ("auto", ["CPU:2"], 1, True, "none", "one_device", ("CPU:2",), True),
    ("auto", ["CPU:1", "CPU:3"], 1, True, "none", "mirrored", ("CPU:1", "CPU:3"), True),
    ("auto", ["/device:GPU:1", "gpu:0"], 1, True, "none", "mirrored", ("GPU:1", "GPU:0"), False),
    ("default", GPU2, 1, False, "none", "default", ("GPU:0",), False),
    ("default", CPU4, 3, False, "TF_CONFIG", "default", ("CPU:0",), False),
    ("one_device", GPU2, 1, False, "none", "one_device", ("GPU:0",), False),
    ("one_device", CPU4, 1, False, "none", "one_device", ("CPU:0",), True),
    ("one_device", ["CPU:3"], 1, True, "none", "one_device", ("CPU:3",), False),
    ("mirrored", GPU2, 1, False, "none", "mirrored", ("GPU:0", "GPU:1"), False),
    ("mirrored", CPU4, 1, False, "none", "mirrored", tuple(CPU4), True),
    ("mirrored", ["GPU:0"], 1, True, "none", "mirrored", ("GPU:0",), False),
    ("mirrored", ["CPU:0", "GPU:0"], 1, True, "none", "mirrored", ("CPU:0", "GPU:0"), True),
    ("multi_worker", GPU2, 2, False, "TF_CONFIG", "multi_worker", ("GPU:0", "GPU:1"), False),
    ("multi_worker", CPU4, 1, False, "none", "multi_worker", ("CPU:0",), True),
]


@pytest.mark.parametrize("kind, devices, workers, explicit, source, want_kind, want_devices, warns", DECISIONS)
def test_decide_strategy(kind, devices, workers, explicit, source, want_kind, want_devices, warns):
    d = decide_strategy(kind, devices, workers, explicit=explicit, cluster_source=source)
    assert (d.kind, d.tf_devices, bool(d.warnings)) == (want_kind, want_devices, warns)
    assert d.reason and d.devices == d.tf_devices and d.cluster_source == source
    assert d.num_workers == (workers if want_kind == "multi_worker" else 1)
    assert d.num_replicas == (1 if want_kind == "default" else len(want_devices) * d.num_workers)
    assert (d.cross_device_ops, d.strategy_class) == ("", "")  # chosen when the strategy is built


def test_the_decisions_0_2_names_are_gone_in_0_4():
    import tfdevices.strategy as module

    with pytest.raises(AttributeError, match="no attribute 'StrategyDecision'"):
        module.StrategyDecision  # noqa: B018
    with pytest.raises(AttributeError, match="no attribute 'warning'"):
        decide_strategy("auto", ["CPU:0"]).warning  # noqa: B018
    assert decide_strategy("auto", ["CPU:0"]).warnings == ("no GPU visible: running on the CPU.",)


@pytest.mark.parametrize(
    "kind, devices, explicit, words",
    [
        ("mirror", CPU4, False, "strategy kind 'mirror' is unknown"),
        ("", CPU4, False, "strategy kind '' is unknown"),
        ("default", ["CPU:0"], True, "strategy 'default' takes no devices"),
        ("one_device", ["CPU:0", "CPU:1"], True, "strategy 'one_device' takes one device, got 2"),
        ("multi_worker", ["GPU:0"], True, "strategy 'multi_worker' uses every visible GPU"),
        ("mirrored", [], True, "devices=[] names no device"),
        ("auto", [], True, "devices=[] names no device"),
    ],
)
def test_decide_strategy_errors(kind, devices, explicit, words):
    with pytest.raises(StrategyError) as info:
        decide_strategy(kind, devices, explicit=explicit)
    assert words in str(info.value) and "HINT:" in str(info.value)


# --------------------------------------------------------------------------- cluster (pure)

TF2 = make_tf_config(["localhost:1", "localhost:2"], 1)
SRUN = {"SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_LOCALID": "0"}


@pytest.mark.parametrize(
    "env, workers, source",
    [
        ({}, 1, "none"),
        ({"TF_CONFIG": ""}, 1, "none"),
        ({"TF_CONFIG": TF2}, 2, "TF_CONFIG"),
        ({"TF_CONFIG": make_tf_config(["a:1", "b:1", "c:1"], 0, "chief")}, 3, "TF_CONFIG"),
        ({"TF_CONFIG": make_tf_config(["a:1"], 0)}, 1, "TF_CONFIG"),
        # srun sets SLURM_STEP_ID and SLURM_LOCALID for every task of a step
        (
            {
                **SRUN,
                "SLURM_PROCID": "1",
                "SLURM_LOCALID": "1",
                "SLURM_STEP_NUM_TASKS": "4",
                "SLURM_STEP_NUM_NODES": "2",
            },
            4,
            "SLURM",
        ),
        ({**SRUN, "SLURM_NTASKS": "2", "SLURM_JOB_NUM_NODES": "1"}, 2, "SLURM"),
        ({**SRUN, "SLURM_NTASKS": "1", "SLURM_NNODES": "1"}, 1, "none"),
        ({"SLURM_NTASKS": "8", "SLURM_JOB_NUM_NODES": "2"}, 1, "none"),  # sbatch script, not inside srun
        ({"SLURM_PROCID": "0", "SLURM_NTASKS": "8"}, 1, "none"),  # the batch step itself is one process
        ({"TF_CONFIG": TF2, "SLURM_PROCID": "0", "SLURM_NTASKS": "8"}, 2, "TF_CONFIG"),
        ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}, 1, "none"),  # mpirun gives TF no cluster
    ],
)
def test_cluster_from_env(env, workers, source):
    c = cluster_from_env(env)
    assert (c.num_workers, c.source) == (workers, source)
    assert c.reason


@pytest.mark.parametrize(
    "env, error, words",
    [
        ({"TF_CONFIG": "{"}, TfConfigError, "TF_CONFIG: not valid JSON"),
        (
            {"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 1}})},
            TfConfigError,
            "TF_CONFIG: the task index is past the last address of job 'worker'",
        ),
        ({**SRUN, "SLURM_PROCID": "zero", "SLURM_NTASKS": "2"}, LaunchError, "SLURM_PROCID is not a whole number"),
        ({**SRUN, "SLURM_STEP_NUM_TASKS": "2x"}, LaunchError, "SLURM_STEP_NUM_TASKS is not a whole number"),
    ],
)
def test_cluster_from_env_errors(env, error, words):
    with pytest.raises(error) as info:
        cluster_from_env(env)
    assert str(info.value).startswith(words)


# --------------------------------------------------------------------------- cross-device ops (pure)

LINUX_NCCL = dict(platform="linux", nccl_available=True, virtual_gpus=False)
OPS = [
    # requested, kind, devices, facts -> name
    ("auto", "mirrored", ["GPU:0", "GPU:1"], LINUX_NCCL, "nccl"),
    ("auto", "mirrored", ["GPU:0", "GPU:1"], dict(LINUX_NCCL, nccl_available=False), "hierarchical_copy"),
    ("auto", "mirrored", ["GPU:0", "GPU:1"], dict(LINUX_NCCL, platform="win32"), "hierarchical_copy"),
    ("auto", "mirrored", ["GPU:0", "GPU:1"], dict(LINUX_NCCL, virtual_gpus=True), "hierarchical_copy"),
    ("auto", "mirrored", ["CPU:0", "CPU:1"], LINUX_NCCL, "reduction_to_one_device"),
    ("auto", "mirrored", ["CPU:0", "GPU:0"], LINUX_NCCL, "reduction_to_one_device"),
    ("auto", "multi_worker", ["GPU:0"], LINUX_NCCL, "nccl"),
    ("auto", "multi_worker", ["CPU:0"], LINUX_NCCL, "ring"),
    ("auto", "multi_worker", ["GPU:0"], dict(LINUX_NCCL, nccl_available=False), "ring"),
    ("auto", "one_device", ["GPU:0"], LINUX_NCCL, "none"),
    ("none", "default", ["CPU:0"], LINUX_NCCL, "none"),
    ("nccl", "mirrored", ["GPU:0", "GPU:1"], LINUX_NCCL, "nccl"),
    ("hierarchical_copy", "mirrored", ["CPU:0", "CPU:1"], LINUX_NCCL, "hierarchical_copy"),
    ("reduction_to_one_device", "mirrored", ["GPU:0", "GPU:1"], LINUX_NCCL, "reduction_to_one_device"),
    ("ring", "multi_worker", ["GPU:0"], LINUX_NCCL, "ring"),
]


@pytest.mark.parametrize("requested, kind, devices, facts, name", OPS)
def test_choose_cross_device_ops(requested, kind, devices, facts, name):
    choice = choose_cross_device_ops(requested, kind, devices, **facts)
    assert choice.name == name and choice.reason


@pytest.mark.parametrize(
    "requested, kind, devices, facts, words",
    [
        ("nccl", "mirrored", ["CPU:0", "CPU:1"], LINUX_NCCL, "NCCL reduces between GPUs only"),
        ("nccl", "mirrored", ["GPU:0", "GPU:1"], dict(LINUX_NCCL, platform="darwin"), "NCCL runs on Linux only"),
        ("nccl", "mirrored", ["GPU:0", "GPU:1"], dict(LINUX_NCCL, nccl_available=False), "has no NCCL"),
        ("nccl", "mirrored", ["GPU:0", "GPU:1"], dict(LINUX_NCCL, virtual_gpus=True), "split into virtual devices"),
        ("nccl", "multi_worker", ["CPU:0"], LINUX_NCCL, "NCCL reduces between GPUs only"),
        ("ring", "mirrored", ["GPU:0", "GPU:1"], LINUX_NCCL, "does not apply to the 'mirrored' strategy"),
        ("hierarchical_copy", "multi_worker", ["GPU:0"], LINUX_NCCL, "does not apply to the 'multi_worker'"),
        ("nccl", "one_device", ["GPU:0"], LINUX_NCCL, "does not apply to the 'one_device' strategy"),
        ("NCCL", "mirrored", ["GPU:0", "GPU:1"], LINUX_NCCL, "cross_device_ops 'NCCL' is unknown"),
    ],
)
def test_choose_cross_device_ops_errors(requested, kind, devices, facts, words):
    with pytest.raises(StrategyError) as info:
        choose_cross_device_ops(requested, kind, devices, **facts)
    assert words in str(info.value) and "HINT:" in str(info.value)


# --------------------------------------------------------------------------- build (TensorFlow)

BUILDS = [
    # kind, devices, cross_device_ops -> kind, tf class, tf_devices, cross ops
    ("auto", None, "auto", "mirrored", "MirroredStrategy", tuple(CPU4), "reduction_to_one_device"),
    ("default", None, "auto", "default", "DefaultStrategy", ("CPU:0",), "none"),
    ("one_device", ["CPU:2"], "auto", "one_device", "OneDeviceStrategy", ("CPU:2",), "none"),
    ("one_device", None, "none", "one_device", "OneDeviceStrategy", ("CPU:0",), "none"),
    (
        "mirrored",
        ["CPU:0", "/device:CPU:3"],
        "auto",
        "mirrored",
        "MirroredStrategy",
        ("CPU:0", "CPU:3"),
        "reduction_to_one_device",
    ),
    (
        "mirrored",
        ["CPU:1", "CPU:2"],
        "hierarchical_copy",
        "mirrored",
        "MirroredStrategy",
        ("CPU:1", "CPU:2"),
        "hierarchical_copy",
    ),
    ("auto", ["CPU:1"], "auto", "one_device", "OneDeviceStrategy", ("CPU:1",), "none"),
]


@pytest.mark.parametrize("kind, devices, ops, want_kind, cls, tf_devices, want_ops", BUILDS)
def test_build_strategy_kinds(tf4, kind, devices, ops, want_kind, cls, tf_devices, want_ops):
    from tfdevices import build_strategy
    from tfdevices.strategy import explanation

    info = explanation(build_strategy(kind, devices, ops, env={}))
    assert (info.kind, type(info.strategy).__name__, info.tf_devices, info.cross_device_ops) == (
        want_kind,
        cls,
        tf_devices,
        want_ops,
    )
    assert info.devices == tf_devices  # no GPU: the tfdevices names are the logical CPU names
    assert info.num_replicas == (len(tf_devices) if want_kind != "default" else 1)
    if want_kind in ("one_device", "mirrored"):
        assert tuple(d.rsplit("/device:", 1)[1] for d in info.strategy.extended.worker_devices) == tf_devices
    table = info.table()
    assert f"strategy: {want_kind}" in table and all(d in table for d in tf_devices)


def test_build_strategy_replicas_reduce_across_devices(tf4):
    """A sum over replicas really runs on every device of the strategy."""
    from tfdevices import build_strategy

    info = build_strategy("mirrored", ["CPU:1", "CPU:2", "CPU:3"], env={})

    @tf4.function
    def replica_ids():
        ctx = tf4.distribute.get_replica_context()
        return ctx.all_reduce("sum", tf4.cast(ctx.replica_id_in_sync_group, tf4.float32) + 1.0)

    result = info.strategy.run(replica_ids)
    values = [float(v) for v in info.strategy.experimental_local_results(result)]
    assert values == [6.0, 6.0, 6.0]


@pytest.mark.parametrize(
    "kind, devices, ops, error, words",
    [
        ("mirrored", ["CPU:7"], "auto", SpecError, "TensorFlow has no device CPU:7"),
        ("mirrored", [0], "auto", SpecError, "TensorFlow does not see the GPU with NVML index 0"),
        ("mirrored", None, "nccl", StrategyError, "cross_device_ops='nccl' cannot work here"),
        ("one_device", None, "hierarchical_copy", StrategyError, "does not apply to the 'one_device'"),
        ("multi_worker", None, "auto", StrategyError, "must be built before TensorFlow's runtime starts"),
        ("single", None, "auto", StrategyError, "strategy kind 'single' is unknown"),
    ],
)
def test_build_strategy_errors(tf4, kind, devices, ops, error, words):
    from tfdevices import build_strategy

    with pytest.raises(error) as info:
        build_strategy(kind, devices, ops, env={})
    assert words in str(info.value)


def test_build_strategy_reads_tf_config_from_env(tf4):
    from tfdevices import build_strategy

    with pytest.raises(TfConfigError, match="^TF_CONFIG: an unknown task type"):
        build_strategy(
            "auto",
            env={
                "TF_CONFIG": json.dumps({"cluster": {"worker": ["localhost:1"]}, "task": {"type": "boss", "index": 0}})
            },
        )


def _fit_losses(tf, info, epochs=3):
    import keras

    keras.utils.set_random_seed(7)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(128, 6)).astype("float32")
    y = (x @ rng.normal(size=(6, 1))).astype("float32")
    with info.strategy.scope():
        model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
    history = model.fit(ds, epochs=epochs, verbose=0, shuffle=False)
    return history.history["loss"], [w.numpy() for w in model.weights]


def test_fit_under_mirrored_matches_one_device(tf4):
    from tfdevices import build_strategy

    # build_strategy("mirrored") mends Keras 3.3-3.7's fit, which trains wrongly there (README's support table)
    one_losses, one_weights = _fit_losses(tf4, build_strategy("one_device", ["CPU:0"], env={}))
    mir_losses, mir_weights = _fit_losses(tf4, build_strategy("mirrored", ["CPU:1", "CPU:2"], env={}))
    assert one_losses[-1] < one_losses[0]  # it trained
    np.testing.assert_allclose(mir_losses, one_losses, rtol=1e-4)
    for a, b in zip(mir_weights, one_weights):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_train_custom_loop_matches_fit_on_one_process(tf4):
    import keras

    from tfdevices import build_strategy
    from tfdevices.training import train

    rng = np.random.default_rng(1)
    x = rng.normal(size=(64, 4)).astype("float32")
    y = x.sum(1, keepdims=True).astype("float32")
    ds = tf4.data.Dataset.from_tensor_slices((x, y)).batch(16)

    def model_fn():
        keras.utils.set_random_seed(3)
        return keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])

    info = build_strategy("mirrored", ["CPU:0", "CPU:1"], env={})
    kw = dict(loss="mse", optimizer_fn=lambda: keras.optimizers.SGD(0.1), epochs=2, global_batch_size=16)
    loop = train(info, model_fn, ds, path="custom_loop", **kw)
    fit = train(info, model_fn, ds, path="auto", **kw)
    assert (loop.path, fit.path) == ("custom_loop", "fit")
    assert loop.losses[1] < loop.losses[0]
    np.testing.assert_allclose(loop.losses, fit.losses, rtol=1e-4)
    for a, b in zip(loop.model.weights, fit.model.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-6)
    with pytest.raises(StrategyError, match="unknown path"):
        train(info, model_fn, ds, path="keras", **kw)


def test_nvml_named_gpus_without_a_mask_say_configure_first():
    """The strategy reads the configuration, it does not make one: no silent mask, and no GPU 0 filled."""
    proc = run_py("""
        import json, os, sys, tempfile
        from tests.inventories import eight
        from tfdevices.core.errors import TfDevicesError
        path = os.path.join(tempfile.mkdtemp(), "inv.json")
        open(path, "w").write(eight().to_json())
        os.environ["TFDEVICES_INVENTORY"] = path
        from tfdevices import build_strategy
        try:
            build_strategy("one_device", [5], env={})
        except TfDevicesError as err:
            print(json.dumps({"mask": os.environ.get("CUDA_VISIBLE_DEVICES"), "error": str(err),
                              "tf": "tensorflow" in sys.modules}))
        os.environ.update(CUDA_VISIBLE_DEVICES="5", CUDA_DEVICE_ORDER="PCI_BUS_ID")  # masked, as the launcher does
        try:
            build_strategy("one_device", [5], env={})
        except TfDevicesError as err:                     # no real GPU here: past the check, TensorFlow lists none
            print(json.dumps({"masked": str(err)}))
    """)
    first, second = (json.loads(line) for line in proc.stdout.strip().splitlines()[-2:])
    assert first["mask"] is None and not first["tf"]  # nothing written, TensorFlow not even imported
    assert first["error"].startswith(
        "build_strategy(devices=5) names GPU(s) 5 by NVML index, but nothing was "
        "configured: TensorFlow would start on GPU(s) 0, 1, 2, 3, 4, 6, 7 too"
    )
    assert "HINT: call tfdevices.configure(tfdevices.select('5')) first" in first["error"]
    assert "nothing was configured" not in second["masked"]


def test_keras3_fit_message_names_the_issue():
    assert "keras-team/keras#20585" in KERAS3_FIT_MESSAGE


# --------------------------------------------------------------------------- drop-in


def test_what_build_strategy_returns_is_the_tensorflow_strategy(tf4):
    """Used exactly like tf.distribute.MirroredStrategy (Keras included), and it still explains itself."""
    import keras

    from tfdevices import build_strategy

    strategy = build_strategy("mirrored", ["CPU:1", "CPU:2"], env={})
    assert isinstance(strategy, tf4.distribute.Strategy) and isinstance(strategy, tf4.distribute.MirroredStrategy)
    assert strategy.num_replicas_in_sync == 2 and strategy.strategy is strategy
    with strategy.scope():
        assert tf4.distribute.get_strategy() is strategy and tf4.distribute.has_strategy()
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
    assert model.distribute_strategy is strategy
    assert all(isinstance(v.value, tf4.distribute.DistributedValues) for v in model.trainable_variables)  # mirrored
    data = tf4.data.Dataset.from_tensor_slices(np.arange(8, dtype="float32").reshape(4, 2)).batch(4)
    batch = next(iter(strategy.experimental_distribute_dataset(data)))
    per_replica = strategy.run(lambda x: tf4.reduce_sum(x), args=(batch,))
    assert float(strategy.reduce("SUM", per_replica, axis=None)) == float(np.arange(8).sum())
    # it explains itself: the replicas named both ways, and why
    assert (strategy.kind, strategy.devices, strategy.tf_devices) == (
        "mirrored",
        ("CPU:1", "CPU:2"),
        ("CPU:1", "CPU:2"),
    )
    assert strategy.info.num_replicas == 2 and strategy.info.strategy_class == "MirroredStrategy"
    table = strategy.table()
    assert table.startswith("strategy: mirrored (MirroredStrategy), 2 replica(s)") and "why: " in table


@pytest.mark.parametrize(
    "kind, devices", [("default", None), ("one_device", ["CPU:3"]), ("mirrored", ["CPU:0", "CPU:1"])]
)
def test_explained_adds_no_name_tensorflow_has(tf4, kind, devices):
    """What tfdevices adds to a strategy shadows nothing of TensorFlow's (ours would silently win or lose)."""
    from tfdevices import build_strategy
    from tfdevices.strategy import Explained, explanation

    strategy = build_strategy(kind, devices, env={})
    ours = {n for n in vars(Explained) if not n.startswith("__")}
    for base in type(strategy).__mro__:
        if base is Explained or base is object or base.__module__ == "tfdevices.strategy":
            continue
        assert not ours & set(vars(base)), (base, ours & set(vars(base)))
    current = tf4.distribute.get_strategy() if kind == "default" else strategy  # the default's scope: TF's default
    with strategy.scope():
        assert tf4.distribute.get_strategy() is current
    explained = explanation(strategy)
    assert explained.kind == kind and explained.table().startswith(f"strategy: {kind}")


def test_tensorflows_default_strategy_is_left_as_tensorflow_made_it(tf4):
    """No class surgery: the process-wide default keeps its class and gains no attribute; ours are subclasses."""
    from tfdevices import build_strategy
    from tfdevices.core.errors import StrategyError
    from tfdevices.strategy import Explained, explanation

    default = tf4.distribute.get_strategy()
    cls, attrs = type(default), set(vars(default))
    built = build_strategy("default", env={})
    assert built is not default and built.extended is default.extended
    assert isinstance(built, tf4.distribute.Strategy) and isinstance(built, Explained)
    assert type(default) is cls and set(vars(default)) == attrs and not isinstance(default, Explained)
    with pytest.raises(StrategyError, match="was not built by tfdevices"):
        explanation(default)
    mirrored = build_strategy("mirrored", ["CPU:0", "CPU:1"], env={})
    assert type(mirrored).__bases__ == (tf4.distribute.MirroredStrategy, Explained)
    assert explanation(mirrored) is mirrored
    with pytest.raises(StrategyError, match="was not built by tfdevices"):
        explanation(tf4.distribute.OneDeviceStrategy("/CPU:0"))


@pytest.mark.parametrize(
    "mask, words",
    [
        ("\u0663", "entry 1 of CUDA_VISIBLE_DEVICES is neither a GPU index"),  # CUDA would hide every GPU
        ("GPU-ffff", "entry 1 of CUDA_VISIBLE_DEVICES names no GPU"),
        ("9", "entry 1 of CUDA_VISIBLE_DEVICES is past the last GPU (CUDA's indices here run 0 to 7)"),
        ("0,,1", "entry 2 of CUDA_VISIBLE_DEVICES is empty"),
    ],
)
def test_auto_with_a_mask_naming_nothing_valid_is_an_error_not_a_cpu_run(mask, words):
    """On an 8-GPU listing, a mask CUDA cannot use would leave TensorFlow on the CPU without a word."""
    proc = run_py(f"""
        import json, os, sys, tempfile
        sys.modules["tensorflow"] = None  # the check comes before TensorFlow starts
        from tests.inventories import eight
        from tfdevices.core.errors import EnvVarError
        path = os.path.join(tempfile.mkdtemp(), "inv.json")
        open(path, "w").write(eight().to_json())
        os.environ["TFDEVICES_INVENTORY"] = path
        os.environ["CUDA_VISIBLE_DEVICES"] = {mask!r}
        from tfdevices import build_strategy
        try:
            build_strategy("auto", env={{}})
        except EnvVarError as err:
            print(json.dumps(str(err)))
    """)
    said = json.loads(proc.stdout.strip().splitlines()[-1])
    assert said.startswith(words) and "HINT:" in said


def test_an_evaluator_gets_one_process_and_a_ps_task_a_clear_refusal():
    from tfdevices.core.errors import StrategyError
    from tfdevices.strategy import cluster_from_env

    cluster = {"chief": ["c:1"], "worker": ["w:1", "w:2"], "ps": ["p:1"]}

    def env(role: str) -> dict[str, str]:
        return {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": role, "index": 0}})}

    evaluator = cluster_from_env(env("evaluator"))
    assert (evaluator.num_workers, evaluator.source) == (1, "TF_CONFIG")
    assert evaluator.reason.startswith("TF_CONFIG names this process evaluator 0: it does not train")
    assert cluster_from_env(env("worker")).num_workers == 3
    with pytest.raises(
        StrategyError, match=r"^TF_CONFIG names this process ps 0, a parameter server.*HINT: .*tf_keras"
    ):
        cluster_from_env(env("ps"))


def test_a_gpu_that_does_not_exist_and_the_line_that_started_the_runtime_are_named(tmp_path):
    """After `import tensorflow` on a machine without GPUs: the hint for GPU 0 is not 'select it first', and
    a configure() after build_strategy names the user's build_strategy line, not 'something in this process'."""
    empty = tmp_path / "no-gpu.json"
    empty.write_text('{"gpus": [], "source": "none", "reason": "no NVIDIA driver"}')
    proc = run_py(
        """
        import json
        import tensorflow as tf
        import tfdevices
        said = {}
        try:
            tfdevices.build_strategy("mirrored", [0, 1])
        except tfdevices.TfDevicesError as err:
            said["strategy"] = str(err)
        tfdevices.build_strategy("auto")
        try:
            tfdevices.configure("none", virtual_devices=2)
        except tfdevices.RuntimeInitializedError as err:
            said["configure"] = str(err)
        print(json.dumps(said))
    """,
        env={"TFDEVICES_INVENTORY": str(empty), "CUDA_VISIBLE_DEVICES": "-1"},
    )
    said = json.loads(proc.stdout.splitlines()[-1])
    assert "HINT: there is no GPU 0 here (GPUs: no GPU (no NVIDIA driver))" in said["strategy"], said
    assert "configure(select('0'))" not in said["strategy"]
    assert (
        "it was started by <string>:7 " in said["configure"]
    )  # the build_strategy line and "something in this process" not in said["configure"]


def test_the_default_strategy_explains_itself_and_runs_as_tensorflows(tf4):
    """build_strategy("default").table() as every kind's; scope, run, reduce, datasets and fit are the default's."""
    import copy

    import keras
    import numpy as np

    from tfdevices import build_strategy
    from tfdevices.strategy import explanation

    default = tf4.distribute.get_strategy()
    strategy = build_strategy("default", env={})
    assert explanation(strategy) is strategy
    assert (strategy.kind, strategy.devices, strategy.tf_devices, strategy.num_replicas_in_sync) == (
        "default",
        ("CPU:0",),
        ("CPU:0",),
        1,
    )
    table = strategy.table().splitlines()
    assert table[0] == "strategy: default (DefaultStrategy), 1 replica(s)"
    assert table[2].startswith("why: asked for the default strategy") and table[-1].split() == ["0", "CPU:0", "CPU:0"]
    with strategy.scope() as entered:
        assert entered is default and not tf4.distribute.has_strategy()
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        model.compile("sgd", "mse")
    history = model.fit(np.ones((8, 4)), np.ones((8, 2)), epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    assert float(strategy.run(lambda a: a * 2, args=(tf4.constant(3.0),))) == 6.0
    assert float(strategy.reduce(tf4.distribute.ReduceOp.SUM, tf4.constant(2.0), axis=None)) == 2.0
    batches = strategy.experimental_distribute_dataset(tf4.data.Dataset.range(3).batch(2))
    assert [b.numpy().tolist() for b in batches] == [[0, 1], [2]]
    with pytest.raises(RuntimeError, match="one per process"):
        copy.deepcopy(strategy)
