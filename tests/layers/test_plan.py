"""Tests for tfdevices.layers.plan: the optimal contiguous layer plan, checked by brute force."""

from __future__ import annotations

import itertools
import math
import random
import sys

import pytest

from tests.keras_models import skip_model
from tfdevices.core.errors import PlanError
from tfdevices.layers.plan import LayerPlan, _Prefix, _Problem, plan_layers

DEVICES = ["CPU:0", "CPU:1", "CPU:2", "CPU:3"]


def brute_force(costs, devices, speeds, caps, sizes):
    """The smallest bottleneck over every contiguous split of the layers onto the devices, in order."""
    n, m = len(costs), len(devices)
    best = None
    for cuts in itertools.combinations_with_replacement(range(n + 1), m - 1):
        bounds = (0, *cuts, n)
        stages = [(bounds[d], bounds[d + 1]) for d in range(m)]
        if any(sum(sizes[a:b]) > caps[d] for d, (a, b) in enumerate(stages)):
            continue
        worst = max(math.fsum(costs[a:b]) / speeds[d] for d, (a, b) in enumerate(stages))
        best = worst if best is None else min(best, worst)
    return best


def random_case(rng: random.Random):
    n, m = rng.randint(1, 8), rng.randint(1, 4)
    kind = rng.choice(["float", "int", "zeros", "tiny"])
    costs = {
        "float": lambda: rng.uniform(0, 10),
        "int": lambda: float(rng.randint(0, 6)),
        "zeros": lambda: rng.choice([0.0, 0.0, 1.0, 0.1]),
        "tiny": lambda: rng.uniform(0, 1e-300),
    }[kind]
    costs = [costs() for _ in range(n)]
    speeds = [rng.choice([1.0, 1.0, 2.0, 0.5, rng.uniform(0.1, 3)]) for _ in range(m)]
    sizes = [rng.randint(0, 100) for _ in range(n)]
    caps = [rng.choice([math.inf, rng.randint(0, 300)]) for _ in range(m)]
    return costs, DEVICES[:m], speeds, caps, sizes


def check_plan_shape(plan: LayerPlan, devices, speeds, caps, sizes, costs):
    """The plan is contiguous in device order, within the caps, and its bottleneck is its own slowest stage."""
    order = [devices.index(d) for d in plan.devices]
    assert order == sorted(order)
    assert [len(plan.devices)] == [len(costs)]
    for stage in plan.stages:
        d = devices.index(stage.device)
        idx = [i for i, dev in enumerate(plan.devices) if dev == stage.device]
        assert stage.memory == sum(sizes[i] for i in idx) <= caps[d]
        assert stage.cost == math.fsum(costs[i] for i in idx) / speeds[d]
    assert plan.bottleneck == max(s.cost for s in plan.stages)
    assert plan.transfers == len(plan.stages) - 1


@pytest.mark.parametrize("seed", range(4))
def test_optimal_against_brute_force(seed):
    rng = random.Random(seed)
    for _ in range(150):
        costs, devices, speeds, caps, sizes = random_case(rng)
        expected = brute_force(costs, devices, speeds, caps, sizes)
        cap_map = {d: int(c) for d, c in zip(devices, caps) if not math.isinf(c)}
        kwargs = dict(speeds=speeds, max_memory=cap_map, layer_bytes=sizes)
        if expected is None:
            with pytest.raises(PlanError, match="does not fit"):
                plan_layers(costs, devices, **kwargs)
            continue
        plan = plan_layers(costs, devices, **kwargs)
        assert plan.bottleneck == expected, (costs, devices, speeds, caps, sizes, plan)
        check_plan_shape(plan, devices, speeds, caps, sizes, costs)


def test_speeds_move_work_to_the_faster_device():
    costs = [1.0] * 12
    even = plan_layers(costs, DEVICES[:2])
    fast_second = plan_layers(costs, DEVICES[:2], speeds={"CPU:1": 3.0})
    assert [len(s.layers) for s in even.stages] == [6, 6]
    assert [len(s.layers) for s in fast_second.stages] == [3, 9]
    assert fast_second.bottleneck == brute_force(costs, DEVICES[:2], [1.0, 3.0], [math.inf] * 2, [0] * 12)


def test_memory_cap_forces_layers_onward_and_names_the_layer_that_does_not_fit():
    costs, sizes = [1.0] * 6, [100] * 6
    plan = plan_layers(costs, DEVICES[:2], max_memory={"CPU:0": 200}, layer_bytes=sizes)
    assert plan.stages[0].memory <= 200 and len(plan.stages[0].layers) == 2
    with pytest.raises(PlanError, match=r"layer 'layer_4' \(100 B\) does not fit") as err:
        plan_layers(costs, DEVICES[:2], max_memory={"CPU:0": "200B", "CPU:1": 200}, layer_bytes=sizes)
    assert "CPU:0 holds 2 layers" in str(err.value) and "HINT:" in str(err.value)


def test_a_device_can_be_left_empty_when_that_is_optimal():
    plan = plan_layers([0.0, 0.0, 5.0], DEVICES[:3])
    assert plan.bottleneck == 5.0
    assert max(s.cost for s in plan.stages) == 5.0


def brute_force_every(rows, speeds, caps, sizes):
    """The smallest bottleneck over every split that gives each device at least one layer (``rows[d]``: the
    layers' costs on device ``d``); ``None`` where none exists.
    """
    n, m = len(rows[0]), len(rows)
    best = None
    for cuts in itertools.combinations(range(1, n), m - 1):
        bounds = (0, *cuts, n)
        stages = [(bounds[d], bounds[d + 1]) for d in range(m)]
        if any(sum(sizes[a:b]) > caps[d] for d, (a, b) in enumerate(stages)):
            continue
        worst = max(math.fsum(rows[d][a:b]) / speeds[d] for d, (a, b) in enumerate(stages))
        best = worst if best is None else min(best, worst)
    return best


def _problem(rows, speeds, caps, sizes):
    prefix = [0]
    for size in sizes:
        prefix.append(prefix[-1] + size)
    return _Problem(tuple(_Prefix(r) for r in rows), tuple(speeds), tuple(prefix), tuple(caps))


@pytest.mark.parametrize("seed", range(3))
def test_every_device_holds_a_layer_at_the_best_such_bottleneck_against_brute_force(seed):
    # each device its own costs (balance_by="time" measures each layer on each device): the case where taking the
    # most layers on the first devices can leave a later device only a layer slow on it
    rng = random.Random(seed)
    for _ in range(150):
        n, m = rng.randint(1, 8), rng.randint(1, 4)
        rows = [[rng.choice([1.0, 1.0, 2.0, 100.0, rng.uniform(0, 10)]) for _ in range(n)] for _ in range(m)]
        speeds = [rng.choice([1.0, 2.0, 0.5]) for _ in range(m)]
        sizes = [rng.randint(0, 100) for _ in range(n)]
        caps = [rng.choice([math.inf, rng.randint(0, 300)]) for _ in range(m)]
        problem = _problem(rows, speeds, caps, sizes)
        expected = brute_force_every(rows, speeds, caps, sizes)
        if expected is None:
            assert problem.fill_every(math.inf) is None, (rows, speeds, caps, sizes)
            continue
        bound = problem.min_bottleneck(every=True)
        assert bound == expected, (rows, speeds, caps, sizes)
        ends = problem.fill_every(bound)
        starts = [0, *ends[:-1]]
        assert ends[-1] == n and all(a < b for a, b in zip(starts, ends)), ends  # every device holds a layer
        assert max(problem.cost(a, b, d) for d, (a, b) in enumerate(zip(starts, ends))) == bound


def test_every_device_where_the_greedy_fill_would_leave_the_middle_device_a_slow_layer():
    rows = [[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 100.0, 1.0], [1.0, 1.0, 1.0, 1.0]]
    problem = _problem(rows, [1.0] * 3, [math.inf] * 3, [0] * 4)
    assert problem.min_bottleneck(every=True) == 2.0 and problem.fill_every(2.0) == [1, 2, 4]


def test_every_device_gives_each_device_a_layer_where_the_plain_plan_leaves_one_empty():
    assert len(plan_layers([0.0, 0.0, 5.0], DEVICES[:3]).stages) < 3
    plan = plan_layers([0.0, 0.0, 5.0], DEVICES[:3], every_device=True)
    assert plan.devices == ("CPU:0", "CPU:1", "CPU:2") and plan.bottleneck == 5.0
    costs = random.Random(3).choices([0.0, 1.0, 9.0], k=40)
    for m in (2, 4):
        plan = plan_layers(costs, DEVICES[:m], every_device=True)
        assert len(plan.stages) == m and plan.bottleneck == plan_layers(costs, DEVICES[:m]).bottleneck


def test_every_device_on_a_thousand_layers_and_eight_devices():
    rng = random.Random(11)
    costs = [rng.uniform(0, 100) for _ in range(1000)]
    plan = plan_layers(costs, [f"GPU:{i}" for i in range(8)], every_device=True)
    assert len(plan.stages) == 8 and plan.bottleneck == max(s.cost for s in plan.stages)
    assert plan.bottleneck == plan_layers(costs, [f"GPU:{i}" for i in range(8)]).bottleneck  # none was empty


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        (([1.0, 1.0], DEVICES[:3]), {}, "every_device=True: 2 layers cannot give each of 3 devices one."),
        (
            ([1.0, 1.0], DEVICES[:2]),
            {"max_memory": {"CPU:1": 0}, "layer_bytes": [1, 1]},
            "every_device=True: no plan gives each of ['CPU:0', 'CPU:1'] a layer within its max_memory cap.",
        ),
        (([1.0], {"*": "CPU:0"}), {}, "every_device=True plans over a list of devices; a manual map already"),
        (([1.0], DEVICES[:1]), {"every_device": "yes"}, "every_device='yes': not True or False."),
    ],
)
def test_every_device_refuses_what_it_cannot_do(args, kwargs, message):
    kwargs = {"every_device": True, **kwargs}
    with pytest.raises(PlanError) as err:
        plan_layers(*args, **kwargs)
    assert str(err.value).startswith(message) and "HINT: " in str(err.value), str(err.value)


def test_thousand_layers_on_eight_devices_is_optimal_against_an_independent_check():
    rng = random.Random(7)
    costs = [rng.uniform(0, 100) for _ in range(1000)]
    plan = plan_layers(costs, [f"GPU:{i}" for i in range(8)])
    # the plan reaches its bound, and no partition reaches the next smaller float: a linear greedy shows both
    assert plan.bottleneck == max(s.cost for s in plan.stages)
    assert _greedy_stages(costs, math.nextafter(plan.bottleneck, 0)) > 8 >= _greedy_stages(costs, plan.bottleneck)


def _greedy_stages(costs, bound):
    """Stages a left-to-right greedy needs so that no stage sums above ``bound`` (exact fsum)."""
    stages, start = 1, 0
    for i in range(len(costs)):
        if costs[i] > bound:
            return math.inf
        if math.fsum(costs[start : i + 1]) > bound:
            stages, start = stages + 1, i
    return stages


MANUAL = [
    ({"layer_0": "CPU:0", "layer_1": "CPU:1", "layer_2": "CPU:0"}, ("CPU:0", "CPU:1", "CPU:0"), 2, 3),
    ({"layer_1": "/device:CPU:2", "*": "cpu:0"}, ("CPU:0", "CPU:2", "CPU:0"), 2, 3),
    ({"layer_[01]": "CPU:1", "*": "CPU:3"}, ("CPU:1", "CPU:1", "CPU:3"), 1, 2),
    ({"*": "CPU:0"}, ("CPU:0", "CPU:0", "CPU:0"), 0, 1),
]


@pytest.mark.parametrize("mapping,devices,transfers,stages", MANUAL)
def test_manual_maps(mapping, devices, transfers, stages):
    costs = [1.0, 2.0, 4.0]
    plan = plan_layers(costs, mapping)
    assert plan.devices == devices and plan.manual
    assert plan.transfers == transfers and len(plan.stages) == stages
    per_device = {d: math.fsum(c for c, x in zip(costs, devices) if x == d) for d in set(devices)}
    assert plan.bottleneck == max(per_device.values())
    assert "manual plan" in plan.table()


BAD = [
    (([1.0], ["GPU:0", "gpu:0"]), {}, "devices ['GPU:0', 'GPU:0'] name GPU:0 twice"),
    (([1.0], []), {}, "devices []: expected a non-empty list"),
    (([1.0], "GPU:0"), {}, "devices 'GPU:0': expected a non-empty list"),
    (([1.0], ["banana"]), {}, "devices[0] 'banana' is not a TensorFlow device name"),
    (([], ["GPU:0"]), {}, "model []: expected a built Keras model"),
    (([1.0, -1.0], ["GPU:0"]), {}, "cost of layer 1 is -1.0"),
    (([1.0, math.nan], ["GPU:0"]), {}, "cost of layer 1 is nan"),
    (([math.inf], ["GPU:0"]), {}, "cost of layer 0 is inf"),
    (([True], ["GPU:0"]), {}, "cost of layer 0 is True"),
    (([1.0], ["GPU:0"]), {"speeds": [0.0]}, "speeds['GPU:0'] = 0.0: a speed must be a positive"),
    (([1.0], ["GPU:0"]), {"speeds": [1.0, 2.0]}, "speeds [1.0, 2.0]: expected 1 numbers"),
    (([1.0], ["GPU:0"]), {"speeds": {"GPU:7": 2.0}}, "speeds names devices ['GPU:7']"),
    (([1.0], ["GPU:0"]), {"max_memory": {"GPU:1": 10}}, "max_memory names devices ['GPU:1']"),
    (([1.0], ["GPU:0"]), {"max_memory": {"GPU:0": "10"}}, "max_memory['GPU:0'] '10': a bare number"),
    (([1.0], ["GPU:0"]), {"max_memory": ["GPU:0"]}, "max_memory ['GPU:0']: expected a {device: size} map"),
    (([1.0], ["GPU:0"]), {"layer_bytes": [1, 2]}, "layer_bytes [1, 2]: expected 1 non-negative ints"),
    (([1.0], ["GPU:0"]), {"balance_by": "params"}, "balance_by='params' applies to a Keras model"),
    (
        ([1.0, 1.0], ["GPU:0"]),
        {"max_memory": {"GPU:0": 1}, "layer_bytes": [1, 1]},
        "layer 'layer_1' (1 B) does not fit",
    ),
    (([1.0, 1.0], {"layer_0": "GPU:0"}), {}, "manual map leaves layers ['layer_1'] without a device"),
    (([1.0, 1.0], {"dense": "GPU:0", "*": "GPU:1"}), {}, "manual map names layer 'dense', which the model"),
    (([1.0, 1.0], {"*": "GPU:0", "layer_1*": "GPU:1"}), {}, "manual map pattern 'layer_1*' places no layer"),
    (([1.0, 1.0], {"conv*": "GPU:0", "*": "GPU:1"}), {}, "manual map pattern 'conv*' places no layer"),
    (([1.0, 1.0], {"*": "GPU"}), {}, "manual map['*'] 'GPU' is not a TensorFlow device name"),
    (
        ([1.0, 1.0], {"*": "GPU:0"}),
        {"max_memory": {"GPU:0": 1}, "layer_bytes": [1, 1]},
        "manual map puts 2 B of variables on GPU:0",
    ),
]


@pytest.mark.parametrize("args,kwargs,message", BAD)
def test_bad_input_is_a_plan_error_that_names_it(args, kwargs, message):
    with pytest.raises(PlanError) as err:
        plan_layers(*args, **kwargs)
    assert str(err.value).startswith(message), str(err.value)
    assert "HINT: " in str(err.value)
    assert isinstance(err.value, ValueError)


def test_plan_is_frozen_and_names_layers():
    plan = plan_layers([1.0, 2.0], ["GPU:0", "GPU:1"])
    with pytest.raises(AttributeError):
        plan.bottleneck = 0.0  # type: ignore[misc]
    assert plan.device_of("layer_1") == "GPU:1"
    with pytest.raises(PlanError, match="layer 'dense' is not in this plan"):
        plan.device_of("dense")
    assert plan.loads() == {"GPU:0": (1.0, 0), "GPU:1": (2.0, 0)}


def test_the_list_path_never_imports_tensorflow():
    from tests.helpers import run_py

    out = run_py("""
        import sys
        from tfdevices import plan_layers
        plan = plan_layers([3.0, 1.0, 2.0, 2.0], ["GPU:0", "GPU:1"])
        print(plan.table())
        print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'tf_keras')))
    """).stdout
    assert out.strip().endswith("[]") and "bottleneck 4" in out


# ----------------------------------------------------------------------------- Keras models


def test_model_costs_are_read_from_its_layers(tf4):
    import keras

    model = skip_model(keras)
    plan = plan_layers(model, DEVICES[:1])
    assert plan.layers == ("a", "b", "c", "d")
    params = [layer.count_params() for layer in model.layers[1:]]
    assert plan.costs == tuple(float(p) for p in params)
    assert plan.memory == tuple(4 * p for p in params)
    flops = plan_layers(model, DEVICES[:1], balance_by="flops")
    assert flops.costs == tuple(float(2 * p + out) for p, out in zip(params, [5, 5, 5, 3]))
    memory = plan_layers(model, DEVICES[:1], balance_by="memory")
    assert memory.costs == tuple(float(4 * p) for p in params)


SKIP_MAPS = [
    ({"a": "CPU:0", "*": "CPU:1"}, 1),  # a's output goes to b and c, both on CPU:1: one transfer
    ({"a": "CPU:0", "b": "CPU:1", "*": "CPU:0"}, 2),  # a -> b, b -> c
    ({"a": "CPU:0", "b": "CPU:1", "c": "CPU:0", "d": "CPU:1"}, 3),
    ({"[ab]": "CPU:1", "*": "CPU:2"}, 2),  # a -> c and b -> c are two tensors
]


@pytest.mark.parametrize("mapping,transfers", SKIP_MAPS)
def test_functional_graph_transfers_count_tensors_per_receiving_device(tf4, mapping, transfers):
    import keras

    assert plan_layers(skip_model(keras), mapping).transfers == transfers


def test_sequential_model_plan_balances_params(tf4):
    import keras

    model = keras.Sequential([keras.Input((8,))] + [keras.layers.Dense(8 * (i % 3 + 1)) for i in range(9)])
    plan = plan_layers(model, DEVICES)
    params = [float(layer.count_params()) for layer in model.layers]
    assert plan.bottleneck == brute_force(params, DEVICES, [1.0] * 4, [math.inf] * 4, [0] * 9)
    assert plan.transfers == len(plan.stages) - 1
    assert plan.layers == tuple(layer.name for layer in model.layers)


MODEL_BAD = [
    ({"balance_by": "speed"}, "balance_by 'speed': expected one of"),
    ({"balance_by": "time"}, "balance_by='time' measures each layer on each device and needs sample="),
    ({"layer_bytes": [1]}, "layer_bytes is for a list of costs"),
    ({"devices": {"a": "CPU:0", "zz": "CPU:1", "*": "CPU:2"}}, "manual map names layer 'zz'"),
]


@pytest.mark.parametrize("kwargs,message", MODEL_BAD)
def test_bad_model_input(tf4, kwargs, message):
    import keras

    kwargs = {"devices": DEVICES[:2], **kwargs}
    with pytest.raises(PlanError) as err:
        plan_layers(skip_model(keras), **kwargs)
    assert str(err.value).startswith(message), str(err.value)


def test_tf_keras_models_are_planned_the_same_way(tf4):
    import keras
    import tf_keras

    inp = tf_keras.Input((6,))
    a = tf_keras.layers.Dense(5, name="a")(inp)
    b = tf_keras.layers.Dense(5, name="b")(a)
    d = tf_keras.layers.Dense(3, name="d")(tf_keras.layers.Add(name="c")([a, b]))
    old = tf_keras.Model(inp, d)
    for balance_by in ("params", "flops", "memory"):
        new_plan = plan_layers(skip_model(keras), DEVICES[:2], balance_by=balance_by)
        old_plan = plan_layers(old, DEVICES[:2], balance_by=balance_by)
        assert (old_plan.costs, old_plan.memory, old_plan.devices) == (
            new_plan.costs,
            new_plan.memory,
            new_plan.devices,
        )
    for mapping, transfers in SKIP_MAPS:
        assert plan_layers(old, mapping).transfers == transfers


def test_unbuilt_model_is_an_error(tf4):
    import keras

    model = keras.Sequential([keras.layers.Dense(3), keras.layers.Dense(2)])
    with pytest.raises(PlanError, match="model 'sequential.*' is not built"):
        plan_layers(model, DEVICES[:2])


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


@pytest.mark.parametrize(
    "costs, speeds, words",
    [
        ([1e308, 1e308, 1.0], None, "layer costs on GPU:0 add up to more than the largest float"),
        ([1e308] * 3, None, "add up to more than the largest float"),
        ([1.0, 1.0], [1e-320, 1.0], "once divided by its speed"),
        ([1e300, 1e300], [1e-10, 1.0], "once divided by its speed 1e-10"),
        ([10**400, 1], None, "cost of layer 0 is 1000"),
    ],
)
def test_costs_that_overflow_are_a_plan_error(costs, speeds, words):
    with pytest.raises(PlanError) as err:
        plan_layers(costs, ["GPU:0", "GPU:1"], speeds=speeds)
    assert words in str(err.value) and "HINT:" in str(err.value) and len(str(err.value)) < 400


def test_largest_finite_costs_still_plan():
    plan = plan_layers([1e300, 1e300], ["GPU:0", "GPU:1"])
    assert plan.devices == ("GPU:0", "GPU:1") and plan.bottleneck == 1e300
