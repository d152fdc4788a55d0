"""What tune's parent and children say to each other: typed messages, one JSON line each (pure)."""

from __future__ import annotations

import json

import pytest

from tfdevices.decide.candidates import Link, Profile
from tfdevices.decide.messages import (
    MAX_LINE,
    Capture,
    Captured,
    ChildSpec,
    Failed,
    Ready,
    Stop,
    TimeWindow,
    Window,
    decode,
    encode,
)

SPEC = ChildSpec("tests.decide.models:tiny_mlp", "split", ("CPU:0", "CPU:1"), False, 3, 1, 4, None, ("/src",))


@pytest.mark.parametrize(
    "message",
    [
        SPEC,
        TimeWindow(20),
        Capture(profile=True, probe=("CPU:0", "CPU:1"), logdir="/logs/split_2"),
        Stop(),
        Ready(batch=32, startup_s=5.5, windows=2, step_s=0.004),
        Window(0.01, 0.009, 0.011),
        Captured(peak_memory={"host": 1}, shares={"copies": 0.1}),
        Captured(
            peak_memory={"GPU:0": 7},
            profile=Profile(compute_s=0.008, grad_bytes=4, links=(Link("CPU:0", "CPU:1", 1e-5, None),)),
            probe_s=0.2,
        ),
        Failed("out_of_memory", "ResourceExhaustedError: OOM when allocating. HINT: a smaller batch"),
    ],
)
def test_every_message_comes_back_as_it_was_sent(message):
    line = encode(message)
    assert "\n" not in line and json.loads(line)["kind"] == type(message).__name__
    assert decode(line) == message


@pytest.mark.parametrize(
    "line, words",
    [
        ('{"kind": "Launch"}', "not a tune message"),
        ("[1, 2]", "not a tune message"),
        ('{"kind": "Window", "step_s": 1, "q1_s": 1, "q3_s": 1, "env": "x"}', "Window has no field ['env']"),
        ('{"kind": "Stop", "x": "' + "a" * MAX_LINE + '"}', "more than tune's"),
        ('{"kind": "Captured", "profile": {"compute_s": 1, "step": 2}}', "Profile has no field ['step']"),
        ('{"kind": "Captured", "profile": {"links": [{"a": "CPU:0"}]}}', "a profile's links"),
        ('{"kind": "Captured", "profile": {"links": 3}}', "a profile's links: '3'"),
    ],
)
def test_a_line_that_is_not_one_of_tunes_messages_is_refused(line, words):
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("(", r"\(")):
        decode(line)


def test_a_failure_line_names_the_error_and_what_to_do():
    from tfdevices.decide.child import _failure

    err = ValueError(
        "{{function_node __wrapped__AddN_N_3_device_/job:localhost/replica:0/task:0/device:CPU:0}} Inputs to "
        "operation AddN of type AddN must have the same size and shape.  Input 0: [86,16] != input 2: [84,16]"
    )
    failed = _failure(err)
    assert failed.status == "failed"
    assert failed.detail.startswith("ValueError: Inputs to operation AddN of type AddN must have the same size")
    assert "HINT: the replicas got batches of different sizes" in failed.detail
    assert _failure(RuntimeError("no model today")) == Failed("failed", "RuntimeError: no model today")
    assert _failure(MemoryError()).status == "out_of_memory"
    from tfdevices.core.errors import PlanError
    from tfdevices.layers.plan import plan_layers

    with pytest.raises(PlanError) as err:  # split:3 of a model with 2 layers: its child's plan refuses
        plan_layers([1.0, 1.0], ["CPU:0", "CPU:1", "CPU:2"], every_device=True)
    assert _failure(err.value).detail == (
        "PlanError: every_device=True: 2 layers cannot give each of 3 devices one. HINT: the model has fewer layers "
        "than this split has devices: a split over fewer devices, or another strategy"
    )
    assert _failure(PlanError("no plan today.", hint="plan tomorrow.")).detail == (
        "PlanError: no plan today. HINT: plan tomorrow."  # the error's own hint where no known one replaces it
    )
