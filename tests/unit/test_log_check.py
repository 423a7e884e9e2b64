"""``sharebroker-log-check`` (admin/log_check.py) on data directories written by ``PartitionLog``."""

import os

from admin.log_check import main
from broker.log.segment import OFFSET_ENTRY
from tests.unit.test_log_damage import fill, flip, seg_file


def run(capsys, *args):
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_clean_directory_passes_and_a_torn_tail_is_no_damage(tmp_path, capsys):
    fill(tmp_path / "t-0", clean=True)
    bases = fill(tmp_path / "u-3", clean=False)
    code, out, _ = run(capsys, tmp_path)
    assert code == 0 and "no damage found" in out and out.count("\nOK ") + out.startswith("OK ") == 6
    last = seg_file(tmp_path / "u-3", bases[-1])
    os.truncate(last, last.stat().st_size - 20)  # what a crash mid-write leaves
    code, out, _ = run(capsys, tmp_path / "u-3")
    assert code == 0 and f"TORN    {last}" in out and "1 torn tail(s)" in out


def test_damaged_batches_and_index_entries_are_found(tmp_path, capsys):
    path = tmp_path / "t-0"
    bases = fill(path, clean=True)
    flip(seg_file(path, bases[1]), 300)
    index = path / f"{bases[0]:020d}.index"
    entries = bytearray(index.read_bytes())
    assert len(entries) >= OFFSET_ENTRY.size
    entries[7] ^= 0x01  # the first entry's position
    index.write_bytes(bytes(entries))
    code, out, _ = run(capsys, path)
    assert code == 1
    assert f"DAMAGED {seg_file(path, bases[1])}" in out and f"offset {bases[1] + 2}: CRC32C mismatch" in out
    assert f"DAMAGED {seg_file(path, bases[0])}" in out and "index entry 0" in out
    assert "1 damaged batch(es) and 1 index problem(s) in 2 segment(s)" in out


def test_bad_paths_are_usage_errors(tmp_path, capsys):
    code, _, err = run(capsys, tmp_path / "missing")
    assert code == 2 and "is not a directory" in err
