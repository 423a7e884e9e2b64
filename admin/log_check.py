"""``sharebroker-log-check``: check a partition's segments (or a whole data directory's) offline,
as Kafka's ``kafka-dump-log.sh --verify`` (``DumpLogSegments``) does; no broker connection.

    sharebroker-log-check PATH [PATH ...] [--print] [--deep]

PATH is a broker's data directory (every ``<topic>-<partition>`` directory in it is checked) or one
partition directory. For each segment (``<base>.log``) every batch is checked: its header (magic 2,
a length that fits the file, lastOffsetDelta and record count not negative), its CRC32C, and that
base offsets never go backwards (nor below the segment's base offset, nor into the next segment);
after a damaged batch the check goes on at the next batch it can find (``broker/log/damage.py``).
Then the ``.index`` (whole 8-byte entries, offsets and positions rising, each entry pointing at the
start of the batch with that offset) and the ``.timeindex`` (whole 12-byte entries, timestamps
rising, each naming the base offset of a batch whose max timestamp it holds). ``--deep`` also
decodes every record (Kafka's ``--deep-iteration``): the record count and offsets must match the
header. ``--print`` prints every batch (and with ``--deep`` every record) as Kafka's tool does.

Output: one line per segment (``OK``, ``TORN`` or ``DAMAGED``, the batches, offsets and bytes),
the problems found under it, and a summary line. ``TORN``: the last segment of a partition ends in
an incomplete batch, which is what a kill -9 or power loss mid-write leaves; start-up recovery
truncates it, so it is no damage. A damaged batch in a sealed segment is what the broker skips when
a fetch meets it (consumers see a gap); an inconsistent index misleads lookups until it is rebuilt:
stop the broker, delete that segment's ``.index`` and ``.timeindex`` and start it (they are rebuilt
from the log).

Reading while a broker runs is safe (nothing is written or locked for more than an instant); the
command says so when the data directory's ``.lock`` is held, since the active segments may then be
mid-write.

Exit codes: 0 no damage (``TORN`` tails allowed); 1 damage found; 2 bad usage or unreadable path.
"""
from __future__ import annotations

import argparse
import fcntl
import os
import re
import sys

from broker.log.damage import check_segment
from broker.log.segment import OFFSET_ENTRY, TIME_ENTRY
from protocol.records import COMPRESSION_MASK, CONTROL_MASK, TRANSACTIONAL_MASK, RecordsError, iter_records

_PARTITION_DIR = re.compile(r"^.+-\d+$")
_SEGMENT = re.compile(r"^(\d{20})\.log$")
_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sharebroker-log-check",
        description="Check log segments offline (batch headers, CRC32C, offsets, index files), as "
                    "kafka-dump-log.sh --verify. Exit 0: no damage; 1: damage found; 2: bad usage.")
    p.add_argument("paths", nargs="+", metavar="PATH", help="a data directory or a partition directory")
    p.add_argument("--print", dest="print_batches", action="store_true", help="print every batch")
    p.add_argument("--deep", action="store_true",
                   help="decode every record too (Kafka's --deep-iteration); with --print, print them")
    return p


def segments_of(path: str) -> list[int]:
    return sorted(int(m.group(1)) for m in map(_SEGMENT.match, os.listdir(path)) if m)


def partition_dirs(path: str) -> list[str]:
    """``path`` itself when it holds segments, else its ``<topic>-<n>`` subdirectories that do."""
    if segments_of(path):
        return [path]
    return [os.path.join(path, n) for n in sorted(os.listdir(path))
            if _PARTITION_DIR.match(n) and not n.endswith("-delete") and os.path.isdir(os.path.join(path, n))]


def broker_running(path: str) -> bool:
    """True when a broker holds the data directory's lock (``path`` or its parent)."""
    for d in (path, os.path.dirname(os.path.normpath(path))):
        lock = os.path.join(d, ".lock")
        if not os.path.exists(lock):
            continue
        fd = os.open(lock, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # released at once: a starting broker may wait
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
    return False


class Report:
    def __init__(self):
        self.partitions = self.segments = self.batches = self.bytes = 0
        self.damaged_batches = self.damaged_segments = self.index_problems = self.torn = 0


def _print_batch(pos: int, hdr: tuple) -> None:
    base, length, epoch, magic, crc, attrs, delta, _base_ts, max_ts, pid, pepoch, seq, count = hdr
    last_seq = seq + delta if seq >= 0 else -1
    ts_type = "LogAppendTime" if attrs & 0x08 else "CreateTime"
    print(f"baseOffset: {base} lastOffset: {base + delta} count: {count} baseSequence: {seq} "
          f"lastSequence: {last_seq} producerId: {pid} producerEpoch: {pepoch} partitionLeaderEpoch: {epoch} "
          f"isTransactional: {bool(attrs & TRANSACTIONAL_MASK)} isControl: {bool(attrs & CONTROL_MASK)} "
          f"position: {pos} {ts_type}: {max_ts} size: {length + 12} magic: {magic} "
          f"compresscodec: {_CODECS[attrs & COMPRESSION_MASK] if attrs & COMPRESSION_MASK < 5 else '?'} "
          f"crc: {crc} isvalid: true")


def _deep(fd: int, pos: int, hdr: tuple, show: bool) -> str:
    """Decode the batch's records; the problem found ("" if none)."""
    data = os.pread(fd, hdr[1] + 12, pos)
    base, last, n = hdr[0], hdr[0] + hdr[6], 0
    try:
        for rec in iter_records(data):
            n += 1
            if not base <= rec.offset <= last:
                return f"record offset {rec.offset} outside the batch's {base}..{last}"
            if show:
                print(f"| offset: {rec.offset} timestamp: {rec.timestamp} "
                      f"keySize: {-1 if rec.key is None else len(rec.key)} "
                      f"valueSize: {-1 if rec.value is None else len(rec.value)} "
                      f"headerKeys: [{','.join(k for k, _ in rec.headers)}]")
    except RecordsError as e:
        return f"records do not decode: {e}"
    if n != hdr[12]:
        return f"{n} records decoded, the header says {hdr[12]}"
    return ""


def _index_problems(seg_path: str, base: int, size: int, batches: dict[int, tuple], damage) -> list[str]:
    """The ``.index`` / ``.timeindex`` of a segment against its good batches (position -> header); entries
    that lead into ``damage`` are not index problems (the batch there is)."""
    problems = []
    stem = seg_path[:-len(".log")]
    by_offset = {hdr[0]: hdr for hdr in batches.values()}
    try:
        idx = open(stem + ".index", "rb").read()
        tix = open(stem + ".timeindex", "rb").read()
    except FileNotFoundError as e:
        return [f"index: {os.path.basename(e.filename)} is missing (start-up rebuilds it)"]
    if len(idx) % OFFSET_ENTRY.size:
        problems.append(f"index: {len(idx)} bytes, not whole {OFFSET_ENTRY.size}-byte entries")
    prev = (0, 0)
    for k, (rel, pos) in enumerate(OFFSET_ENTRY.iter_unpack(idx[:len(idx) - len(idx) % OFFSET_ENTRY.size])):
        where = f"index entry {k} (offset {base + rel}, position {pos})"
        if rel <= prev[0] or pos <= prev[1]:
            problems.append(f"{where}: offsets and positions must rise")
        elif pos >= size:
            problems.append(f"{where}: past the end of the log ({size} bytes)")
        elif any(d.position <= pos < d.resume for d in damage):
            pass
        elif pos not in batches or batches[pos][0] != base + rel:
            problems.append(f"{where}: no batch with that offset starts there")
        prev = (rel, pos)
    if len(tix) % TIME_ENTRY.size:
        problems.append(f"timeindex: {len(tix)} bytes, not whole {TIME_ENTRY.size}-byte entries")
    prev_ts = -1
    for k, (ts, rel) in enumerate(TIME_ENTRY.iter_unpack(tix[:len(tix) - len(tix) % TIME_ENTRY.size])):
        where = f"timeindex entry {k} (timestamp {ts}, offset {base + rel})"
        hdr = by_offset.get(base + rel)
        if ts <= prev_ts:
            problems.append(f"{where}: timestamps must rise")
        elif hdr is None and damage:
            pass
        elif hdr is None or hdr[8] != ts:
            problems.append(f"{where}: no batch with that offset carries that max timestamp")
        prev_ts = ts
    return problems


def check_partition(path: str, args, report: Report) -> None:
    bases = segments_of(path)
    report.partitions += 1
    for k, base in enumerate(bases):
        seg_path = os.path.join(path, f"{base:020d}.log")
        batches: dict[int, tuple] = {}
        deep_problems: list[str] = []
        fd = os.open(seg_path, os.O_RDONLY) if args.deep else -1

        def on_batch(pos, hdr):
            batches[pos] = hdr
            if args.print_batches:
                _print_batch(pos, hdr)
            if args.deep:
                problem = _deep(fd, pos, hdr, args.print_batches)
                if problem:
                    deep_problems.append(f"position {pos} offset {hdr[0]}: {problem}")

        try:
            walk, size = check_segment(seg_path, base, on_batch)
        finally:
            if fd >= 0:
                os.close(fd)
        problems = [f"position {d.position} offset {d.offset}: {d.reason}; {d.resume - d.position} bytes "
                    f"{'up to the end of the file' if d.resume == size else 'up to the next good batch'}"
                    for d in walk.damage]
        damaged = len(walk.damage) + len(deep_problems)
        torn = (k == len(bases) - 1 and len(walk.damage) == 1 and walk.damage[0].resume == size
                and ("cut short" in walk.damage[0].reason or "too few" in walk.damage[0].reason))
        if torn:
            problems[0] += " (a torn tail: start-up recovery truncates it)"
            damaged -= 1
        nxt = bases[k + 1] if k + 1 < len(bases) else None
        if nxt is not None and walk.expected > nxt:
            problems.append(f"offsets run to {walk.expected - 1}, into the next segment (base offset {nxt})")
            damaged += 1
        problems += deep_problems
        index = _index_problems(seg_path, base, size, batches, walk.damage) if batches or size else []
        bad_index = [p for p in index if "is missing" not in p]
        status = "DAMAGED" if damaged or bad_index else "TORN" if torn else "OK"
        first = min((h[0] for h in batches.values()), default=None)
        span = f"offsets {first}..{walk.expected - 1}" if first is not None else "no batches"
        print(f"{status:<8}{seg_path}  batches {walk.batches}  {span}  {size} bytes")
        for p in problems + index:
            print(f"          {p}")
        report.segments += 1
        report.batches += walk.batches
        report.bytes += size
        report.damaged_batches += damaged
        report.index_problems += len(bad_index)
        report.damaged_segments += status == "DAMAGED"
        report.torn += torn


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    report = Report()
    for path in args.paths:
        if not os.path.isdir(path):
            print(f"Error: {path} is not a directory", file=sys.stderr)
            return 2
        if broker_running(path):
            print(f"Warn: a broker is running on {path}: reading is safe, but its active segments may be "
                  f"mid-write (a TORN or damaged tail there may only be a write in progress)", file=sys.stderr)
        for part in partition_dirs(path):
            try:
                check_partition(part, args, report)
            except BrokenPipeError:
                raise
            except OSError as e:
                print(f"Error: cannot read {part}: {e}", file=sys.stderr)
                return 2
    found = report.damaged_batches + report.index_problems
    verdict = (f"{report.damaged_batches} damaged batch(es) and {report.index_problems} index problem(s) in "
               f"{report.damaged_segments} segment(s)") if found else "no damage found"
    torn = f", {report.torn} torn tail(s)" if report.torn else ""
    print(f"Checked {report.partitions} partition(s), {report.segments} segment(s), {report.batches} batches, "
          f"{report.bytes} bytes: {verdict}{torn}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
