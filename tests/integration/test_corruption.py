"""Damage at rest (docs/durability.md, "Corruption at rest"; broker/log/damage.py).

Real broker subprocesses, confluent-kafka consumers with ``check.crcs=true``. Kafka serves a sealed
segment's bytes as they are: a consumer stops at a batch that fails its CRC32C until the application
seeks past it, and Kafka's ``LogLoader`` drops every segment after one that recovery truncated.
Here: a damaged batch a fetch meets is logged (path, offset), counted
(``sharebroker_log_corrupt_batches_total``) and skipped, so consumers go on past a gap; a sealed
segment cut under the running broker is noticed and reads go on with the next segment; recovery
after kill -9 keeps the segments after a damaged one; ``sharebroker-log-check`` finds the damage
offline.
"""
from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from tests.integration.test_segment_roll import produce_batches
from tests.integration.test_share_retention import share_consume
from tests.support import create_topic, set_group_configs, unique, until

ROOT = Path(__file__).resolve().parents[2]
SMALL_SEGMENTS = {"segment_index_bytes": 80, "index_interval_bytes": 0}  # 11 batches per segment
N = 40


def segments(data_dir: Path, topic: str) -> list[Path]:
    return sorted((data_dir / f"{topic}-0").glob("*.log"))


def batch_positions(path: Path) -> list[tuple[int, int, int]]:
    """(position, base offset, size) of every batch of a segment file."""
    data, out, pos = path.read_bytes(), [], 0
    while pos + 12 <= len(data):
        base, length = int.from_bytes(data[pos:pos + 8], "big"), int.from_bytes(data[pos + 8:pos + 12], "big")
        out.append((pos, base, length + 12))
        pos += length + 12
    return out


def flip(path: Path, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0xFF]))


def consume_all(bootstrap: str, topic: str, last: int, timeout: float = 30.0) -> tuple[dict[int, bytes], list]:
    """Offset -> value of what a consumer reading from offset 0 gets until it has seen ``last``;
    fails the test if it does not get there (stuck at a damaged batch)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"), "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "check.crcs": True, "fetch.error.backoff.ms": 50})
    got, errors = {}, []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout
        while last not in got:
            assert time.monotonic() < deadline, f"consumer stuck after {max(got, default=None)}: {errors[-3:]}"
            for m in c.consume(100, 0.2):
                if m.error():
                    errors.append(str(m.error()))
                else:
                    got[m.offset()] = m.value()
    finally:
        c.close()
    return got, errors


def metric(b, name: str, topic: str) -> float | None:
    with urllib.request.urlopen(b.metrics_url, timeout=10) as r:
        text = r.read().decode()
    for line in text.splitlines():
        if line.startswith(name + "{") and f'topic="{topic}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def log_check(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "admin.log_check", *map(str, args)], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)


def test_a_damaged_batch_in_a_sealed_segment_is_logged_counted_and_skipped(broker_factory):
    b = broker_factory({"sharebroker.metrics.listener": "127.0.0.1:0"})
    topic = create_topic(b.bootstrap, **SMALL_SEGMENTS)
    produce_batches(b.bootstrap, topic, N, int(time.time() * 1000))
    segs = segments(b.data_dir, topic)
    assert len(segs) >= 3
    pos, bad, size = batch_positions(segs[1])[4]
    flip(segs[1], pos + size - 3)  # inside the record's value: only the CRC32C notices
    assert log_check(b.data_dir).returncode == 1  # readable while the broker runs

    got, _errors = consume_all(b.bootstrap, topic, N - 1)
    assert sorted(got) == [o for o in range(N) if o != bad]  # the consumer gets past the damaged batch
    assert all(got[o] == b"record-%04d" % o for o in got)
    line = until(lambda: next((x for x in b.log_lines if "damaged batch in" in x), None), 10, "the log line")
    assert str(segs[1]) in line and f"(offset {bad})" in line and "CRC32C mismatch" in line
    assert metric(b, "sharebroker_log_corrupt_batches_total", topic) == 1
    got, errors = consume_all(b.bootstrap, topic, N - 1)  # a second reader: skipped from the start
    assert sorted(got) == [o for o in range(N) if o != bad] and not errors
    assert sum("damaged batch in" in x for x in b.log_lines) == 1  # logged once


def test_a_sealed_segment_cut_under_the_running_broker_is_noticed(broker_factory):
    b = broker_factory({"sharebroker.metrics.listener": "127.0.0.1:0"})
    topic = create_topic(b.bootstrap, **SMALL_SEGMENTS)
    produce_batches(b.bootstrap, topic, N, int(time.time() * 1000))
    segs = segments(b.data_dir, topic)
    batches = batch_positions(segs[1])
    pos, cut, size = batches[5]
    with open(segs[1], "r+b") as f:
        f.truncate(pos + size // 2)  # mid-batch
    next_base = int(segs[2].stem)
    got, _errors = consume_all(b.bootstrap, topic, N - 1)
    assert sorted(got) == [o for o in range(N) if not cut <= o < next_base]
    until(lambda: any("was truncated under the running broker" in x and str(segs[1]) in x for x in b.log_lines),
          10, "the log line")
    assert metric(b, "sharebroker_log_truncated_segments_total", topic) == 1


def test_kill9_with_damage_in_an_unflushed_segment_keeps_the_later_segments(broker_factory):
    b = broker_factory()
    topic = create_topic(b.bootstrap, **SMALL_SEGMENTS)
    produce_batches(b.bootstrap, topic, N, int(time.time() * 1000))
    b.kill9()
    part = b.data_dir / f"{topic}-0"
    (part / "checkpoint").write_text("v1 0 0\n")  # as if no fsync had run: every segment is recovered
    segs = segments(b.data_dir, topic)
    assert len(segs) >= 4
    pos, bad, size = batch_positions(segs[1])[3]
    flip(segs[1], pos + size - 3)
    check = log_check(b.data_dir)
    assert check.returncode == 1 and f"DAMAGED {segs[1]}" in check.stdout, check.stdout
    assert f"offset {bad}: CRC32C mismatch" in check.stdout

    b.start()
    gap = range(bad, int(segs[2].stem))  # the damaged batch and the rest of its segment
    got, _errors = consume_all(b.bootstrap, topic, N - 1)
    assert sorted(got) == [o for o in range(N) if o not in gap]  # later segments kept, log end unchanged
    assert all(got[o] == b"record-%04d" % o for o in got)
    line = next(x for x in b.log_lines if "damaged segment" in x)
    assert str(segs[1]) in line and f"offsets {gap[0]}..{gap[-1]} are a gap" in line
    assert produce_batches(b.bootstrap, topic, 1, int(time.time() * 1000)) == [N]  # the next offset is right


def test_log_check_passes_a_clean_data_dir_and_prints_batches(broker_factory):
    b = broker_factory()
    topic = create_topic(b.bootstrap, **SMALL_SEGMENTS)
    produce_batches(b.bootstrap, topic, 15, int(time.time() * 1000))
    running = log_check(b.data_dir)
    assert running.returncode == 0, running.stdout + running.stderr
    assert "a broker is running" in running.stderr
    b.stop()
    done = log_check("--print", "--deep", b.data_dir / f"{topic}-0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no damage found" in done.stdout and "a broker is running" not in done.stderr
    assert len(re.findall(r"^baseOffset: \d+ lastOffset", done.stdout, re.M)) == 15
    assert len(re.findall(r"^\| offset: \d+", done.stdout, re.M)) == 15


def test_a_share_group_reads_past_a_damaged_batch(broker_factory):
    """ShareFetch reads through the same log reads: the skipped batch is a gap of offsets for the
    share partition (as a batch the cleaner emptied), never acquired; every other record is delivered."""
    b = broker_factory()
    topic = create_topic(b.bootstrap, **SMALL_SEGMENTS)
    produce_batches(b.bootstrap, topic, N, int(time.time() * 1000))
    segs = segments(b.data_dir, topic)
    pos, bad, size = batch_positions(segs[1])[2]
    flip(segs[1], pos + size - 3)
    group = unique("sg")
    set_group_configs(b.bootstrap, group, share_auto_offset_reset="earliest")
    got = share_consume(b.bootstrap, group, topic, N - 1)
    assert sorted(set(got)) == [o for o in range(N) if o != bad]
    until(lambda: any("damaged batch in" in x and f"(offset {bad})" in x for x in b.log_lines), 10, "the log line")
