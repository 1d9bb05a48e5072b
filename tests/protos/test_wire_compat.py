"""Our generated conveyor.v1 code puts every field on the wire with the upstream number and wire type."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import descriptor as _d
from google.protobuf.message import Message

from conveyor_sdk._gen.conveyor.v1 import service_pb2, task_pb2
from tests.protos.wire_table import ENUMS, MESSAGES, ONEOFS, RPCS

FILES = (task_pb2.DESCRIPTOR, service_pb2.DESCRIPTOR)


def _all_messages() -> dict[str, _d.Descriptor]:
    found: dict[str, _d.Descriptor] = {}
    for file in FILES:
        found.update(file.message_types_by_name)
    return found


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _wire_fields(buf: bytes) -> list[tuple[int, int]]:
    """Decode the raw tag stream: (field number, wire type) of every top-level field, in order."""
    out: list[tuple[int, int]] = []
    pos = 0
    while pos < len(buf):
        tag, pos = _read_varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        out.append((number, wire))
        if wire == 0:
            _, pos = _read_varint(buf, pos)
        elif wire == 1:
            pos += 8
        elif wire == 2:
            length, pos = _read_varint(buf, pos)
            pos += length
        elif wire == 5:
            pos += 4
        else:
            raise AssertionError(f"unexpected wire type {wire}")
    return out


def _scalar(field: _d.FieldDescriptor) -> Any:
    kind = field.type
    if kind == _d.FieldDescriptor.TYPE_STRING:
        return "x"
    if kind == _d.FieldDescriptor.TYPE_BYTES:
        return b"x"
    if kind == _d.FieldDescriptor.TYPE_BOOL:
        return True
    if kind == _d.FieldDescriptor.TYPE_DOUBLE:
        return 1.5
    if kind == _d.FieldDescriptor.TYPE_ENUM:
        return 1
    return 7


def _fill(msg: Message, only: str | None = None) -> Message:
    """Set every field (or, for a oneof message, only the member ``only``) to a non-default value."""
    for field in msg.DESCRIPTOR.fields:
        if only is not None and field.containing_oneof is not None and field.name != only:
            continue
        value = getattr(msg, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            key_f, val_f = (
                field.message_type.fields_by_name["key"],
                field.message_type.fields_by_name["value"],
            )
            value[_scalar(key_f)] = _scalar(val_f)
        elif field.is_repeated and field.message_type is not None:
            _fill(value.add())
        elif field.is_repeated:
            value.append(_scalar(field))
        elif field.message_type is not None:
            if field.message_type.full_name in {"google.protobuf.Timestamp", "google.protobuf.Duration"}:
                value.seconds = 1
            else:
                _fill(value)
                value.SetInParent()
        else:
            setattr(msg, field.name, _scalar(field))
    return msg


def test_message_set_matches_the_schema() -> None:
    """Every message of wire-schema.md exists in our schema and we define no extra ones."""
    assert set(_all_messages()) == set(MESSAGES)


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_every_field_on_the_wire_has_the_upstream_number_and_type(name: str) -> None:
    """Serialize the message with every field set and compare the decoded tags with the table."""
    descriptor = _all_messages()[name]
    expected = MESSAGES[name]
    assert {f.name: f.number for f in descriptor.fields} == {k: v[0] for k, v in expected.items()}
    cls = (task_pb2 if name in task_pb2.DESCRIPTOR.message_types_by_name else service_pb2).__dict__[name]
    variants = list(expected) if name in ONEOFS else [None]
    for only in variants:
        wire = _wire_fields(_fill(cls(), only).SerializeToString())
        want = {expected[only]} if only else set(expected.values())
        assert set(wire) == want, f"{name} ({only or 'all fields'}): wire {sorted(wire)} != {sorted(want)}"


def test_oneof_members_are_the_frame_oneof() -> None:
    """WorkerMessage and ServerMessage carry every member inside the oneof ``frame``."""
    messages = _all_messages()
    for name, oneof in ONEOFS.items():
        members = {f.name for f in messages[name].oneofs_by_name[oneof].fields}
        assert members == set(MESSAGES[name])


@pytest.mark.parametrize("enum_name", sorted(ENUMS))
def test_enum_values_match(enum_name: str) -> None:
    """Enum value names and numbers match the schema (number = position in the table)."""
    enums: dict[str, _d.EnumDescriptor] = {}
    for file in FILES:
        enums.update(file.enum_types_by_name)
    got = {v.name: v.number for v in enums[enum_name].values}
    assert got == {n: i for i, n in enumerate(ENUMS[enum_name])}


def test_rpc_paths_types_and_streaming() -> None:
    """Every RPC exists under package conveyor.v1 with the right request/response types and streaming kind."""
    got: dict[tuple[str, str], tuple[str, str, bool, bool]] = {}
    for service in service_pb2.DESCRIPTOR.services_by_name.values():
        assert service.full_name == f"conveyor.v1.{service.name}"
        for method in service.methods:
            got[(service.name, method.name)] = (
                method.input_type.name,
                method.output_type.name,
                method.client_streaming,
                method.server_streaming,
            )
    assert got == RPCS


def test_task_options_reserves_14_and_15() -> None:
    """TaskOptions keeps field numbers 14-15 reserved, as upstream does."""
    from google.protobuf import descriptor_pb2

    proto = descriptor_pb2.DescriptorProto()
    task_pb2.TaskOptions.DESCRIPTOR.CopyToProto(proto)
    assert {n for r in proto.reserved_range for n in range(r.start, r.end)} == {14, 15}


def test_decoder_sees_a_renumbered_field() -> None:
    """Sanity: the raw decoder reports the real number, so a renumbering would be caught."""
    msg = service_pb2.Credit(n=3)
    assert _wire_fields(msg.SerializeToString()) == [(1, 0)]
