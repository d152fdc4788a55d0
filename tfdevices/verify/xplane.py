"""The profiler's XSpace schema, the project's own: every plane is read without TensorFlow installed.

TensorFlow's profiler writes ``<host>.xplane.pb``, an ``XSpace`` message of
``tsl/profiler/protobuf/xplane.proto``. The message classes here are built from that file's
field numbers (the wire format: names, numbers, types and labels as TensorFlow 2.16 to 2.21
and XLA define them) with ``google.protobuf`` alone, in a descriptor pool of their own: nothing
is registered in protobuf's default pool, so TensorFlow's own ``xplane_pb2`` loads beside them
unchanged. ``tests/verify/test_schema.py`` checks field by field that they equal TensorFlow's
where TensorFlow is installed.

>>> space = xplane_module().XSpace()
>>> space.planes.add(name="/host:CPU").name
'/host:CPU'
>>> xplane_module().XSpace.FromString(space.SerializeToString()).planes[0].name
'/host:CPU'
"""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

#: A message's fields: ``(name, number, label, type, message type or "", oneof or "")``; labels
#: and types are ``FieldDescriptorProto``'s names without their prefix.
MessageTable = dict[str, tuple[tuple[str, int, str, str, str, str], ...]]

#: ``tsl/profiler/protobuf/xplane.proto`` (proto3), field by field.
XPLANE_FIELDS: MessageTable = {
    "XSpace": (
        ("planes", 1, "REPEATED", "MESSAGE", "XPlane", ""),
        ("errors", 2, "REPEATED", "STRING", "", ""),
        ("warnings", 3, "REPEATED", "STRING", "", ""),
        ("hostnames", 4, "REPEATED", "STRING", "", ""),
    ),
    "XPlane": (
        ("id", 1, "OPTIONAL", "INT64", "", ""),
        ("name", 2, "OPTIONAL", "STRING", "", ""),
        ("lines", 3, "REPEATED", "MESSAGE", "XLine", ""),
        ("event_metadata", 4, "REPEATED", "MESSAGE", "XPlane.EventMetadataEntry", ""),
        ("stat_metadata", 5, "REPEATED", "MESSAGE", "XPlane.StatMetadataEntry", ""),
        ("stats", 6, "REPEATED", "MESSAGE", "XStat", ""),
    ),
    "XPlane.EventMetadataEntry": (
        ("key", 1, "OPTIONAL", "INT64", "", ""),
        ("value", 2, "OPTIONAL", "MESSAGE", "XEventMetadata", ""),
    ),
    "XPlane.StatMetadataEntry": (
        ("key", 1, "OPTIONAL", "INT64", "", ""),
        ("value", 2, "OPTIONAL", "MESSAGE", "XStatMetadata", ""),
    ),
    "XLine": (
        ("id", 1, "OPTIONAL", "INT64", "", ""),
        ("display_id", 10, "OPTIONAL", "INT64", "", ""),
        ("name", 2, "OPTIONAL", "STRING", "", ""),
        ("display_name", 11, "OPTIONAL", "STRING", "", ""),
        ("timestamp_ns", 3, "OPTIONAL", "INT64", "", ""),
        ("duration_ps", 9, "OPTIONAL", "INT64", "", ""),
        ("events", 4, "REPEATED", "MESSAGE", "XEvent", ""),
    ),
    "XEvent": (
        ("metadata_id", 1, "OPTIONAL", "INT64", "", ""),
        ("offset_ps", 2, "OPTIONAL", "INT64", "", "data"),
        ("num_occurrences", 5, "OPTIONAL", "INT64", "", "data"),
        ("duration_ps", 3, "OPTIONAL", "INT64", "", ""),
        ("stats", 4, "REPEATED", "MESSAGE", "XStat", ""),
    ),
    "XStat": (
        ("metadata_id", 1, "OPTIONAL", "INT64", "", ""),
        ("double_value", 2, "OPTIONAL", "DOUBLE", "", "value"),
        ("uint64_value", 3, "OPTIONAL", "UINT64", "", "value"),
        ("int64_value", 4, "OPTIONAL", "INT64", "", "value"),
        ("str_value", 5, "OPTIONAL", "STRING", "", "value"),
        ("bytes_value", 6, "OPTIONAL", "BYTES", "", "value"),
        ("ref_value", 7, "OPTIONAL", "UINT64", "", "value"),
    ),
    "XEventMetadata": (
        ("id", 1, "OPTIONAL", "INT64", "", ""),
        ("name", 2, "OPTIONAL", "STRING", "", ""),
        ("display_name", 4, "OPTIONAL", "STRING", "", ""),
        ("metadata", 3, "OPTIONAL", "BYTES", "", ""),
        ("stats", 5, "REPEATED", "MESSAGE", "XStat", ""),
        ("child_id", 6, "REPEATED", "INT64", "", ""),
    ),
    "XStatMetadata": (
        ("id", 1, "OPTIONAL", "INT64", "", ""),
        ("name", 2, "OPTIONAL", "STRING", "", ""),
        ("description", 3, "OPTIONAL", "STRING", "", ""),
    ),
}

_PACKAGE = "tfdevices.schema.xplane"  # not TensorFlow's: its own pool, so no name can clash
_lock = threading.Lock()
_module: SimpleNamespace | None = None


def build_messages(file_name: str, package: str, table: MessageTable) -> dict[str, Any]:
    """The message classes of one proto3 file described by ``table``, in a descriptor pool of their own.

    ``"Outer.Inner"`` names a nested message; one whose name ends in ``Entry`` and has fields
    ``key`` and ``value`` is a map entry (protobuf's own encoding of ``map<K, V>``).

    Returns:
        ``{message name: class}`` for the top-level messages.
    """
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # noqa: PLC0415 (lazy protobuf)

    proto = descriptor_pb2.FileDescriptorProto(name=file_name, package=package, syntax="proto3")
    made: dict[str, Any] = {}
    for full, fields in table.items():
        outer, _, inner = full.partition(".")
        if inner:
            message = made[outer].nested_type.add(name=inner)
            message.options.map_entry = inner.endswith("Entry") and [f[0] for f in fields] == ["key", "value"]
        else:
            message = made[outer] = proto.message_type.add(name=outer)
        oneofs: list[str] = []
        for name, number, label, kind, type_name, oneof in fields:
            field = message.field.add(name=name, number=number)
            field.label = getattr(descriptor_pb2.FieldDescriptorProto, f"LABEL_{label}")
            field.type = getattr(descriptor_pb2.FieldDescriptorProto, f"TYPE_{kind}")
            if type_name:
                field.type_name = f".{package}.{type_name}"
            if oneof:
                if oneof not in oneofs:
                    oneofs.append(oneof)
                    message.oneof_decl.add(name=oneof)
                field.oneof_index = oneofs.index(oneof)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    get = getattr(message_factory, "GetMessageClass", None)
    if get is None:  # protobuf before 4.22
        get = message_factory.MessageFactory(pool).GetPrototype
    return {name: get(pool.FindMessageTypeByName(f"{package}.{name}")) for name in made}


def xplane_module() -> SimpleNamespace:
    """The XSpace message classes (``XSpace``, ``XPlane``, ``XLine``, ``XEvent``, ``XStat``, ...), built once."""
    global _module
    if _module is None:
        with _lock:
            if _module is None:
                _module = SimpleNamespace(**build_messages("tfdevices/xplane.proto", _PACKAGE, XPLANE_FIELDS))
    return _module
