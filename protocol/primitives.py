"""Wire primitives used by the generated message codecs.

Decoders take a ``memoryview`` (format ``B``) and an integer position and return
``(value, new_position)``; they raise ``struct.error``, ``IndexError`` or
``ValueError`` on malformed input, which the server turns into one clear error per
frame.  Encoders append to a ``bytearray``.

Record payloads (the ``records`` type) are never copied on encode when a splice
list is given: the encoder writes the length prefix and remembers
``(position, chunk)``; :func:`frame_parts` then interleaves the bytearray with the
chunks so ``transport.writelines`` sends record bytes straight from storage.
"""
from __future__ import annotations

import os
import struct

I8 = struct.Struct(">b")
I16 = struct.Struct(">h")
U16 = struct.Struct(">H")
I32 = struct.Struct(">i")
U32 = struct.Struct(">I")
I64 = struct.Struct(">q")
F64 = struct.Struct(">d")

ZERO_UUID = bytes(16)
# Records chunks shorter than this are copied into the frame; longer ones are spliced.
SPLICE_MIN = 512


class DecodeError(ValueError):
    """A frame does not follow the schema it claims to follow."""


# ---------------------------------------------------------------- varints
def read_uvarint(m, p: int) -> tuple[int, int]:
    b = m[p]
    if b < 0x80:
        return b, p + 1
    result = b & 0x7F
    shift = 7
    while True:
        p += 1
        b = m[p]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, p + 1
        shift += 7
        if shift > 28:
            raise DecodeError("unsigned varint longer than 5 bytes")


def write_uvarint(b: bytearray, n: int) -> None:
    if n < 0x80:
        b.append(n)
        return
    if n >> 32:
        raise ValueError("unsigned varint out of range")
    while n >= 0x80:
        b.append((n & 0x7F) | 0x80)
        n >>= 7
    b.append(n)


def uvarint_size(n: int) -> int:
    size = 1
    while n >= 0x80:
        n >>= 7
        size += 1
    return size


# ---------------------------------------------------------------- strings
def read_string(m, p: int):
    n = (m[p] << 8) | m[p + 1]
    p += 2
    if n & 0x8000:
        if n == 0xFFFF:
            return None, p
        raise DecodeError("negative string length")
    end = p + n
    if end > len(m):
        raise DecodeError("string runs past the end of the frame")
    return str(m[p:end], "utf-8"), end


def read_compact_string(m, p: int):
    n = m[p]
    if n < 0x80:
        p += 1
    else:
        n, p = read_uvarint(m, p)
    if n == 0:
        return None, p
    end = p + n - 1
    if end > len(m):
        raise DecodeError("string runs past the end of the frame")
    return str(m[p:end], "utf-8"), end


def write_string(b: bytearray, s) -> None:
    if s is None:
        b += b"\xff\xff"
        return
    e = s.encode()
    if len(e) > 0x7FFF:
        raise ValueError("string longer than 32767 bytes")
    b += U16.pack(len(e))
    b += e


def write_compact_string(b: bytearray, s) -> None:
    if s is None:
        b.append(0)
        return
    e = s.encode()
    n = len(e) + 1
    if n < 0x80:
        b.append(n)
    else:
        write_uvarint(b, n)
    b += e


# ---------------------------------------------------------------- bytes and records
def read_bytes(m, p: int):
    n = I32.unpack_from(m, p)[0]
    p += 4
    if n < 0:
        return None, p
    end = p + n
    if end > len(m):
        raise DecodeError("bytes run past the end of the frame")
    return bytes(m[p:end]), end


def read_compact_bytes(m, p: int):
    n, p = read_uvarint(m, p)
    if n == 0:
        return None, p
    end = p + n - 1
    if end > len(m):
        raise DecodeError("bytes run past the end of the frame")
    return bytes(m[p:end]), end


def read_records(m, p: int):
    n = I32.unpack_from(m, p)[0]
    p += 4
    if n < 0:
        return None, p
    end = p + n
    if end > len(m):
        raise DecodeError("records run past the end of the frame")
    return m[p:end], end


def read_compact_records(m, p: int):
    n, p = read_uvarint(m, p)
    if n == 0:
        return None, p
    end = p + n - 1
    if end > len(m):
        raise DecodeError("records run past the end of the frame")
    return m[p:end], end


def write_bytes(b: bytearray, v) -> None:
    if v is None:
        b += b"\xff\xff\xff\xff"
        return
    b += I32.pack(len(v))
    b += v


def write_compact_bytes(b: bytearray, v) -> None:
    if v is None:
        b.append(0)
        return
    write_uvarint(b, len(v) + 1)
    b += v


class FileChunk:
    """Record bytes that stay in a file until they are sent: ``size`` bytes at ``pos`` of ``fd``.

    A ``records`` value may hold these beside bytes and memoryviews; the encoder
    splices them into the frame like any chunk, and the sender can hand them to
    ``os.sendfile`` so the bytes never pass through Python.  ``read()`` is the
    fallback (a ``pread``).  The fd belongs to its owner (a segment): use the chunk
    in the same event-loop callback that made it.
    """

    __slots__ = ("fd", "pos", "size")

    def __init__(self, fd: int, pos: int, size: int):
        self.fd, self.pos, self.size = fd, pos, size

    def __len__(self) -> int:
        return self.size

    def read(self) -> bytes:
        return os.pread(self.fd, self.size, self.pos)


def records_size(v) -> int:
    if isinstance(v, (list, tuple)):
        return sum(len(c) for c in v)
    return len(v)


def _put_records(b: bytearray, v, sp) -> None:
    chunks = v if isinstance(v, (list, tuple)) else (v,)
    for c in chunks:
        if sp is not None and len(c) >= SPLICE_MIN:
            sp.append((len(b), c))
        else:
            b += c.read() if type(c) is FileChunk else c


def write_records(b: bytearray, v, sp, nullable: bool = True) -> None:
    if v is None:
        b += b"\xff\xff\xff\xff" if nullable else b"\x00\x00\x00\x00"
        return
    b += I32.pack(records_size(v))
    _put_records(b, v, sp)


def write_compact_records(b: bytearray, v, sp, nullable: bool = True) -> None:
    if v is None:
        b.append(0 if nullable else 1)
        return
    write_uvarint(b, records_size(v) + 1)
    _put_records(b, v, sp)


# ---------------------------------------------------------------- arrays
def read_array_len(m, p: int) -> tuple[int, int]:
    n = I32.unpack_from(m, p)[0]
    return n, p + 4


def read_compact_array_len(m, p: int) -> tuple[int, int]:
    n = m[p]
    if n < 0x80:
        return n - 1, p + 1
    n, p = read_uvarint(m, p)
    return n - 1, p


def write_array_len(b: bytearray, a) -> None:
    b += I32.pack(-1 if a is None else len(a))


def write_compact_array_len(b: bytearray, a) -> None:
    if a is None:
        b.append(0)
        return
    n = len(a) + 1
    if n < 0x80:
        b.append(n)
    else:
        write_uvarint(b, n)


def check_count(m, p: int, n: int, min_size: int) -> None:
    if n * min_size > len(m) - p:
        raise DecodeError(f"array of {n} elements cannot fit in the frame")


def read_fixed_array(m, p: int, n: int, code: str, size: int):
    if n < 0:
        return None, p
    check_count(m, p, n, size)
    return list(struct.unpack_from(f">{n}{code}", m, p)), p + n * size


def write_fixed_array(b: bytearray, a, code: str) -> None:
    if a:
        b += struct.pack(f">{len(a)}{code}", *a)


# ---------------------------------------------------------------- tagged fields
def skip_tagged(m, p: int):
    """Read a tagged-field section, returning unknown fields as a list or None."""
    n = m[p]
    if n == 0:
        return None, p + 1
    n, p = read_uvarint(m, p)
    out = []
    for _ in range(n):
        tag, p = read_uvarint(m, p)
        size, p = read_uvarint(m, p)
        end = p + size
        if end > len(m):
            raise DecodeError("tagged field runs past the end of the frame")
        out.append((tag, bytes(m[p:end])))
        p = end
    return out, p


def write_tagged(b: bytearray, fields) -> None:
    """Write (tag, bytes) pairs, sorted by tag, as a tagged-field section."""
    fields = sorted(fields, key=lambda f: f[0])
    write_uvarint(b, len(fields))
    last = -1
    for tag, data in fields:
        if tag == last:
            raise ValueError(f"duplicate tagged field {tag}")
        last = tag
        write_uvarint(b, tag)
        write_uvarint(b, len(data))
        b += data


# ---------------------------------------------------------------- framing
def frame_parts(b: bytearray, sp) -> list:
    """Interleave an encoded buffer with its spliced record chunks."""
    if not sp:
        return [b]
    mv = memoryview(b)
    parts = []
    prev = 0
    for pos, chunk in sp:
        if pos > prev:
            parts.append(mv[prev:pos])
        parts.append(chunk)
        prev = pos
    if prev < len(b):
        parts.append(mv[prev:])
    return parts


def join_parts(b: bytearray, sp) -> bytes:
    return b"".join(x.read() if type(x) is FileChunk else bytes(x) if isinstance(x, memoryview) else x
                    for x in frame_parts(b, sp))
