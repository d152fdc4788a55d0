"""Placement verification: where every op really ran, in the ops the program wrote.

:func:`capture` (or the :func:`capturing` block) runs code under TensorFlow's
profiler, which records every kernel TensorFlow executes with its start and
duration, and the ``_Send`` of every tensor copied between devices (its key names
both devices). Nothing is retraced or recompiled: a step that already ran is
captured for about the cost of one profiled call. The result is a frozen
:class:`PlacementReport`: every executed op with its device, the device the program
asked for, the model op it is and the kernel that ran it, its start and duration;
every cross-device transfer with the tensor and its size where the shape is known;
the collective ops; and checks that read as sentences.

>>> import tensorflow as tf
>>> import tfdevices.verify as verify
>>> @tf.function
... def step(x):
...     with tf.device("/CPU:0"):
...         return tf.reduce_sum(x * 2.0)
>>> report = verify.capture(step, tf.ones([4]))
>>> report.assert_on("CPU:0", ops="*", types=["Mul"])
>>> report.transfers
()

**Model ops and kernels.** TensorFlow rewrites graphs before running them: with
oneDNN (the default on CPUs with AVX-512) a MatMul runs as ``_MklMatMul`` and a Dense
layer's MatMul+BiasAdd+Relu as one ``_MklNativeFusedMatMul`` (``_FusedMatMul``
without oneDNN) named after its last op. A report speaks of the ops the program
wrote, whatever ran them: each op carries its model op (``type``, read from the
function's traced graph) and the kernel (``kernel``, ``kernel_name``); a fused
kernel counts as each op it fused. Ops that XLA compiled (``jit_compile=True``) are
reported on the device their cluster ran on, with the kernel ``"XlaCluster"``.

**Where each op ran.** The profiler records, for each function partition that runs,
the executor context its kernels run in; a partition's device is read from the
``_Send`` keys of the tensors it sends or receives. A partition that copies nothing
(a function on one device) runs on the device its ops asked for or, when none
asked, where its outputs were placed. Eager ops are recorded by an op callback,
on the device of their output. A step's span is written when the step ends, so one
that ends after the profiler stopped is missing while its kernels are not; those
kernels are tied to their step through the thread pool's record of who scheduled
the work they ran in. A kernel the trace ties to no step is reported on device
``"?"``, and the report's ``notes`` say so: never on a guessed device.

Device names in reports are TensorFlow's short names, ``"CPU:1"``, ``"GPU:0"``,
prefixed with the task (``"worker:1/GPU:0"``) when the device belongs to a job
other than the local one.

**On a GPU, the GPU's clock.** On a GPU the host's kernel events are launches; the
GPU runs each kernel later, for another length of time. When the trace holds GPU
planes (``/device:GPU:N``), a GPU op's ``start_us``/``duration_us`` are its kernels'
on the device (the union of their time; ``kernels`` names them) and ``launch_us`` is
the host's launch; a GPU's ``busy_us`` is the union of its kernels; memory copies
carry their direction (``kind``), bytes and GPU time; NCCL kernels time their
collectives (:mod:`tfdevices.verify.timing`). A GPU op that ran no kernel on the
device keeps the host's time, and the notes say how many did.

**Every instantiation, without the profiler.** :class:`PlacementWatch` turns on
TensorFlow's run metadata and reads, for each new instantiation of a ``tf.function``
(its first call and each retrace), the partition graphs TensorFlow placed: ops on
their assigned devices and the copies between them, no times, at no per-step cost
(:mod:`tfdevices.verify.run_metadata`). ``PlacementLogger`` uses it to see every retrace.

**Profiles already written.** :func:`read_profile` reads the same report from any
``*.xplane.pb`` TensorFlow's profiler wrote (Keras' ``TensorBoard(profile_batch=...)``,
``tf.profiler.experimental``, TensorBoard's capture), or from a log directory holding them,
with no TensorFlow installed (the XSpace schema is tfdevices' own: :mod:`tfdevices.verify.xplane`).
On a GPU, XLA's kernels are read by module and instruction (:class:`XlaOpPlacement`) and tied
to the ops the profile's HLO names (:mod:`tfdevices.verify.xla`), kernels run inside command
buffers (CUDA graphs, XLA's default) by the order they ran in (:mod:`tfdevices.verify.command_buffers`);
an XLA cluster is one unit, its time counted once (:mod:`tfdevices.verify.clusters`).

**JSON** (:meth:`PlacementReport.to_json`, what TensorBoard stores and the
Placement dashboard reads), version 3 (version 2, without the GPU fields, reads too)::

    {"version": 2,
     "ops": [{"name": "seq/dense_1/MatMul",   # the op as the program wrote it
              "type": "MatMul",               # the model op
              "device": "CPU:1",              # where it ran
              "requested": "CPU:1",           # what the program asked for ("" when nothing)
              "call": 0,                      # index of the function call (or eager op)
              "kernel": "_FusedMatMul",       # the kernel that ran it ("XlaCluster" for XLA)
              "kernel_name": "seq/dense_1/Relu",  # the kernel's node (shared by the ops it fused)
              "start_us": 12.5,               # start, microseconds from the first event; null if unknown
              "duration_us": 3.25,            # duration (shared by the ops a kernel fused); null if unknown
              "launch_us": null,              # on a GPU: the host's launch (start_us is the GPU's)
              "kernels": [],                  # on a GPU: the device kernels that ran it
              "fusion": "fusion.3",           # an XLA op read from a GPU profile only (XlaOpPlacement):
              "graph": ""}, ...],             #   its HLO instruction and command buffer
     "transfers": [{"src": "CPU:0", "dst": "CPU:1", "tensor": "x:0", "dtype": "float32",
                    "shape": [4, 16], "bytes": 256,   # shape/bytes null when unknown
                    "send_op": "x/_1", "recv_op": "x/_2", "call": 0,
                    "start_us": 10.0, "duration_us": 1.5,   # the _Send's (on a GPU: the memcpy's)
                    "kind": ""}, ...],                        # "H2D", "D2H", "D2D", "P2P" for a GPU memcpy
     "collectives": [{"name": ..., "type": "CollectiveReduceV2", "device": "CPU:0",
                      "reduction": "Add", "dtype": "float32", "call": 0,
                      "start_us": 20.0, "duration_us": 8.0}, ...],   # null when not timed
     "busy_us": {"CPU:0": 48.2, "CPU:1": 95.0},   # per device: time at least one kernel ran
     "notes": [],   # what could not be established (ops on device "?"); absent in older reports
     "steps": []}   # the steps a profile marks

Times come from one clock (the profiler's) for all devices of the process; the GPU
tracer aligns the GPUs' timestamps to it.

The package's modules follow the work: :mod:`~tfdevices.verify.records` and
:mod:`~tfdevices.verify.report` (what a report holds and answers),
:mod:`~tfdevices.verify.host` and :mod:`~tfdevices.verify.device` (reading the
trace's planes), :mod:`~tfdevices.verify.graph` (the ops the program wrote),
:mod:`~tfdevices.verify.recording` (what Python called), :mod:`~tfdevices.verify.building`
and :mod:`~tfdevices.verify.timing` (the report), :mod:`~tfdevices.verify.profiling`
(capture), :mod:`~tfdevices.verify.profiles` (profiles on disk) and
:mod:`~tfdevices.verify.drift` (what changed between two captures of a long run).
"""

from __future__ import annotations

from tfdevices.core.devices import short_name
from tfdevices.verify.profiles import read_profile
from tfdevices.verify.profiling import Capture, capture, capturing
from tfdevices.verify.records import (
    JSON_VERSION,
    UNKNOWN_DEVICE,
    XLA_CLUSTER,
    Collective,
    OpPlacement,
    PlacementDiff,
    Transfer,
    TransferGroup,
    VariableRead,
    XlaOpPlacement,
    group_transfers,
)
from tfdevices.verify.report import PlacementReport
from tfdevices.verify.run_metadata import Instantiation, PlacementWatch

__all__ = [
    "Capture",
    "Collective",
    "Instantiation",
    "JSON_VERSION",
    "OpPlacement",
    "PlacementDiff",
    "PlacementReport",
    "PlacementWatch",
    "Transfer",
    "TransferGroup",
    "UNKNOWN_DEVICE",
    "VariableRead",
    "XLA_CLUSTER",
    "XlaOpPlacement",
    "capture",
    "capturing",
    "group_transfers",
    "read_profile",
    "short_name",
]
