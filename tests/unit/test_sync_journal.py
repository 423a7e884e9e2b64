"""The sync journal of the file layer (``SHAREBROKER_SYNC_JOURNAL``) and the power cut modelled from it
(``tests/integration/torture_faults.PowerCut``), on plain files in a child process: what an fsync
covered survives the cut, what none covered is gone, what a failed fsync covered reads as zeros even
after a later fsync succeeded, a ftruncate removes that loss, and a file never fsynced is emptied.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from broker.log import fileio
from tests.integration.torture_faults import PowerCut

SCENARIO = r"""
import errno, os, sys, time
from broker.log import fileio
d = sys.argv[1]
def make(name):
    return fileio.open(os.path.join(d, name), os.O_WRONLY | os.O_CREAT, 0o644)
def fail_fsyncs(on):
    path = os.environ["SHAREBROKER_SYNC_JOURNAL"] + ".faults"
    if on:
        open(path, "w").write("EIO 1 fsync")
    else:
        os.unlink(path)
    time.sleep(0.06)  # the layer reads its faults file at most every 50 ms

synced = make("synced")
fileio.write(synced, b"a" * 100); fileio.fsync(synced); fileio.write(synced, b"b" * 50)
never = make("never")
fileio.write(never, b"c" * 10)
failed = make("failed")
fileio.write(failed, b"d" * 100); fileio.fsync(failed); fileio.write(failed, b"e" * 50)
cut = make("cut")
fileio.write(cut, b"f" * 100); fileio.fsync(cut); fileio.write(cut, b"g" * 50)
fail_fsyncs(True)
for fd in (failed, cut):
    try:
        fileio.fsync(fd)
        raise AssertionError("the fsync did not fail")
    except OSError as e:
        assert e.errno == errno.EIO
fail_fsyncs(False)
fileio.write(failed, b"h" * 30); fileio.fsync(failed)          # fsyncgate: 100..150 stay lost
fileio.ftruncate(cut, 100); os.lseek(cut, 100, 0); fileio.write(cut, b"i" * 30); fileio.fsync(cut)  # cut off, written again
assert fileio.fsync is not os.fsync
"""


def _run_journalled(tmp_path, scenario: str) -> tuple[Path, PowerCut]:
    """``scenario`` in a child process with the journal on, writing in ``tmp_path/data``."""
    data = tmp_path / "data"
    data.mkdir()
    cut = PowerCut(tmp_path / "journal")
    subprocess.run([sys.executable, "-c", scenario, str(data)], check=True, timeout=60,
                   env={**os.environ, **cut.env, "PYTHONPATH": os.getcwd()})
    return data, cut


def test_power_cut_keeps_what_fsyncs_covered(tmp_path):
    data, cut = _run_journalled(tmp_path, SCENARIO)
    (data / "outside").write_bytes(b"x" * 5)  # not through the layer: never synced
    summary = cut.cut(data)
    assert (data / "synced").read_bytes() == b"a" * 100
    assert (data / "never").read_bytes() == b""
    assert (data / "outside").read_bytes() == b""
    assert (data / "failed").read_bytes() == b"d" * 100 + bytes(50) + b"h" * 30
    assert (data / "cut").read_bytes() == b"f" * 100 + b"i" * 30
    assert "50 bytes zeroed" in summary, summary
    # what is left is on disk: a second cut with nothing new changes nothing
    cut.cut(data)
    assert (data / "failed").read_bytes() == b"d" * 100 + bytes(50) + b"h" * 30


def test_the_journal_is_off_unless_asked_for():
    if not os.environ.get(fileio.SYNC_JOURNAL_ENV):
        assert (fileio.open, fileio.write, fileio.fsync, fileio.ftruncate) == (
            os.open, os.write, os.fsync, os.ftruncate)


SYNCFS_SCENARIO = r"""
import os, sys
from broker.log import fileio
d = sys.argv[1]
fd = fileio.open(os.path.join(d, "merged"), os.O_WRONLY | os.O_CREAT, 0o644)
fileio.write(fd, b"a" * 100)
dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
fileio.syncfs(dfd)                 # covers every file below d as it was when it started
fileio.write(fd, b"b" * 50)         # after it: not covered
"""


def test_a_syncfs_under_the_journal_covers_every_file_below_its_directory(tmp_path):
    data, cut = _run_journalled(tmp_path, SYNCFS_SCENARIO)
    cut.cut(data)
    assert (data / "merged").read_bytes() == b"a" * 100
