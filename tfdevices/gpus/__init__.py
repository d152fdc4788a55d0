"""GPUs, without TensorFlow: the NVML adapter, the CUDA mask, the inventory and its
discovery, the spec grammar, selection and reservation.

Nothing in this wing imports TensorFlow, and it imports only from :mod:`tfdevices.core`.
"""
