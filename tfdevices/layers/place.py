"""Apply a layer plan to a Keras 3 model: weights and compute on the planned device.

Calling a Keras 3 layer under ``tf.device`` inside ``call`` (the ``.to(device)``
habit from PyTorch) moves its compute but not its variables: they stay where
the layer was built, and every step copies the weights across
(``ReadVariableOp`` -> ``_Send``). :func:`place_layers` does it right:

* each layer's variables are (re)created on the layer's planned device, and
  so are the optimizer's slots for them (colocated by Keras when created later);
* each layer's ``call`` runs under ``tf.device(its device)``, and a layer whose
  input comes from another device first copies it once with ``tf.identity``,
  so an activation crosses once per stage boundary (per tensor and receiving
  device), forward, and its gradient once back;
* the model stays a plain Keras model: ``fit``/``evaluate``/``predict`` work,
  ``model.save("m.keras")`` and ``save_weights`` write the standard formats
  (devices are not saved: re-apply the plan after ``keras.models.load_model``).

XLA compiles a whole step for one device, so a placed model is compiled with
``jit_compile=False`` (``"auto"`` turns XLA on when a GPU is visible).

>>> import keras
>>> from tfdevices import plan_layers, place_layers
>>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="a"),
...                           keras.layers.Dense(2, name="b")])
>>> plan = plan_layers(model, {"a": "CPU:0", "b": "/CPU:0"})
>>> model = place_layers(model, plan)
>>> planned_devices(model)
{'a': 'CPU:0', 'b': 'CPU:0'}
>>> model.layers[1].kernel.value.device.endswith("CPU:0")
True

What the placed training step moves, measured with :func:`tfdevices.verify`:
forward, one activation per stage boundary; backward, its gradient once back
(gradient ops run with their forward op, by a device function around
``train_step``); no weight and no optimizer slot is read from another device.
Two things still cross: the optimizer's scalar step counter and learning rate
(a few bytes per variable), and each weight's gradient, which Keras gathers on
the default device before the update runs on the weight's device.

``tf_keras`` (Keras 2): :func:`plan_layers` plans its Sequential and functional
models (layers, sizes, order and edges read the same way), but :func:`place_layers`
refuses them with a ``PlanError``: it rewrites Keras 3 variables and hooks. In ``tf_keras`` build each layer under
``tf.device`` yourself (its variables follow the device scope at build time).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from tfdevices.core.devices import logical_devices, short_name
from tfdevices.core.errors import PlanError
from tfdevices.layers.model import read_model
from tfdevices.layers.plan import LayerPlan
from tfdevices.mends.tf_import import import_tf

_MARK = "_tfdevices_device"


def place_layers(model_or_builder: Any, plan: LayerPlan) -> Any:
    """Puts each layer's variables and compute on its planned device.

    Args:
        model_or_builder: a built Keras 3 model (Sequential or functional), placed
            in place and returned; or a function returning one, called with every
            variable created on its layer's device directly (never on the default
            device first).
        plan: a :class:`~tfdevices.layers.plan.LayerPlan` for this model's layers
            (from :func:`~tfdevices.layers.plan.plan_layers`, optimal or manual).

    Returns:
        The placed model. Placing again with another plan moves the variables.

    Raises:
        PlanError: the plan names devices TensorFlow does not see, its layers are
            not the model's, the model is not a Keras 3 model, or it was compiled
            with ``jit_compile=True``.
    """
    tf = import_tf()
    if not isinstance(plan, LayerPlan):
        raise PlanError(
            f"plan {plan!r}: expected a LayerPlan.", hint="make one with tfdevices.plan_layers(model, devices)."
        )
    _check_visible(plan)
    if hasattr(model_or_builder, "layers"):
        model = model_or_builder
    elif callable(model_or_builder):
        with _variables_created_on(tf, plan):
            model = model_or_builder()
    else:
        raise PlanError(
            f"model {model_or_builder!r}: expected a Keras model or a function that builds one.",
            hint="place_layers(model, plan) or place_layers(build_model, plan).",
        )
    layers = _layers_of(model, plan)
    boundary = _boundary_layers(model, plan)
    homes: dict[str, str] = {}
    for i, (layer, device) in enumerate(zip(layers, plan.devices)):
        for variable in layer.weights:
            _move_variable(tf, variable, device)
            homes[variable.path] = device
        _wrap_layer(tf, layer, device, boundary=i in boundary)
    object.__setattr__(model, "_tfdevices_homes", homes)
    _colocate_gradients(tf, model)
    _place_optimizer(tf, model)
    _no_xla(tf, model)
    return model


def planned_devices(model: Any) -> dict[str, str]:
    """``{layer name: device}`` as placed by :func:`place_layers`; empty for a model never placed."""
    return {layer.name: layer.__dict__[_MARK] for layer in getattr(model, "layers", ()) if _MARK in layer.__dict__}


def _check_visible(plan: LayerPlan) -> None:
    visible = list(logical_devices())
    unknown = sorted(set(plan.devices) - set(visible))
    if unknown:
        raise PlanError(
            f"plan puts layers on {unknown}, which TensorFlow does not see; it sees {visible}.",
            hint="plan for the visible devices, or split the CPU into logical devices "
            "(tfdevices.configure) before TensorFlow starts.",
        )


def _layers_of(model: Any, plan: LayerPlan) -> list[Any]:
    if not hasattr(model, "_tracker") or type(model).__module__.startswith("tf_keras"):
        raise PlanError(
            f"model {getattr(model, 'name', model)!r} is not a Keras 3 model ({type(model).__module__}).",
            hint="place_layers supports Keras 3 ('import keras'); for tf_keras see the module docs.",
        )
    layers = [layer for layer in model.layers if type(layer).__name__ != "InputLayer"]
    names = tuple(layer.name for layer in layers)
    if names != plan.layers:
        raise PlanError(
            f"plan is for layers {list(plan.layers)[:8]} ({len(plan.layers)}), but model "
            f"{model.name!r} has {list(names)[:8]} ({len(names)}).",
            hint="plan this model (plan_layers(model, devices)); names must match in order.",
        )
    return layers


def _boundary_layers(model: Any, plan: LayerPlan) -> set[int]:
    """Layers that read an activation from another device (or the model's inputs)."""
    edges = read_model(model).edges if getattr(model, "built", False) else ()
    if not edges:
        edges = tuple((i - 1, 0, i) for i in range(len(plan.layers)))
    return {c for p, _, c in edges if p < 0 or plan.devices[p] != plan.devices[c]}


def _move_variable(tf: Any, variable: Any, device: str) -> None:
    with tf.init_scope():
        value = variable.value
        if value.device and short_name(value.device) == device:
            return
        with tf.device(device):
            variable._initialize(tf.identity(value))


def _place_optimizer(tf: Any, model: Any) -> None:
    """Builds the optimizer now, puts each slot with its variable, and runs each update there."""
    optimizer = getattr(model, "optimizer", None)
    homes: Mapping[str, str] = model.__dict__.get("_tfdevices_homes", {})
    if optimizer is None or not hasattr(optimizer, "update_step"):
        return
    if not optimizer.built:
        optimizer.build(model.trainable_variables)
    prefixes = {path.replace("/", "_") + "_": device for path, device in homes.items()}
    for variable in optimizer.variables:
        owner = max((p for p in prefixes if variable.name.startswith(p)), key=len, default=None)
        if owner is not None:
            _move_variable(tf, variable, prefixes[owner])
    update = optimizer.__dict__.get("update_step")
    update = getattr(update, "__wrapped__", None) or optimizer.update_step

    @functools.wraps(update)
    def update_step(gradient: Any, variable: Any, learning_rate: Any) -> Any:
        device = getattr(variable, "device", "")  # Keras hands the optimizer the tf.Variable
        with tf.device(device) if device else contextlib.nullcontext():
            return update(gradient, variable, learning_rate)

    object.__setattr__(optimizer, "update_step", update_step)


def _colocate_gradients(tf: Any, model: Any) -> None:
    """Runs ``train_step`` under a device function that puts each gradient op with its forward op."""
    step = model.__dict__.get("train_step")
    step = getattr(step, "__wrapped__", None) or getattr(model, "train_step", None)
    if step is None:
        return

    @functools.wraps(step)
    def train_step(*args: Any, **kwargs: Any) -> Any:
        with tf.compat.v1.device(_with_forward_op):
            return step(*args, **kwargs)

    object.__setattr__(model, "train_step", train_step)


def _with_forward_op(op: Any) -> str:
    """The device of the forward op a gradient op (``gradient_tape/<forward op>/...``) belongs to."""
    if op.device or not op.name.startswith("gradient_tape/"):
        return str(op.device)
    parts = op.name[len("gradient_tape/") :].split("/")
    for k in range(len(parts), 0, -1):
        try:
            forward = op.graph.get_operation_by_name("/".join(parts[:k]))
        except KeyError:
            continue
        if forward.device:
            return str(forward.device)
    return ""


def _wrap_layer(tf: Any, layer: Any, device: str, *, boundary: bool) -> None:
    original = layer.__dict__.get("call")
    original = getattr(original, "__wrapped__", None) or layer.call

    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        with tf.device(device):
            if boundary:
                args, kwargs = tf.nest.map_structure(lambda t: tf.identity(t) if tf.is_tensor(t) else t, (args, kwargs))
            return original(*args, **kwargs)

    object.__setattr__(layer, "call", call)
    object.__setattr__(layer, _MARK, device)
    if not layer.built:
        build = layer.__dict__.get("build")
        build = getattr(build, "__wrapped__", None) or layer.build

        @functools.wraps(build)
        def placed_build(*args: Any, **kwargs: Any) -> Any:
            with tf.init_scope(), tf.device(device):
                return build(*args, **kwargs)

        object.__setattr__(layer, "build", placed_build)


def _no_xla(tf: Any, model: Any) -> None:
    """Turns XLA off (it compiles a step for one device), retraces steps, and keeps it so on compile."""
    if getattr(model, "compiled", False):
        model.jit_compile = False
    for attr in ("train_function", "test_function", "predict_function"):
        if hasattr(model, attr):
            setattr(model, attr, None)
    compile_ = model.__dict__.get("compile")
    compile_ = getattr(compile_, "__wrapped__", None) or getattr(model, "compile", None)
    if compile_ is None:
        return

    @functools.wraps(compile_)
    def compile(*args: Any, jit_compile: Any = "auto", **kwargs: Any) -> Any:
        if jit_compile is True:
            raise PlanError(
                "jit_compile=True on a placed model: XLA compiles the whole step for one device, "
                "which undoes the layer placement.",
                hint="compile with jit_compile=False.",
            )
        out = compile_(*args, jit_compile=False, **kwargs)
        _place_optimizer(tf, model)
        return out

    object.__setattr__(model, "compile", compile)


@contextlib.contextmanager
def _variables_created_on(tf: Any, plan: LayerPlan) -> Iterator[None]:
    """While a builder runs, creates each variable on the device of the planned layer being built."""
    from keras.src.backend.common import global_state  # noqa: PLC0415 (lazy Keras)

    devices = plan.assignment

    def creator(next_creator: Callable[..., Any], **kwargs: Any) -> Any:
        stack = global_state.get_global_attribute("name_scope_stack", default=[]) or []
        owner = next((s.caller.name for s in stack if getattr(s.caller, "name", None) in devices), None)
        if owner is None:
            return next_creator(**kwargs)
        with tf.device(devices[owner]):
            return next_creator(**kwargs)

    with tf.variable_creator_scope(creator):
        yield
