"""Keras layers on devices: the model reader (costs and edges), the pure planner,
and placement (variables and compute on each layer's device).

Imports only from :mod:`tfdevices.core`; TensorFlow and Keras lazily.
"""
