"""Record-batch compression codecs, as Kafka frames them.

Codec ids are the batch attribute's low three bits (``protocol.records.COMPRESSION_*``).

* gzip (1): the standard library (``zlib``); always available. Several concatenated gzip members
  are read as one stream, as Java's ``GZIPInputStream`` does.
* snappy (2), lz4 (3), zstd (4): the optional extra ``sharebroker[compression]`` (the ``cramjam``
  package). Without it, :func:`available` is false for them and :func:`decompress` /
  :func:`compress` raise :class:`CodecUnavailable` naming the extra; callers keep such a batch
  whole instead of rewriting it.

Framing, as Kafka's ``org.apache.kafka.common.compress`` reads and writes it:

* snappy: the xerial ``SnappyOutputStream`` framing (magic ``\\x82SNAPPY\\x00``, two int32 versions,
  then int32-length-prefixed raw snappy blocks) is written; reading accepts it and, as
  ``SnappyInputStream`` does, a plain raw snappy buffer (what librdkafka produces);
* lz4: the LZ4 frame format with independent blocks of at most 64 KiB (``Lz4BlockInputStream``
  refuses dependent blocks, which is the frame format's default);
* zstd: one zstd frame.
"""

from __future__ import annotations

import struct
import zlib

_UNLOADED = object()
# The optional extra's module, None without it; imported on first use (_codecs), as a broker that never
# meets a snappy, lz4 or zstd batch need not map it (~1.7 MiB resident).
_cramjam = _UNLOADED

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
NAMES = {0: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
EXTRA = "sharebroker[compression]"

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024  # SnappyOutputStream's default block size
_I32 = struct.Struct(">i")


class CodecUnavailable(Exception):
    """The codec needs the optional extra, which is not installed."""

    def __init__(self, codec: int):
        super().__init__(f"{NAMES.get(codec, codec)} batches need the optional extra {EXTRA} (pip install '{EXTRA}')")
        self.codec = codec


class CodecError(ValueError):
    """Compressed data that does not decode."""


def _codecs():
    """The cramjam module, or None when the extra is not installed."""
    global _cramjam
    if _cramjam is _UNLOADED:
        try:
            import cramjam
        except ImportError:  # pragma: no cover - depends on the installation
            cramjam = None
        _cramjam = cramjam
    return _cramjam


def available(codec: int) -> bool:
    """True if :func:`decompress` and :func:`compress` handle ``codec``."""
    return codec == GZIP or (codec in (SNAPPY, LZ4, ZSTD) and _codecs() is not None)


def _package_for(codec: int):
    """The codec package for snappy, lz4 or zstd; CodecError for an unknown codec, CodecUnavailable
    without the ``compression`` extra."""
    if codec not in (SNAPPY, LZ4, ZSTD):
        raise CodecError(f"unknown compression codec {codec}")
    cj = _codecs()
    if cj is None:
        raise CodecUnavailable(codec)
    return cj


def decompress(codec: int, data) -> bytes:
    """The records section of a batch compressed with ``codec``, inflated."""
    try:
        if codec == GZIP:
            return _gunzip(data)
        cj = _package_for(codec)
        if codec == SNAPPY:
            return _snappy_decompress(cj, data)
        if codec == LZ4:
            return bytes(cj.lz4.decompress(bytes(data)))
        return bytes(cj.zstd.decompress(bytes(data)))
    except (CodecUnavailable, CodecError):
        raise
    except Exception as e:  # zlib.error, cramjam's DecompressionError, struct.error
        raise CodecError(f"{NAMES.get(codec, codec)} data does not decode: {e}") from None


def compress(codec: int, data, level: int | None = None) -> bytes:
    """``data`` compressed with ``codec`` in Kafka's framing (``level`` None: the codec's default)."""
    if codec == GZIP:
        c = zlib.compressobj(-1 if level is None or level < 0 else level, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    cj = _package_for(codec)
    if codec == SNAPPY:
        mv = memoryview(data)
        out = bytearray(_XERIAL_HEADER)
        for pos in range(0, len(mv), _XERIAL_BLOCK):
            block = bytes(cj.snappy.compress_raw(bytes(mv[pos:pos + _XERIAL_BLOCK])))
            out += _I32.pack(len(block))
            out += block
        return bytes(out)
    if codec == LZ4:
        c = cj.lz4.Compressor(level=level, content_checksum=False, block_linked=False)
        c.compress(bytes(data))
        return bytes(c.finish())
    return bytes(cj.zstd.compress(bytes(data), level=level))


def _gunzip(data) -> bytes:
    out = []
    rest = bytes(data)
    while rest:
        d = zlib.decompressobj(31)
        out.append(d.decompress(rest))
        if not d.eof:
            raise CodecError("gzip data is truncated")
        rest = d.unused_data
    return b"".join(out)


def _snappy_decompress(cj, data) -> bytes:
    buf = bytes(data)
    if not buf.startswith(_XERIAL_MAGIC):
        return bytes(cj.snappy.decompress_raw(buf))
    pos, out = len(_XERIAL_HEADER), []
    while pos < len(buf):
        if pos + 4 > len(buf):
            raise CodecError("snappy block length is truncated")
        n = _I32.unpack_from(buf, pos)[0]
        pos += 4
        if n < 0 or pos + n > len(buf):
            raise CodecError("snappy block is truncated")
        out.append(bytes(cj.snappy.decompress_raw(buf[pos:pos + n])))
        pos += n
    return b"".join(out)
