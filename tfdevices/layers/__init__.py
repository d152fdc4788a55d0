"""Keras layers on devices: the model reader (costs and edges), the pure planner,
and placement (variables and compute on each layer's device).

Imports only from :mod:`tfdevices.core`; TensorFlow and Keras lazily.
"""

from tfdevices.layers.model import LayerCosts, measure_layer_times, read_model
from tfdevices.layers.place import place_layers, planned_devices
from tfdevices.layers.plan import LayerPlan, Stage, plan_layers

__all__ = [
    "plan_layers",
    "LayerPlan",
    "Stage",
    "place_layers",
    "planned_devices",
    "read_model",
    "LayerCosts",
    "measure_layer_times",
]
