"""The faults of the storage torture (``storage_torture.py``): the small disk it mounts and the faults
it injects there (disk full, read-only, failed disk), the open-file limit of a running broker, and the
power-cut model over the broker's sync journal (``broker/log/fileio.py``). Kept apart for size."""
from __future__ import annotations

import fcntl
import os
import random
import resource
import struct
import subprocess
import time
from pathlib import Path

LIVE_KINDS = ("enospc", "emfile")
REPAIR_KINDS = ("readonly", "eio")
POWERCUT = "powercut"

FIFREEZE, FITHAW = 0xC0045877, 0xC0045878
EXT4_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32); flags 0 = sync, then shut down


class MountRefused(Exception):
    """The machine does not let this process mount a tmpfs (not root, no CAP_SYS_ADMIN, ...)."""


def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=60)


# ------------------------------------------------------------------------------------------ the disk
class Disk:
    """The tmpfs (and ext4 image) the broker's data directory lives on, and the faults it can take."""

    def __init__(self, root: Path, tmpfs_mb: int = 400, image_mb: int = 360):
        self.root = Path(root)
        self.tmpfs = self.root / "tmpfs"
        self.image = self.tmpfs / "disk.img"
        self.ext4 = self.tmpfs / "ext4"
        self.tmpfs_mb, self.image_mb = tmpfs_mb, image_mb
        self.fs: Path | None = None  # the mounted filesystem the data directory is on
        self.kinds: tuple[str, ...] = ()
        self.note = ""
        self._tmpfs_mounted = self._ext4_mounted = False
        self._filler: Path | None = None

    @property
    def data_dir(self) -> Path:
        return self.fs / "data"

    def mount(self) -> "Disk":
        if os.geteuid() != 0:
            raise MountRefused("mounting a tmpfs needs root")
        self.tmpfs.mkdir(parents=True, exist_ok=True)
        r = _run("mount", "-t", "tmpfs", "-o", f"size={self.tmpfs_mb}m", "sharebroker-torture", str(self.tmpfs))
        if r.returncode:
            raise MountRefused(f"mount -t tmpfs failed: {r.stderr.strip()}")
        self._tmpfs_mounted = True
        self.fs, self.kinds = self.tmpfs, LIVE_KINDS
        try:
            with open(self.image, "wb") as f:
                f.truncate(self.image_mb << 20)
            self.ext4.mkdir()
            for cmd in (("mkfs.ext4", "-q", "-F", "-m", "0", str(self.image)),
                        ("mount", "-o", "loop,errors=remount-ro", str(self.image), str(self.ext4))):
                r = _run(*cmd)
                if r.returncode:
                    raise OSError(f"{cmd[0]}: {r.stderr.strip()}")
            self._ext4_mounted = True
            self.fs, self.kinds = self.ext4, LIVE_KINDS + REPAIR_KINDS
        except (OSError, subprocess.SubprocessError) as e:  # no loop devices: live faults on the tmpfs only
            self.note = f"no ext4 loop filesystem ({e}): readonly and eio faults are not injected"
            self.image.unlink(missing_ok=True)
        self.data_dir.mkdir()
        return self

    def _device(self) -> str:
        for line in open("/proc/mounts"):
            dev, mnt = line.split()[:2]
            if mnt == str(self.ext4):
                return os.path.basename(dev)
        raise RuntimeError(f"{self.ext4} is not mounted")

    # ---- faults
    def fill(self, slack: int = 0) -> str:
        """A filler file takes every free block but ``slack`` bytes (root included: ``-m 0``), which the
        broker then uses up itself: the disk fills up in the middle of its writes, as a real one does."""
        self._filler = self.fs / "filler"
        st = os.statvfs(self.fs)
        fd = os.open(self._filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            free = st.f_bavail * st.f_frsize
            try:
                os.posix_fallocate(fd, 0, max(free - slack - (256 << 10), 4096))
            except OSError:
                pass
            os.lseek(fd, 0, os.SEEK_END)
            chunk = b"\0" * 4096
            try:
                while os.statvfs(self.fs).f_bavail * st.f_frsize > slack:
                    os.write(fd, chunk)
            except OSError as e:
                if e.errno != 28:
                    raise
        finally:
            os.close(fd)
        left = os.statvfs(self.fs).f_bavail * st.f_frsize
        return f"filler {os.path.getsize(self._filler) >> 20} MiB, {left >> 10} KiB left"

    def unfill(self) -> None:
        if self._filler is not None:
            self._filler.unlink(missing_ok=True)
            self._filler = None

    def make_readonly(self) -> str:
        dev = self._device()
        fd = os.open(self.ext4, os.O_RDONLY)
        try:
            fcntl.ioctl(fd, FIFREEZE, 0)
            try:
                with open(f"/sys/fs/ext4/{dev}/trigger_fs_error", "w") as f:
                    f.write("storage torture\n")
            finally:
                fcntl.ioctl(fd, FITHAW, 0)
        finally:
            os.close(fd)
        return f"ext4 error on {dev}: remounted read-only"

    def shut_down(self) -> str:
        fd = os.open(self.ext4, os.O_RDONLY)
        try:
            fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", 0))
        finally:
            os.close(fd)
        return f"ext4 on {self._device()} shut down: EIO from now on"

    def repair(self, deadline_s: float = 30.0) -> str:
        """umount, e2fsck -fy, mount: what an operator does (the broker must be stopped)."""
        end = time.monotonic() + deadline_s
        while True:
            r = _run("umount", str(self.ext4))
            if r.returncode == 0:
                break
            if time.monotonic() > end:
                raise RuntimeError(f"umount {self.ext4}: {r.stderr.strip()}")
            time.sleep(0.1)  # a process that just exited may still hold a file for a moment
        fsck = _run("e2fsck", "-fy", str(self.image))
        if fsck.returncode not in (0, 1):  # 1: errors corrected
            raise RuntimeError(f"e2fsck exit {fsck.returncode}: {fsck.stdout[-2000:]}")
        r = _run("mount", "-o", "loop,errors=remount-ro", str(self.image), str(self.ext4))
        if r.returncode:
            raise RuntimeError(f"mount after fsck: {r.stderr.strip()}")
        return f"e2fsck exit {fsck.returncode}"

    def unmount(self) -> None:
        self.unfill()
        if self._ext4_mounted:
            if _run("umount", str(self.ext4)).returncode:
                _run("umount", "-l", str(self.ext4))
            self._ext4_mounted = False
        if self._tmpfs_mounted:
            if _run("umount", str(self.tmpfs)).returncode:
                _run("umount", "-l", str(self.tmpfs))
            self._tmpfs_mounted = False


class PowerCut:
    """A power cut modelled from the broker's sync journal (``broker/log/fileio.py``, ``SHAREBROKER_SYNC_JOURNAL``).

    The broker (and its cleaner worker) run with the journal on: every create, fsync (succeeded, with the
    size it covers, or failed) and ftruncate through the file layer is a line keyed by inode. ``cut``, after
    kill -9, makes the data directory what a power cut would leave:

    - every regular file is cut to the size its inode had when its last successful fsync started (0 when it
      was never fsynced since it was created): what no fsync covered is gone;
    - the bytes between the last successful fsync and the size at a *failed* fsync read as zeros even when
      a later fsync succeeded (after a failed fsync the kernel may have marked the pages clean without
      writing them, PostgreSQL's "fsyncgate"), unless an ftruncate cut them off meanwhile.

    Limits (not modelled): directories (a file created, renamed or unlinked counts as durable at once:
    ``atomic_write``'s tmp file is fsynced under its inode before the rename, which is what is checked);
    an unsynced ftruncate counts as durable; bytes rewritten in place after a failed fsync still read as
    zeros; writes not made through the file layer (the broker's lock file) count as never synced. Two
    fsyncs of one file finishing out of order count as the larger size (it only ever keeps more).
    ``faults`` arms random EIO/ENOSPC on the broker's writes and fsyncs (``PATH.faults``) until ``lift``.
    """

    def __init__(self, journal: Path):
        self.journal = Path(journal)
        self.journal.touch()
        self.pos = 0
        self.state: dict[tuple[int, int], list] = {}  # (dev, ino) -> [synced size, [(start, end) lost]]

    @property
    def env(self) -> dict[str, str]:
        return {"SHAREBROKER_SYNC_JOURNAL": str(self.journal)}

    def faults(self, error: str, rate: float, ops: str) -> str:
        Path(f"{self.journal}.faults").write_text(f"{error} {rate} {ops}\n")
        return f"random {error} on {rate:.1%} of {ops}"

    def lift(self) -> None:
        Path(f"{self.journal}.faults").unlink(missing_ok=True)

    def _read(self) -> None:
        with open(self.journal, "rb") as f:
            f.seek(self.pos)
            data = f.read()
        end = data.rfind(b"\n") + 1  # a line being written as the broker was killed: read at the next cut
        self.pos += end
        for line in data[:end].decode().splitlines():
            what, dev, ino, *size = line.split()
            key = (int(dev), int(ino))
            if what == "new":
                self.state[key] = [0, []]
                continue
            st = self.state.setdefault(key, [0, []])
            n = int(size[0])
            if what == "ok":
                st[0] = max(st[0], n)
            elif what == "fail":
                if n > st[0]:
                    st[1].append((st[0], n))
            else:  # trunc
                st[0] = min(st[0], n)
                st[1] = [(a, min(b, n)) for a, b in st[1] if a < n]

    def cut(self, data_dir: Path) -> str:
        """After kill -9: the data directory as a power cut leaves it (the class docstring)."""
        self._read()
        files = dropped = zeroed = 0
        for path in sorted(Path(data_dir).rglob("*")):
            if not path.is_file() or path.is_symlink():
                continue
            st = path.stat()
            key = (st.st_dev, st.st_ino)
            synced, lost = self.state.get(key, (0, []))
            keep = min(st.st_size, synced)
            with open(path, "r+b") as f:
                if keep < st.st_size:
                    f.truncate(keep)
                    dropped += st.st_size - keep
                    files += 1
                for a, b in lost:
                    b = min(b, keep)
                    if a < b:
                        f.seek(a)
                        f.write(bytes(b - a))
                        zeroed += b - a
            self.state[key] = [keep, []]  # what is left is on disk
        return f"power cut: {files} files cut, {dropped} unsynced bytes dropped, {zeroed} bytes zeroed"


def child_pids(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def wait_gone(pids: list[int], deadline_s: float = 10.0) -> None:
    end = time.monotonic() + deadline_s
    for pid in pids:
        while Path(f"/proc/{pid}").exists() and time.monotonic() < end:
            try:  # a zombie until its parent (init, the broker being dead) reaps it: gone for our purpose
                if Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z"):
                    break
            except (OSError, IndexError):
                break
            time.sleep(0.01)


def limit_open_files(pid: int, rng: random.Random) -> tuple[str, tuple[int, int]]:
    """RLIMIT_NOFILE of ``pid`` lowered to about what it has open; returns what to restore."""
    before = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    n_open = len(os.listdir(f"/proc/{pid}/fd"))
    new = max(n_open + rng.randint(-4, 2), 16)  # below what is open: every new open fails until lifted
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (new, before[1]))
    return f"RLIMIT_NOFILE {before[0]} -> {new} ({n_open} open)", before


# ------------------------------------------------------------------------------------------ the ledger
