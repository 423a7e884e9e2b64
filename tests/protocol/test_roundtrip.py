"""Every generated message, every version: random values survive encode -> decode -> encode."""
from __future__ import annotations

import importlib
import random

import pytest

from protocol import codegen

MESSAGES = codegen.load_all()


def _class_for(msg: codegen.Message):
    if msg.kind in ("request", "response"):
        base = msg.name[: -len("Request")] if msg.kind == "request" else msg.name[: -len("Response")]
        mod = importlib.import_module(f"protocol.messages.{codegen.snake(base)}")
    elif msg.kind.startswith("coordinator-"):
        base = msg.name[: -len("Key")] if msg.kind == "coordinator-key" else msg.name[: -len("Value")]
        mod = importlib.import_module(f"protocol.coordinator_records.{codegen.snake(base)}")
    else:
        mod = importlib.import_module(f"protocol.messages.{codegen.snake(msg.name)}")
    return getattr(mod, msg.name)


def _value(rng: random.Random, f: codegen.Field, msg, v: int, cls, depth: int):
    k = f.kind
    nullable = v in f.nullable
    if nullable and rng.random() < 0.2:
        return None
    if k == "bool":
        return rng.random() < 0.5
    ints = {"int8": 7, "int16": 15, "int32": 31, "int64": 63}
    if k in ints:
        b = ints[k]
        return rng.randint(-(1 << b), (1 << b) - 1)
    if k == "uint16":
        return rng.randint(0, 0xFFFF)
    if k == "uint32":
        return rng.randint(0, 0xFFFFFFFF)
    if k == "float64":
        return rng.random() * 1e6
    if k == "uuid":
        return rng.randbytes(16)
    if k == "string":
        return "".join(rng.choice("abcdé-_ü0") for _ in range(rng.randint(0, 200 if rng.random() < 0.1 else 8)))
    if k == "bytes":
        return rng.randbytes(rng.randint(0, 20))
    if k == "records":
        return rng.randbytes(rng.randint(0, 700))
    top = _class_for(msg)
    if k == "struct":
        return _fill(rng, f.struct, msg, v, getattr(top, f.struct.name), depth + 1)
    n = rng.randint(0, 3 if depth < 3 else 1)
    sub = codegen.Field({"name": f.name, "type": f.elem, "versions": "0+"}, "x")
    sub.struct = f.struct
    out = []
    for _ in range(n):
        if f.struct is not None:
            out.append(_fill(rng, f.struct, msg, v, getattr(top, f.struct.name), depth + 1))
        else:
            out.append(_value(rng, sub, msg, v, cls, depth + 1))
    return out


def _fill(rng, sd, msg, v, cls, depth=0):
    obj = cls()
    for f in sd.fields:
        if f.present(v):
            setattr(obj, f.attr, _value(rng, f, msg, v, cls, depth))
    if v in msg.flexible and rng.random() < 0.3:
        obj._unknown_tagged_fields = [(9000 + rng.randint(0, 5) * 2, rng.randbytes(3))]
    return obj


def _normalize(obj):
    """Decoded records are memoryviews; compare them as bytes."""
    if isinstance(obj, list):
        return [_normalize(x) for x in obj]
    if isinstance(obj, memoryview):
        return bytes(obj)
    if hasattr(obj, "__slots__"):
        for s in obj.__slots__:
            setattr(obj, s, _normalize(getattr(obj, s)))
    return obj


CASES = [(name, v) for name, m in sorted(MESSAGES.items()) for v in m.versions()]


@pytest.mark.parametrize("name,version", CASES, ids=[f"{n}-v{v}" for n, v in CASES])
def test_round_trip(name, version):
    msg = MESSAGES[name]
    cls = _class_for(msg)
    rng = random.Random(f"{name}{version}")
    for _ in range(4):
        obj = _fill(rng, msg.root, msg, version, cls)
        data = obj.encode(version)
        back = _normalize(cls.decode(data, version))
        assert back == obj
        assert back.encode(version) == data


def test_defaults_encode_every_version():
    for name, v in CASES:
        msg = MESSAGES[name]
        cls = _class_for(msg)
        data = cls().encode(v)
        assert cls.decode(data, v).encode(v) == data


def test_tagged_field_with_default_value_is_not_written():
    from protocol.coordinator_records.share_update import ShareUpdateValue

    # DeliveryCompleteCount is tag 0 with default -1: not on the wire unless set.
    plain = ShareUpdateValue(snapshot_epoch=1, leader_epoch=2, start_offset=3).encode(0)
    assert plain.endswith(b"\x00")  # empty tagged-field section
    tagged = ShareUpdateValue(snapshot_epoch=1, leader_epoch=2, start_offset=3,
                              delivery_complete_count=7).encode(0)
    assert len(tagged) == len(plain) + 6  # count, tag, size, int32
    assert ShareUpdateValue.decode(tagged, 0).delivery_complete_count == 7
    assert ShareUpdateValue.decode(plain, 0).delivery_complete_count == -1


def test_unknown_tagged_fields_are_preserved():
    from protocol.messages.share_fetch import ShareFetchRequest

    req = ShareFetchRequest(group_id="g", member_id="m", share_session_epoch=0,
                            _unknown_tagged_fields=[(77, b"\x01\x02")])
    data = req.encode(1)
    assert ShareFetchRequest.decode(data, 1)._unknown_tagged_fields == [(77, b"\x01\x02")]


def test_truncated_frames_raise_clean_errors():
    from protocol.messages.fetch import FetchRequest

    data = FetchRequest(topics=[FetchRequest.FetchTopic(topic="t", partitions=[
        FetchRequest.FetchPartition(partition=1)])]).encode(12)
    for cut in range(len(data)):
        with pytest.raises((ValueError, IndexError, __import__("struct").error)):
            FetchRequest.decode(data[:cut], 12)


def test_huge_array_count_is_rejected_without_allocation():
    from protocol.messages.metadata import MetadataRequest
    from protocol.primitives import DecodeError

    with pytest.raises(DecodeError):
        MetadataRequest.decode(b"\x7f\xff\xff\xff", 1)


def test_generated_code_is_fresh():
    assert codegen.main(["--check"]) == 0
