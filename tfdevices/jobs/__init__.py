"""Jobs of many processes, without TensorFlow: who am I (TF_CONFIG, SLURM, MPI,
RANK), which GPUs are mine, and the local launcher.

Imports only from :mod:`tfdevices.core` and :mod:`tfdevices.gpus`.
"""
