"""A null where the schema allows none is refused by every generated decoder (issue 8.2).

Kafka's generated readers throw "non-nullable field X was serialized as null"; ours raise
``DecodeError`` (the server then closes the connection, as Kafka does for an unparseable
request).  This test writes frames with an independent, schema-driven writer: every message,
every version, every non-nullable string / bytes / records / array field (nested in structs
and arrays too) and every string / bytes element of an array gets a null of its own; the
generated decoder must refuse each, and accept the same frame without the null.
"""
from __future__ import annotations

import struct

import pytest

from protocol import codegen
from protocol.primitives import DecodeError
from tests.protocol.test_roundtrip import MESSAGES, _class_for


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


class Writer:
    """Writes a message with zero / empty values, one element per array, and a null at ``target``
    (a field, or ``(field, "element")`` for the element of an array of strings / bytes)."""

    def __init__(self, msg: codegen.Message, version: int, target=None):
        self.msg, self.v, self.target = msg, version, target
        self.flexible = version in msg.flexible

    def _compact(self, f: codegen.Field) -> bool:
        return codegen.compact_for(f, self.msg, self.v)

    def _len(self, f, n: int | None, width: str) -> bytes:
        """A length prefix; ``None`` is null."""
        if self._compact(f):
            return _uvarint(0 if n is None else n + 1)
        return struct.pack(width, -1 if n is None else n)

    def struct_(self, sd: codegen.StructDef) -> bytes:
        out = bytearray()
        tagged = []
        for f in sd.fields:
            if not f.present(self.v):
                continue
            if f.is_tagged(self.v):
                if self._on_path(f):
                    tagged.append((f.tag, self.field(f)))
                continue
            out += self.field(f)
        if self.flexible:
            out += _uvarint(len(tagged))
            for tag, data in sorted(tagged):
                out += _uvarint(tag) + _uvarint(len(data)) + data
        return bytes(out)

    def _on_path(self, f) -> bool:
        return self.target is not None and (self.target is f or self.target == (f, "element")
                                            or self._contains(f))

    def _contains(self, f) -> bool:
        if f.struct is None:
            return False
        stack = [f.struct]
        while stack:
            sd = stack.pop()
            for g in sd.fields:
                if g is self.target or self.target == (g, "element"):
                    return True
                if g.struct is not None:
                    stack.append(g.struct)
        return False

    def scalar(self, f, kind: str, null: bool) -> bytes:
        if kind in codegen.FIXED:
            return bytes(codegen.FIXED[kind][1])
        if kind == "string":
            return self._len(f, None if null else 0, ">h")
        return self._len(f, None if null else 0, ">i")  # bytes, records

    def field(self, f: codegen.Field) -> bytes:
        null = self.target is f
        k = f.kind
        if k == "struct":
            if self.v in f.nullable:
                return b"\x01" + self.struct_(f.struct)
            return self.struct_(f.struct)
        if k != "array":
            return self.scalar(f, k, null)
        if null:
            return self._len(f, None, ">i")
        elem_null = self.target == (f, "element")
        body = self.struct_(f.struct) if f.struct is not None else self.scalar(f, f.elem, elem_null)
        return self._len(f, 1, ">i") + body


def _targets(msg: codegen.Message, v: int) -> list:
    out = []

    def walk(sd):
        for f in sd.fields:
            if not f.present(v):
                continue
            if f.kind in ("string", "bytes", "records", "array") and v not in f.nullable:
                out.append(f)
            if f.kind == "array" and f.elem in ("string", "bytes", "records"):
                out.append((f, "element"))
            if f.struct is not None:
                walk(f.struct)

    walk(msg.root)
    return out


CASES = [(name, v) for name, m in sorted(MESSAGES.items()) for v in m.versions()]


@pytest.mark.parametrize("name,version", CASES, ids=[f"{n}-v{v}" for n, v in CASES])
def test_null_in_non_nullable_field_is_refused(name, version):
    msg = MESSAGES[name]
    cls = _class_for(msg)
    cls.decode(Writer(msg, version).struct_(msg.root), version)  # the writer is right without a null
    for target in _targets(msg, version):
        data = Writer(msg, version, target).struct_(msg.root)
        with pytest.raises(DecodeError, match="non-nullable field .* was serialized as null"):
            cls.decode(data, version)


def test_every_schema_has_its_nulls_checked():
    """The walk reaches fields in nested structs and array elements (not only top-level ones)."""
    total = sum(len(_targets(MESSAGES[n], v)) for n, v in CASES)
    assert total > 1000
    hb = MESSAGES["ShareGroupHeartbeatRequest"]
    names = [(t[0].name, "element") if isinstance(t, tuple) else t.name for t in _targets(hb, 1)]
    assert ("SubscribedTopicNames", "element") in names
