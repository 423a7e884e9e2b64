"""All partition logs of the broker plus topic metadata, in one data directory.

Layout::

    data_dir/.lock                  exclusive flock while a broker runs
    data_dir/.clean_shutdown        written by close(), removed at start-up
    data_dir/meta.properties        format version, node id, cluster id (``meta_properties.py``),
                                   checked before anything is written, written once
    data_dir/meta/cluster_id        generated once
    data_dir/meta/topics/<topic id hex>.json  name, partition count, config overrides
                                   (named by id: a 249-character topic name plus a suffix would pass
                                   the file system's 255-byte limit)
    data_dir/<topic>-<partition>/   one PartitionLog each

Metadata files are replaced atomically (tmp, fsync, rename, fsync dir). CreateTopics
makes a topic's partition files on the worker (``create_topic_staged``). A
topic is deleted by removing its metadata first, then its directories
(renamed ``*-delete`` before removal, finished at next start if interrupted).
Directories that belong to no topic are removed at start-up with a warning.

No tasks are created here: the server calls ``maintenance()`` from a loop timer.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import shutil
import time
import uuid
from typing import Callable, Iterable, Mapping

from .config import LogConfig, validate_topic_configs
from . import meta_properties
from .meta_properties import new_topic_id, uuid_to_base64  # noqa: F401 - re-exported (topic ids)
from .errors import KAFKA_STORAGE_ERROR, UNKNOWN_TOPIC_OR_PARTITION, DataDirFormatError, DataDirLockedError, LogError
from .background import Background, Inline
from .faults import FD_RESERVE, OPEN_FILES, STORAGE
from . import fileio
from .files import atomic_write, fsync_dir, log_bg_error
from .loading import stage_partition, unstage_partition
from .partition_log import DEFAULT_PRODUCER_ID_EXPIRATION_MS, PartitionLog

log = logging.getLogger(__name__)

INVALID_TOPIC_EXCEPTION = 17
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37

_TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_PARTITION_DIR_RE = re.compile(r"^(.+)-(\d+)$")
DEFAULT_PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS = 600000
TOPIC_FORMAT_VERSION = 1  # ``version`` in meta/topics/<id>.json
STAGING_SUFFIX = "-staging"  # data_dir/<hex>-staging/<p>/: a topic's partitions made on the admin worker
OPEN_PER_CALLBACK = 16  # deleted partitions' directories renamed away per event-loop callback
# partitions made, or deleted partitions' directories removed, per admin-worker job: other topic work
# (another CreateTopics, a topic's metadata sync) submitted meanwhile runs between two jobs
STAGE_PER_JOB = 16


def validate_topic_name(name: str) -> None:
    if not _TOPIC_RE.match(name or "") or name in (".", ".."):
        raise LogError(INVALID_TOPIC_EXCEPTION, f"Topic name {name!r} is illegal")


class TopicInfo:
    __slots__ = ("name", "topic_id", "configs", "logs", "wire")

    def __init__(self, name: str, topic_id: uuid.UUID, configs: dict[str, str]):
        self.name = name
        self.topic_id = topic_id
        self.configs = configs  # overrides only, Kafka names -> string values
        self.logs: list[PartitionLog] = []
        # The Metadata handler's encoded answers for this topic, keyed by everything they depend on
        # (broker.handlers.metadata.topic_bytes); written and read only there, dies with the topic.
        self.wire: dict = {}

    @property
    def partitions(self) -> int:
        return len(self.logs)

    def to_json(self, partitions: int | None = None, configs: Mapping[str, str] | None = None) -> bytes:
        """The metadata file's content; ``partitions`` and ``configs``: what to write, if not the current."""
        return json.dumps({"version": TOPIC_FORMAT_VERSION, "name": self.name, "topic_id": str(self.topic_id),
                           "partitions": len(self.logs) if partitions is None else partitions,
                           "configs": self.configs if configs is None else configs}, sort_keys=True).encode()

    def __repr__(self) -> str:
        return f"TopicInfo({self.name}, id={self.topic_id}, partitions={len(self.logs)})"


class LogManager:
    def __init__(self, data_dir: str, default_configs: Mapping[str, object] | None = None, *,
                 clock: Callable[[], int] | None = None,
                 producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
                 producer_id_expiration_check_interval_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS,
                 node_id: int = 1, durable: bool = False, syncfs: bool = True):
        self.data_dir = os.path.abspath(data_dir)
        # durable mode: appends are answered and shown to consumers once fsynced (PartitionLog, README "Durability")
        self.durable = durable
        # False (``sharebroker.log.syncfs.enable``): no syncfs(2), which would also write other programs' dirty
        # data on a shared file system: queued fsyncs are not merged, close fsyncs each partition
        self.syncfs = syncfs
        self.on_durable: Callable[[str, int], None] | None = None  # (topic, partition): its high watermark moved
        # Both raise DataDirFormatError before anything in the directory is written.
        stored = meta_properties.verify(self.data_dir, node_id)
        self._meta = os.path.join(self.data_dir, "meta")
        self._topics_dir = os.path.join(self._meta, "topics")
        topic_metas = self._read_topic_metas()
        self.clock = clock or (lambda: int(time.time() * 1000))
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producer_id_expiration_check_interval_ms = producer_id_expiration_check_interval_ms
        self.background: Background | Inline = Inline()  # start_background() moves file syncs off the loop
        # the files of whole topics (a new topic's partitions and syncs, deleted topics' directories, topic
        # metadata) on a second worker: the fsyncs acknowledgements wait for never queue behind them
        self.admin: Background | Inline = Inline()
        self._defaults = dict(default_configs or {})
        LogConfig.from_mapping(self._defaults)  # fail early on bad broker defaults
        self._topics: dict[str, TopicInfo] = {}
        self._by_id: dict[uuid.UUID, TopicInfo] = {}
        self._creating: set[str] = set()  # names of topics create_topic_staged is making (reserved)
        # topic name -> done when the change of it under way (added partitions, deletion) is answered
        self._changes: dict[str, asyncio.Future] = {}
        self._deleting: dict[str, list[str]] = {}  # deleted topics' directories still to rename away (_rename_away)
        os.makedirs(self.data_dir, exist_ok=True)
        self._lock_fd = self._lock()
        earlier = stored is None and meta_properties.has_data(self.data_dir)
        os.makedirs(self._topics_dir, exist_ok=True)
        self.cluster_id = self._load_cluster_id(stored.cluster_id if stored else None)
        if stored is None:
            meta_properties.write(self.data_dir, meta_properties.MetaProperties(
                node_id, self.cluster_id, meta_properties.new_directory_id()))
            if earlier:
                log.info("data directory %s: written by a release before %s; adopted as format 1",
                         self.data_dir, meta_properties.FILE)
        marker = os.path.join(self.data_dir, ".clean_shutdown")
        clean = os.path.exists(marker)
        if clean:
            os.unlink(marker)
            fsync_dir(self.data_dir)
        self._load_topics(topic_metas, clean)
        self._last_producer_expiry = self.clock()

    def start_background(self, loop=None) -> Background:
        """From now on run fsyncs, checkpoint syncs and segment file work on one worker thread (returned),
        and the files of whole topics (``self.admin``: CreateTopics' partitions and syncs, deleted topics'
        directories, topic metadata) on a second one, so that a produce's fsync never waits behind a
        1,000-partition topic's file work.

        Call once from the event loop after start-up (``logs.start_background()``);
        ``close()`` drains and stops them. Without it everything stays synchronous.
        """
        if not self.background.threaded:
            loop = loop or asyncio.get_running_loop()
            # partitions' queued fsyncs: one syncfs
            self.background = Background(loop, merge_in=self.data_dir if self.syncfs else None)
            self.admin = Background(loop, name="log-admin")
            for plog in self.all_logs():
                plog.set_background(self.background)
        return self.background

    def barrier(self):
        """Awaitable: every fsync / metadata sync / removal requested so far has finished."""
        if not self.admin.threaded:
            return self.background.barrier()
        return asyncio.gather(self.background.barrier(), self.admin.barrier())

    # ------------------------------------------------------------ start-up
    def _lock(self) -> int:
        path = os.path.join(self.data_dir, ".lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise DataDirLockedError(f"data directory {self.data_dir} is in use by another broker process "
                                     f"(lock held on {path})") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        return fd

    def _load_cluster_id(self, stored: str | None) -> str:
        """``meta/cluster_id``; if missing, the one ``meta.properties`` names, else a new one."""
        path = os.path.join(self._meta, "cluster_id")
        try:
            with open(path) as f:
                cid = f.read().strip()
            if cid:
                return cid
        except FileNotFoundError:
            pass
        cid = stored or uuid_to_base64(uuid.uuid4())
        atomic_write(path, (cid + "\n").encode())
        return cid

    def _read_topic_metas(self) -> list[dict]:
        """Every topic's metadata file, a version this release does not know refused; leftover tmp files
        are left for ``_load_topics``."""
        metas = []
        try:
            names = sorted(os.listdir(self._topics_dir))
        except FileNotFoundError:
            return metas
        for name in names:
            if name.endswith(".tmp"):
                continue
            path = os.path.join(self._topics_dir, name)
            with open(path, "rb") as f:
                meta = json.load(f)
            version = meta.get("version", 1)  # files of releases before the field are version 1
            if version != TOPIC_FORMAT_VERSION:
                raise DataDirFormatError(f"{path}: version={version} is a topic metadata format this release "
                                         f"does not know (it reads version={TOPIC_FORMAT_VERSION})")
            metas.append(meta)
        return metas

    def _load_topics(self, metas: list[dict], clean: bool) -> None:
        for name in os.listdir(self._topics_dir):
            if name.endswith(".tmp"):
                os.unlink(os.path.join(self._topics_dir, name))
        for meta in metas:
            info = TopicInfo(meta["name"], uuid.UUID(meta["topic_id"]), dict(meta.get("configs", {})))
            cfg = self._config_for(info.configs)
            for p in range(int(meta["partitions"])):
                info.logs.append(self._open_log(info.name, p, cfg, clean))
            self._topics[info.name] = info
            self._by_id[info.topic_id] = info
        for entry in os.listdir(self.data_dir):
            full = os.path.join(self.data_dir, entry)
            if not os.path.isdir(full) or entry == "meta":
                continue
            if entry.endswith(("-delete", STAGING_SUFFIX)):
                shutil.rmtree(full, ignore_errors=True)
                continue
            m = _PARTITION_DIR_RE.match(entry)
            if m and not (m.group(1) in self._topics and int(m.group(2)) < self._topics[m.group(1)].partitions):
                log.warning("removing directory %s: it belongs to no known topic partition", full)
                self._remove_dir(full)

    def _open_log(self, topic: str, partition: int, cfg: LogConfig, clean: bool, staged: bool = False) -> PartitionLog:
        """Open (load or create) one partition; then the segment files open are trimmed to the bound
        (``faults.OpenFiles``: a load holds no read's descriptor), so loading or creating any number
        of partitions keeps at most that many open."""
        def durable() -> None:
            if self.on_durable is not None:
                self.on_durable(topic, partition)
        plog = PartitionLog(os.path.join(self.data_dir, f"{topic}-{partition}"), topic, partition, cfg,
                            clock=self.clock, clean_shutdown=clean,
                            producer_id_expiration_ms=self.producer_id_expiration_ms,
                            background=self.background if self.background.threaded else None,
                            durable=self.durable, on_durable=durable, staged=staged)
        OPEN_FILES.trim()
        return plog

    def _config_for(self, overrides: Mapping[str, object]) -> LogConfig:
        return LogConfig.from_mapping(self._defaults, overrides)

    def _remove_dir(self, path: str) -> None:
        # A short name: "<topic>-<partition>.<hex>-delete" passes 255 bytes for long topic names.
        # The rename is immediate (the name is free for a new topic at once); the removal of the
        # files can take long and runs on the background worker (a leftover is removed at start-up).
        self._remove_doomed([self._rename_doomed(path)])

    @staticmethod
    def _rename_doomed(path: str) -> str:
        doomed = os.path.join(os.path.dirname(path), f"{uuid.uuid4().hex}-delete")
        os.rename(path, doomed)
        return doomed

    def _remove_doomed(self, paths: list[str]) -> None:
        """Remove renamed directories on the admin worker, ``STAGE_PER_JOB`` per job, the next job
        submitted when one is done (a topic of thousands of partitions would hold the topic work queued
        after it for seconds). A removal left unfinished at shutdown is done at the next start."""
        if not self.admin.threaded:
            for path in paths:
                shutil.rmtree(path, ignore_errors=True)
            return
        piece, rest = paths[:STAGE_PER_JOB], paths[STAGE_PER_JOB:]

        def remove() -> None:
            for path in piece:
                shutil.rmtree(path, ignore_errors=True)
        self.admin.submit(remove, lambda _r, _e: self._remove_doomed(rest) if rest else None)

    def _meta_path(self, info: TopicInfo) -> str:
        return os.path.join(self._topics_dir, f"{info.topic_id.hex}.json")

    def _persist(self, info: TopicInfo) -> None:
        atomic_write(self._meta_path(info), info.to_json(), self.admin)

    # --------------------------------------------------------------- topics
    @property
    def topics(self) -> Mapping[str, TopicInfo]:
        return self._topics

    def topic(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID | bytes) -> TopicInfo | None:
        if isinstance(topic_id, (bytes, bytearray)):
            topic_id = uuid.UUID(bytes=bytes(topic_id))
        return self._by_id.get(topic_id)

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        info = self._topics.get(topic)
        if info is None or not 0 <= partition < len(info.logs):
            return None
        return info.logs[partition]

    def create_topic(self, name: str, partitions: int, configs: Mapping[str, object] | None = None,
                     topic_id: uuid.UUID | None = None) -> TopicInfo:
        """Create a topic; raises LogError (17/36/37/56) or ConfigError (40): all or nothing."""
        overrides = self._check_new_topic(name, partitions, configs)
        self._finish_deleting(name)
        info = TopicInfo(name, topic_id or new_topic_id(), overrides)
        cfg = self._config_for(overrides)
        self._add_logs(info, partitions, cfg)
        self._persist_or_undo(info, 0)
        self._topics[name] = info
        self._by_id[info.topic_id] = info
        return info

    def _check_new_topic(self, name: str, partitions: int, configs: Mapping[str, object] | None) -> dict[str, str]:
        """What a new topic must pass (LogError 17/36/37, ConfigError 40); returns its config overrides."""
        FD_RESERVE.refill()  # descriptors may be back since the reserve last made room
        validate_topic_name(name)
        if name in self._topics or name in self._creating:
            raise LogError(TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        if partitions < 1:
            raise LogError(INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
        overrides = {k: str(v) for k, v in (configs or {}).items()}
        validate_topic_configs(overrides)
        return overrides

    async def create_topic_staged(self, name: str, partitions: int,
                                  configs: Mapping[str, object] | None = None) -> TopicInfo:
        """``create_topic`` for a request served on the event loop, which it does not stall: the
        partitions are made on the admin worker (``_stage_partitions``: creating a file can wait for the
        file system's journal) and installed here with no system call, and the topic is made durable
        (``_persist_durably``) before this returns. The name is reserved meanwhile (another create of it:
        TOPIC_ALREADY_EXISTS) and the topic appears whole when its metadata is synced. All or nothing, as
        ``create_topic``. Nothing of this runs on the worker of the fsyncs that acknowledgements wait for."""
        if not self.background.threaded:
            return self.create_topic(name, partitions, configs)
        overrides = self._check_new_topic(name, partitions, configs)
        self._finish_deleting(name)
        self._creating.add(name)
        try:
            info = TopicInfo(name, new_topic_id(), overrides)
            new = await self._stage_logs(info, 0, partitions, self._config_for(overrides))
            await self._persist_durably(info, new, None)
        finally:
            self._creating.discard(name)
        info.logs.extend(new)
        self._topics[name] = info
        self._by_id[info.topic_id] = info
        return info

    async def add_partitions_staged(self, name: str, new_total: int) -> TopicInfo:
        """``add_partitions`` for a request served on the event loop: the new partitions are made as
        ``create_topic_staged`` makes a topic's, and they appear once the metadata naming them is synced
        (Kafka's controller answers once the record is committed). A failure answers KAFKA_STORAGE_ERROR
        and leaves the topic as it was, its metadata file included."""
        if not self.background.threaded:
            return self.add_partitions(name, new_total)
        async with self._changing(name):
            info = self._checked_increase(name, new_total)
            before = info.to_json()
            new = await self._stage_logs(info, len(info.logs), new_total, self._config_for(info.configs))
            await self._persist_durably(info, new, before)
            info.logs.extend(new)
        return info

    async def delete_topic_durably(self, name: str) -> None:
        """``delete_topic`` for a request served on the event loop: the metadata file is removed and its
        directory fsynced on the admin worker before the topic goes (Kafka's controller answers once the
        record is committed). If that fails the file is written back, the topic stays, and
        KAFKA_STORAGE_ERROR is raised."""
        if not self.admin.threaded:
            return self.delete_topic(name)
        async with self._changing(name):
            info = self._topics.get(name)
            if info is None:
                raise LogError(UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
            path, data = self._meta_path(info), info.to_json()
            try:
                await self._on_admin(lambda: _unlink_durably(path, data))
            except OSError as e:
                STORAGE.report("deleting a topic's metadata", path, e)
                raise LogError(KAFKA_STORAGE_ERROR, f"cannot delete {name}: {e.strerror or e}") from None
            self._drop_topic(info, on_admin=True)

    @contextlib.asynccontextmanager
    async def _changing(self, name: str):
        """One change of topic ``name`` (partitions added, the topic deleted) at a time: a second one
        waits for the first to be answered, then sees what it did."""
        while name in self._changes:
            await asyncio.shield(self._changes[name])
        done = self._changes[name] = asyncio.get_running_loop().create_future()
        try:
            yield
        finally:
            del self._changes[name]
            done.set_result(None)

    async def _stage_logs(self, info: TopicInfo, first: int, end: int, cfg: LogConfig) -> list[PartitionLog]:
        """Partitions ``first``..``end - 1`` of ``info``: made and moved into place on the admin worker,
        ``STAGE_PER_JOB`` per job, and opened here without a system call (``PartitionLog(staged=True)``).
        Not yet in ``info``. On failure those made are removed and KAFKA_STORAGE_ERROR raised."""
        staging = os.path.join(self.data_dir, f"{uuid.uuid4().hex}{STAGING_SUFFIX}")
        paths = [os.path.join(self.data_dir, f"{info.name}-{p}") for p in range(first, end)]
        logs: list[PartitionLog] = []
        try:
            for i in range(0, len(paths), STAGE_PER_JOB):
                piece = paths[i:i + STAGE_PER_JOB]
                await self._on_admin(lambda piece=piece: _stage_partitions(staging, piece))
                for p in range(first + i, first + i + len(piece)):
                    logs.append(self._open_log(info.name, p, cfg, clean=True, staged=True))
        except BaseException as e:
            for plog in logs:
                plog.abandon()
            if not isinstance(e, OSError):  # the request went away
                self.admin.submit(lambda: _remove_staged(paths), log_bg_error)
                raise
            STORAGE.report("creating a partition", staging, e)
            await self._on_admin(lambda: _remove_staged(paths))
            raise LogError(KAFKA_STORAGE_ERROR, f"cannot create partitions {first}..{end - 1} of {info.name}: "
                                                f"{e.strerror or e}") from None
        return logs

    async def _persist_durably(self, info: TopicInfo, new: list[PartitionLog], before: bytes | None) -> None:
        """Write and sync the metadata of ``info`` with ``new`` partitions added, on the admin worker
        (``_write_topic_durably``): one fsync of the data directory (every new partition directory moved
        into it), then of the metadata file (before its rename into place) and its directory. The partitions' files need no fsync of their
        own: a partition directory or file that a power cut loses is made again, empty, when the topic is
        loaded, and a partition's first fsync covers its directory (Kafka's ``LocalLog.flush``). So 3 fsyncs
        whatever the partition count, where one per file and directory would be 5 per partition. A failed
        sync is never taken as durable: the metadata goes back to ``before`` (removed if None), the new
        partitions are removed and KAFKA_STORAGE_ERROR raised."""
        path, data = self._meta_path(info), info.to_json(len(info.logs) + len(new))
        try:
            await self._on_admin(lambda: _write_topic_durably(self.data_dir, path, data, before))
        except OSError as e:
            STORAGE.report("syncing a new topic" if before is None else "syncing new partitions", path, e)
            for plog in new:
                plog.abandon()
            await self._on_admin(lambda: _remove_staged([plog.dir for plog in new]))
            raise LogError(KAFKA_STORAGE_ERROR, f"cannot create {info.name}: syncing its "
                                                f"{len(new)} new partitions failed: {e.strerror or e}") from None
        except asyncio.CancelledError:  # the request went away: the metadata is written, its sync still runs
            info.logs.extend(new)
            if before is None:
                self._topics[info.name] = info
                self._by_id[info.topic_id] = info
            raise

    def _on_admin(self, job) -> asyncio.Future:
        """``job`` on the admin worker; a future of its result. Long work goes in pieces, each submitted
        when the previous one is done, so other topics' work submitted meanwhile runs between them."""
        done = asyncio.get_running_loop().create_future()

        def finished(result, exc) -> None:
            if not done.done():
                done.set_exception(exc) if exc is not None else done.set_result(result)
        self.admin.submit(job, finished)
        return done

    def _add_logs(self, info: TopicInfo, total: int, cfg: LogConfig) -> None:
        """Open the new partitions; on failure (e.g. out of file descriptors) undo them all."""
        before = len(info.logs)
        try:
            for p in range(before, total):
                path = os.path.join(self.data_dir, f"{info.name}-{p}")
                if os.path.exists(path):
                    self._remove_dir(path)  # stale leftovers must not resurface as data
                info.logs.append(self._open_log(info.name, p, cfg, clean=True))
        except OSError as e:
            STORAGE.report("creating a partition", os.path.join(self.data_dir, f"{info.name}-{len(info.logs)}"), e)
            self._undo_logs(info, before)
            raise LogError(KAFKA_STORAGE_ERROR, f"cannot create partitions {before}..{total - 1} of "
                                                f"{info.name}: {e.strerror or e}") from None

    def _persist_or_undo(self, info: TopicInfo, before: int) -> None:
        """Write the topic's metadata; if that fails, remove the partitions from ``before`` on."""
        try:
            self._persist(info)
        except OSError as e:
            STORAGE.report("writing topic metadata", self._meta_path(info), e)
            self._undo_logs(info, before)
            _remove_quietly(self._meta_path(info) + ".tmp")
            raise LogError(KAFKA_STORAGE_ERROR, f"cannot write the metadata of {info.name}: "
                                                f"{e.strerror or e}") from None

    def _undo_logs(self, info: TopicInfo, before: int) -> None:
        """Close and remove partitions ``before``.. of ``info`` and the directory of the one that
        failed to open: all or nothing. Without fsyncs; closing the opened logs gives descriptors
        back, and the reserve makes room when even listing a directory meets the open-file limit."""
        for plog in info.logs[before:]:
            try:
                FD_RESERVE.run(plog.delete)
            except OSError as e:
                STORAGE.report("removing a refused partition", plog.dir, e)
        leftover = [os.path.join(self.data_dir, f"{info.name}-{p}") for p in range(before, len(info.logs) + 1)]
        del info.logs[before:]
        for path in leftover:
            if os.path.exists(path):
                try:
                    FD_RESERVE.run(lambda path=path: shutil.rmtree(path))
                except OSError as e:
                    STORAGE.report("removing a refused partition", path, e)

    def delete_topic(self, name: str) -> None:
        """Delete a topic, its metadata file's removal synced on the admin worker after this returns
        (``delete_topic_durably`` waits for it)."""
        info = self._topics.get(name)
        if info is None:
            raise LogError(UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        os.unlink(self._meta_path(info))
        if self.admin.threaded:
            topics_dir = self._topics_dir
            self.admin.submit(lambda: fsync_dir(topics_dir), log_bg_error)
        else:
            fsync_dir(self._topics_dir)
        self._drop_topic(info)

    def _drop_topic(self, info: TopicInfo, on_admin: bool = False) -> None:
        """The in-memory half of a deletion, once the metadata file is gone: the partitions closed without
        writing and their directories renamed away and removed. ``on_admin``: the renames too run on the
        admin worker, in one job (no file system call here), so a create of the same name, whose files are
        made on that worker after it, finds them gone; every create at run time is staged there."""
        name = info.name
        del self._topics[name]
        self._by_id.pop(info.topic_id, None)
        for plog in info.logs:
            plog.abandon()  # nothing fsynced: the files go
        dirs = [plog.dir for plog in info.logs]
        if on_admin:
            self.admin.submit(lambda: _rename_all_doomed(dirs), self._renamed_away)
            return
        self._deleting[name] = dirs
        if self.admin.threaded:
            self._rename_away(name)  # the first directories now (a small topic's all), the rest in later callbacks
        else:
            self._finish_deleting(name)

    def _rename_away(self, name: str, remove: bool = True, chain: bool = True) -> None:
        """Rename ``OPEN_PER_CALLBACK`` directories of the deleted topic ``name`` to ``*-delete`` (removed on
        the admin worker), the rest in a later loop callback: 1,000 renames at once held the loop 20-30 ms.
        A create of the same name renames what is left first (``_finish_deleting``). A directory that cannot
        be renamed is reported and left for the next start-up (it belongs to no topic then)."""
        dirs = self._deleting.pop(name, None)
        if not dirs:
            return
        piece, rest = dirs[:OPEN_PER_CALLBACK], dirs[OPEN_PER_CALLBACK:]
        doomed = []
        for path in piece:
            try:
                doomed.append(self._rename_doomed(path))
            except OSError as e:
                STORAGE.report("renaming a deleted partition's directory", path, e)
        if rest:
            self._deleting[name] = rest
            if chain:
                asyncio.get_running_loop().call_soon(self._rename_away, name)
        if remove:
            self._remove_doomed(doomed)

    def _renamed_away(self, result: tuple[list[str], list[tuple[str, OSError]]] | None, exc) -> None:
        """On the loop, after ``_rename_all_doomed``: failures reported, the renamed directories removed."""
        if exc is not None:
            STORAGE.report("renaming a deleted topic's directories", self.data_dir, exc)
            return
        doomed, failed = result
        for path, e in failed:
            STORAGE.report("renaming a deleted partition's directory", path, e)
        self._remove_doomed(doomed)

    def _finish_deleting(self, name: str, remove: bool = True) -> None:
        """Every directory of a deleted topic ``name`` still to be renamed, now (a topic of that name is being
        created, or the broker closes: then the ``*-delete`` directories are left for the next start-up)."""
        while name in self._deleting:
            self._rename_away(name, remove, chain=False)

    def add_partitions(self, name: str, new_total: int) -> TopicInfo:
        info = self._checked_increase(name, new_total)
        before = len(info.logs)
        self._add_logs(info, new_total, self._config_for(info.configs))
        self._persist_or_undo(info, before)
        return info

    def _checked_increase(self, name: str, new_total: int) -> TopicInfo:
        info = self._topics.get(name)
        if info is None:
            raise LogError(UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        if new_total <= len(info.logs):
            raise LogError(INVALID_PARTITIONS, f"Topic currently has {len(info.logs)} partitions, {new_total} "
                                               f"would not be an increase.")
        return info

    def set_topic_configs(self, name: str, configs: Mapping[str, object]) -> TopicInfo:
        """Replace the topic's config overrides (the full new set) and apply them to its logs."""
        info = self._topics.get(name)
        if info is None:
            raise LogError(UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        overrides = {k: str(v) for k, v in configs.items()}
        validate_topic_configs(overrides)
        info.configs = overrides
        self._persist(info)
        self._apply_configs(info)
        return info

    def _apply_configs(self, info: TopicInfo) -> None:
        """The topic's overrides (with the defaults) given to each of its partitions."""
        cfg = self._config_for(info.configs)
        for plog in info.logs:
            plog.update_config(cfg.copy())

    async def alter_topic_configs(self, name: str, compute: Callable[[dict[str, str]], Mapping[str, object]]) -> TopicInfo:
        """``set_topic_configs`` for a request served on the event loop, with the overrides
        ``compute(current overrides)`` gives (it may raise ConfigError or LogError): the metadata naming
        them is written and synced on the admin worker before they apply and this returns (Kafka's
        controller answers once the config record is committed). In turn with the topic's other
        changes (``_changing``): a CreatePartitions or DeleteTopics writing the same metadata file is
        never overwritten by it, nor it by them. A failed sync leaves the overrides and the file as they
        were and raises KAFKA_STORAGE_ERROR."""
        if not self.admin.threaded:
            info = self._topics.get(name)
            return self.set_topic_configs(name, compute(dict(info.configs)) if info is not None else {})
        async with self._changing(name):
            info = self._topics.get(name)
            if info is None:
                raise LogError(UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
            overrides = {k: str(v) for k, v in compute(dict(info.configs)).items()}
            validate_topic_configs(overrides)
            path, before, data = self._meta_path(info), info.to_json(), info.to_json(configs=overrides)
            try:
                await self._on_admin(lambda: _replace_durably(path, data, before))
            except OSError as e:
                STORAGE.report("syncing a topic's configs", path, e)
                raise LogError(KAFKA_STORAGE_ERROR, f"cannot change the configs of {name}: {e.strerror or e}") from None
            info.configs = overrides
            self._apply_configs(info)
        return info

    def effective_config(self, name: str) -> LogConfig:
        info = self._topics.get(name)
        return self._config_for(info.configs if info else {})

    def set_default_configs(self, defaults: Mapping[str, object]) -> None:
        """Change broker-level defaults (topic-config names) for all topics without overrides."""
        LogConfig.from_mapping(defaults)
        self._defaults = dict(defaults)
        for info in self._topics.values():
            self._apply_configs(info)

    def all_logs(self) -> Iterable[PartitionLog]:
        for info in self._topics.values():
            yield from info.logs

    # ---------------------------------------------------------- maintenance
    def maintenance(self, now_ms: int | None = None) -> list[tuple[str, int, int]]:
        """Retention, timed flushes, fsync of rolled segments on every log; producer-id expiry
        too when ``producer.id.expiration.check.interval.ms`` has passed since the last one.

        Returns (topic, partition, new log start offset) for logs whose start moved.
        """
        now = self.clock() if now_ms is None else now_ms
        expire = now - self._last_producer_expiry >= self.producer_id_expiration_check_interval_ms
        if expire:
            self._last_producer_expiry = now
        moved = []
        for plog in list(self.all_logs()):
            try:
                if plog.maintenance(now, expire_producers=expire):
                    moved.append((plog.topic, plog.partition, plog.log_start_offset))
            except (OSError, LogError) as e:  # the failed step was undone: the next pass tries again
                STORAGE.report("log maintenance", plog.dir, e)
        OPEN_FILES.sweep()  # segment files unused since the last pass close (opened again when used)
        FD_RESERVE.refill()  # descriptors may be back: take the reserve up again
        STORAGE.flush()
        return moved

    def remove_expired_producers(self, now_ms: int | None = None) -> int:
        """Kafka's periodic producer-id expiration check on every log; returns how many ids went."""
        now = self.clock() if now_ms is None else now_ms
        self._last_producer_expiry = now
        return sum(plog.remove_expired_producers(now) for plog in list(self.all_logs()))

    def close(self) -> str | None:
        """Drain the background worker, close every log (fsync), mark the shutdown clean, release the lock.

        A log that cannot be closed (a read-only or failing disk) is reported to ``STORAGE`` (no
        traceback), its descriptors are closed without writing, and the others are still closed; the
        shutdown is then not marked clean (the next start recovers from the logs). Returns None, or one
        line saying why the shutdown was not clean."""
        if self._lock_fd is None:
            return None
        # a syncfs failed while running: a partition's unseen writeback error is reported only to its own fsync
        trust_syncfs = self.syncfs and getattr(self.background, "syncfs_failed", None) is None
        for name in list(self._deleting):
            self._finish_deleting(name, remove=False)
        for worker in (self.admin, self.background):
            try:
                worker.close()  # a failed job was reported by its own callback
            except Exception as e:
                STORAGE.report("draining the file worker", self.data_dir, e)
        self.background = self.admin = Inline()
        failed: list[tuple[PartitionLog, OSError]] = []
        logs = list(self.all_logs())
        synced = trust_syncfs and self._sync_for_close(logs, failed)
        for plog in logs:
            if plog.closed:
                continue
            try:
                plog.close(synced)
            except OSError as e:
                STORAGE.report("closing a partition", plog.dir, e)
                plog.abandon()
                failed.append((plog, e))
        why = None
        if synced and not failed:
            try:
                self._syncfs()  # the checkpoints and snapshots just written
            except OSError as e:
                STORAGE.report("syncing the data directory's file system", self.data_dir, e)
                why = f"the file system sync after the checkpoints failed ({e.strerror or e}): the next start recovers"
        if failed:
            first, e = failed[0]
            why = (f"{len(failed)} of {len(logs)} partitions not closed cleanly (first {first.topic}-"
                   f"{first.partition}: {e.strerror or e}); the next start recovers them from their logs")
        elif why is None:
            try:
                atomic_write(os.path.join(self.data_dir, ".clean_shutdown"), b"")
            except OSError as e:
                STORAGE.report("marking the shutdown clean", self.data_dir, e)
                why = f"the clean-shutdown marker cannot be written ({e.strerror or e}): the next start recovers"
        os.close(self._lock_fd)
        self._lock_fd = None
        return why

    def _sync_for_close(self, logs: list[PartitionLog], failed: list) -> bool:
        """Every partition's pre-fsync writes (``PartitionLog.prepare_close``), then one ``syncfs`` of the
        data directory's file system: the fsyncs of ``close`` in one call, whatever the number of
        partitions (Kafka flushes each log on a pool of ``num.recovery.threads.per.data.dir`` threads
        instead; 50,000 partitions at a few ms per fsync would take minutes). False where ``syncfs`` is
        missing or failed: each partition then fsyncs its own
        files, so a failing one is found and reported (its error is still unseen by a per-file fsync)."""
        if fileio.syncfs is None:
            return False
        for plog in logs:
            try:
                plog.prepare_close()
            except OSError as e:
                STORAGE.report("closing a partition", plog.dir, e)
                plog.abandon()
                failed.append((plog, e))
        try:
            self._syncfs()
        except OSError as e:
            if e.errno != errno.ENOSYS:  # no syncfs(2) here: the per-file fsyncs are the way, not a fault
                STORAGE.report("syncing the data directory's file system", self.data_dir, e)
            return False
        return True

    def _syncfs(self) -> None:
        fd = os.open(self.data_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fileio.syncfs(fd)
        finally:
            os.close(fd)


def _stage_partitions(staging: str, paths: list[str]) -> None:
    """On the admin worker: each of ``paths`` made an empty partition (``loading.stage_partition``) under
    ``staging`` and renamed into place (a stale directory of that name renamed away and removed first), so
    the loop opens it without a system call. On failure those of ``paths`` made are removed and the
    OSError raised."""
    made = staging
    try:
        for path in paths:
            made = os.path.join(staging, os.path.basename(path))
            stage_partition(made)
            if os.path.lexists(path):  # stale leftovers must not resurface as data
                shutil.rmtree(LogManager._rename_doomed(path), ignore_errors=True)
            fileio.rename(made, path)
    except OSError:
        _remove_staged([made, *paths])
        raise
    finally:
        _remove_staged([staging])


def _rename_all_doomed(dirs: list[str]) -> tuple[list[str], list[tuple[str, OSError]]]:
    """On the admin worker: ``dirs`` renamed to ``*-delete``; returns the new names and the failures (a
    directory left is removed at the next start-up: it belongs to no topic then)."""
    doomed, failed = [], []
    for path in dirs:
        try:
            doomed.append(LogManager._rename_doomed(path))
        except OSError as e:
            failed.append((path, e))
    return doomed, failed


def _remove_staged(paths: list[str]) -> None:
    """Partition directories ``stage_partition`` made (and the staging directory) removed without a
    descriptor where they hold only what it made (``unstage_partition``), so an undo at the open-file
    limit leaves nothing; anything else with ``rmtree``."""
    for path in paths:
        try:
            unstage_partition(path)
        except OSError:
            shutil.rmtree(path, ignore_errors=True)


def _write_topic_durably(data_dir: str, path: str, data: bytes, before: bytes | None) -> None:
    """On the admin worker: the partition directories moved into ``data_dir`` made durable, then a topic's
    metadata (tmp, fsync, rename, fsync of its directory: ``LogManager._persist_durably``). If a sync fails
    the metadata is as it was (``before``; None: no file) and the OSError raised."""
    fsync_dir(data_dir)
    _replace_durably(path, data, before)


def _replace_durably(path: str, data: bytes, before: bytes | None) -> None:
    """On the admin worker: a topic's metadata replaced by ``data`` (tmp, fsync, rename, fsync of its
    directory); if a sync fails it is ``before`` again (None: no file) and the OSError raised."""
    try:
        atomic_write(path, data)
    except OSError:
        _restore(path, before)
        raise


def _restore(path: str, before: bytes | None) -> None:
    """The metadata file ``path`` back to ``before`` (None: removed), after a failed sync (so not synced)."""
    try:
        if before is None:
            _remove_quietly(path)
        else:
            atomic_write(path, before, sync=False)
    except OSError as e:
        log.error("cannot write back the metadata %s: %s", path, e)


def _unlink_durably(path: str, data: bytes) -> None:
    """On the admin worker: a deleted topic's metadata file removed and its directory synced; if the sync
    fails the file is written back (``data``) and the OSError raised."""
    os.unlink(path)
    try:
        fsync_dir(os.path.dirname(path))
    except OSError:
        _restore(path, data)
        raise


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
