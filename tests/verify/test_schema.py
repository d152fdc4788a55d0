"""The project's XSpace and HLO schemas: equal to TensorFlow's where it is installed; bad bytes: clear errors.

The equality tests load TensorFlow's generated modules in a fresh process and compare every
field (name, number, type, label, message type, oneof, map entries). The rest runs without
TensorFlow (``make test-no-tf``): real profiles cut anywhere, random bytes and nesting
deeper than protobuf reads give :class:`~tfdevices.core.errors.InputError`, never another
exception, and the HLO reader skips what it cannot read.
"""

from __future__ import annotations

import json
import os
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.helpers import REPO, run_py
from tfdevices.core.errors import InputError
from tfdevices.verify import PlacementReport, read_profile
from tfdevices.verify.hlo import HLO_FIELDS, HloModules, hlo_module
from tfdevices.verify.xplane import XPLANE_FIELDS, xplane_module

PROFILES = os.path.join(REPO, "tests", "data", "profiles")
TRAIN = os.path.join(PROFILES, "h200_jax_train_step.xplane.pb")

DESCRIBE = """
import json
def describe(descriptor, only=None):
    out = {}
    for f in descriptor.fields:
        if only is not None and f.name not in only:
            continue
        kind = f.message_type.name if f.message_type is not None else ""
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            kind = "map:" + ",".join(sorted(describe(f.message_type).keys()))
        repeated = f.is_repeated if hasattr(f, "is_repeated") else f.label == f.LABEL_REPEATED
        out[f.name] = [f.number, f.type, repeated, kind, f.containing_oneof.name if f.containing_oneof else ""]
    return out
"""


def _ours(module, table) -> dict[str, dict[str, list]]:
    exec(DESCRIBE, scope := {})
    return {name: scope["describe"](getattr(module, name).DESCRIPTOR) for name in table if "." not in name}


@pytest.mark.tensorflow
def test_the_xspace_schema_equals_tensorflows_xplane_proto():
    proc = run_py(
        DESCRIBE
        + textwrap.dedent(f"""
        from tensorflow.tsl.profiler.protobuf import xplane_pb2
        names = {[n for n in XPLANE_FIELDS if "." not in n]!r}
        print(json.dumps({{n: describe(getattr(xplane_pb2, n).DESCRIPTOR) for n in names}}))
        """)
    )
    theirs = json.loads(proc.stdout.splitlines()[-1])
    assert theirs == _ours(xplane_module(), XPLANE_FIELDS)


@pytest.mark.tensorflow
def test_the_hlo_schema_is_tensorflows_hlo_proto_restricted_to_the_fields_read():
    proc = run_py(
        DESCRIBE
        + textwrap.dedent(f"""
        from tensorflow.compiler.xla.service import hlo_pb2
        from tensorflow.compiler.xla import xla_data_pb2
        table = { ({n: [f[0] for f in fields] for n, fields in HLO_FIELDS.items() if "." not in n})!r}
        where = {{n: hlo_pb2 for n in table}}
        where["OpMetadata"] = xla_data_pb2
        print(json.dumps({{n: describe(getattr(where[n], n).DESCRIPTOR, set(table[n])) for n in table}}))
        """)
    )
    theirs = json.loads(proc.stdout.splitlines()[-1])
    assert theirs == _ours(hlo_module(), HLO_FIELDS)


def test_a_real_profile_round_trips_through_the_schema():
    with open(TRAIN, "rb") as f:
        data = f.read()
    space = xplane_module().XSpace.FromString(data)
    assert [p.name for p in space.planes][:3] == ["/host:metadata", "/host:__ScopeRangeCallStack__", "/device:GPU:0"]
    assert xplane_module().XSpace.FromString(space.SerializeToString()) == space


@pytest.mark.parametrize("name", ["h200_jax_train_step", "tf_cpu_function"])
def test_a_real_profile_cut_short_anywhere_is_a_clear_error_or_a_report(name, tmp_path):
    with open(os.path.join(PROFILES, f"{name}.xplane.pb"), "rb") as f:
        data = f.read()
    cuts = sorted({1, 2, 7, len(data) // 3, len(data) // 2, len(data) - 1} | set(range(3, len(data), len(data) // 40)))
    errors = 0
    for cut in cuts:
        path = tmp_path / f"cut{cut}.xplane.pb"
        path.write_bytes(data[:cut])
        try:
            assert isinstance(read_profile(path), PlacementReport)
        except InputError as err:
            errors += 1
            assert str(path) in str(err) and "HINT:" in str(err), err
    assert errors >= len(cuts) // 2  # most cuts end inside a message: protobuf says so


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(min_size=1, max_size=4096))
def test_random_bytes_give_a_clear_error_or_a_report(tmp_path, data):
    path = tmp_path / "random.xplane.pb"
    path.write_bytes(data)
    try:
        assert isinstance(read_profile(path), PlacementReport)
    except InputError as err:
        assert "HINT:" in str(err)


def _nested(depth: int) -> bytes:
    """An XSpace whose first plane holds ``depth`` groups one inside the other (field 9, unknown: protobuf reads in)."""
    body = b"\x4b" * depth + b"\x4c" * depth
    return b"\x0a" + _varint(len(body)) + body


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def test_nesting_deeper_than_protobuf_reads_is_a_clear_error(tmp_path):
    path = tmp_path / "deep.xplane.pb"
    path.write_bytes(_nested(5000))
    with pytest.raises(InputError, match="is truncated or is not an XSpace"):
        read_profile(path)


def _metadata_plane(proto: bytes):
    space = xplane_module().XSpace()
    plane = space.planes.add(name="/host:metadata")
    plane.stat_metadata[1].name = "Hlo Proto"
    plane.stat_metadata[2].name = "program_id"
    meta = plane.event_metadata[1]
    meta.name = "jit_step(7)"
    meta.stats.add(metadata_id=1, bytes_value=proto)
    meta.stats.add(metadata_id=2, int64_value=7)
    return plane


@settings(max_examples=150, deadline=None)
@given(data=st.binary(max_size=2048))
def test_hlo_bytes_that_are_not_a_module_are_skipped_and_named(data):
    modules = HloModules(_metadata_plane(data))
    ops = modules.ops_of("jit_step", 7, "fusion.1")
    assert (ops is None and modules.unread[0].startswith("jit_step(7) (not an HLO proto")) or isinstance(ops, tuple)


def test_an_hlo_module_ties_a_fusion_to_the_ops_fused_into_it():
    hlo = hlo_module().HloProto()
    module = hlo.hlo_module
    module.name = "jit_step"
    fused = module.computations.add(name="fused_computation", id=2)
    fused.instructions.add(name="dot.1", opcode="dot").metadata.op_name = "model/dense/MatMul"
    fused.instructions[0].metadata.op_type = "MatMul"
    fused.instructions.add(name="add.1", opcode="add").metadata.op_name = "model/dense/BiasAdd"
    fused.instructions[1].metadata.op_type = "BiasAdd"
    main = module.computations.add(name="main", id=1)
    fusion = main.instructions.add(name="gemm_fusion_dot.2", opcode="fusion", called_computation_ids=[2, 2, 9])
    fusion.metadata.op_name = "model/dense/MatMul"
    fusion.metadata.op_type = "MatMul"
    modules = HloModules(_metadata_plane(hlo.SerializeToString()))
    assert modules.ops_of("jit_step", 7, "gemm_fusion_dot.2") == (
        ("model/dense/MatMul", "MatMul"),
        ("model/dense/BiasAdd", "BiasAdd"),
    )
    assert modules.ops_of("jit_step", None, "no_such_fusion") == ()  # the module is found by name too
    assert modules.ops_of("jit_other", None, "gemm_fusion_dot.2") is None


def test_a_chain_of_computations_deeper_than_the_bound_is_followed_to_the_bound_only():
    from tfdevices.verify.hlo import MAX_CALL_DEPTH

    hlo = hlo_module().HloProto()
    hlo.hlo_module.name = "jit_deep"
    depth = 5000  # each computation calls the next: deeper than Python's own recursion limit
    for cid in range(depth):
        inst = hlo.hlo_module.computations.add(name=f"c{cid}", id=cid).instructions.add(name=f"i{cid}")
        inst.metadata.op_name = f"op{cid}"
        if cid + 1 < depth:
            inst.called_computation_ids.append(cid + 1)
    ops = HloModules(_metadata_plane(hlo.SerializeToString())).ops_of("jit_step", 7, "i0")
    assert ops == tuple((f"op{cid}", f"op{cid}") for cid in range(MAX_CALL_DEPTH + 1))


def test_the_docstring_examples_run():
    import doctest

    from tfdevices.tensorboard import events
    from tfdevices.verify import hlo, xla, xplane

    for module in (xplane, hlo, xla, events):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__
