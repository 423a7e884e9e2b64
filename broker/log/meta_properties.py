"""``data_dir/meta.properties``: which format wrote the data directory, and whose directory it is.

Kafka's shape (``MetaProperties``, version 1): ``version``, ``node.id``, ``cluster.id``,
``directory.id``, plus ``sharebroker.format.version``, the version of this project's on-disk format
as a whole (the files listed in ``broker/log/README.md``, "On disk"). A release that changes a file
format incompatibly raises ``FORMAT_VERSION`` and, when it opens an older directory, converts it
before it writes the new number.

The rules, checked by :func:`verify` at every start before anything in the directory is written
(Kafka's ``MetaPropertiesEnsemble.verify``, one directory):

- no ``meta.properties``: a new directory, or one written by a release before this file existed,
  which is format 1; :func:`write` records it once the directory is locked and its cluster id known;
- ``version`` other than 1, ``sharebroker.format.version`` missing or not one this release reads
  (Kafka: "Unknown meta.properties version number"), a required key missing: refused;
- ``node.id`` other than the configured ``node.id``: refused (Kafka: "Stored node id ... doesn't
  match previous node id");
- ``cluster.id`` other than ``meta/cluster_id``: refused (Kafka: "Invalid cluster.id in ...").

A refusal raises :class:`DataDirFormatError` with one line naming the file, the key and both values.
"""
from __future__ import annotations

import base64
import os
import uuid

from .errors import DataDirFormatError
from .files import atomic_write

FILE = "meta.properties"
VERSION = 1  # Kafka's meta.properties version (1: KRaft, node.id and cluster.id required)
FORMAT_VERSION = 1  # this release's on-disk format; the directories of earlier releases are format 1
FORMAT_KEY = "sharebroker.format.version"
CLUSTER_ID_FILE = os.path.join("meta", "cluster_id")


class MetaProperties:
    __slots__ = ("node_id", "cluster_id", "directory_id", "format_version")

    def __init__(self, node_id: int, cluster_id: str, directory_id: str, format_version: int = FORMAT_VERSION):
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.directory_id = directory_id
        self.format_version = format_version

    def to_bytes(self) -> bytes:
        return (f"#\n# sharebroker data directory: written at start-up, checked at every start\n"
                f"version={VERSION}\nnode.id={self.node_id}\ncluster.id={self.cluster_id}\n"
                f"directory.id={self.directory_id}\n{FORMAT_KEY}={self.format_version}\n").encode()


def parse(text: str) -> dict[str, str]:
    """Java properties as Kafka writes them: ``key=value`` lines, ``#`` / ``!`` comments."""
    props = {}
    for line in text.splitlines():
        line = line.strip()
        if line and line[0] not in "#!":
            key, _, value = line.partition("=")
            props[key.strip()] = value.strip()
    return props


def verify(data_dir: str, node_id: int) -> MetaProperties | None:
    """The directory's ``meta.properties`` checked against this broker; None if there is none.

    Reads only: a refused directory is left exactly as it was.
    """
    path = os.path.join(data_dir, FILE)
    try:
        with open(path, encoding="utf-8") as f:
            props = parse(f.read())
    except (FileNotFoundError, NotADirectoryError):  # the latter: start-up says what is wrong with data_dir
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise DataDirFormatError(f"{path}: cannot read it: {e}") from None

    def number(key: str) -> int:
        value = required(key)
        try:
            return int(value)
        except ValueError:
            raise DataDirFormatError(f"{path}: {key}={value} is not a number") from None

    def required(key: str) -> str:
        if not props.get(key):
            raise DataDirFormatError(f"{path}: {key} is missing; this is not a data directory this "
                                     f"release of sharebroker wrote")
        return props[key]

    if number("version") != VERSION:
        raise DataDirFormatError(f"{path}: version={props['version']} is not a meta.properties version "
                                 f"this release reads (it reads version={VERSION})")
    fmt = number(FORMAT_KEY)
    if not 1 <= fmt <= FORMAT_VERSION:
        raise DataDirFormatError(f"{path}: {FORMAT_KEY}={fmt} is a format this release does not know (it reads "
                                 f"{FORMAT_KEY}={FORMAT_VERSION} and earlier); start the release that wrote it, "
                                 f"or a later one")
    stored_node = number("node.id")
    if stored_node != node_id:
        raise DataDirFormatError(f"{path}: node.id={stored_node} does not match the configured node.id={node_id}; "
                                 f"if you moved the data, configure node.id={stored_node}; for a new node, use "
                                 f"an empty data directory")
    cluster_id = required("cluster.id")
    try:
        with open(os.path.join(data_dir, CLUSTER_ID_FILE), encoding="utf-8") as f:
            recorded = f.read().strip()
    except FileNotFoundError:
        recorded = ""
    if recorded and recorded != cluster_id:
        raise DataDirFormatError(f"{path}: cluster.id={cluster_id} does not match {CLUSTER_ID_FILE}={recorded}")
    return MetaProperties(stored_node, cluster_id, props.get("directory.id") or new_directory_id(), fmt)


def write(data_dir: str, props: MetaProperties, background=None) -> None:
    atomic_write(os.path.join(data_dir, FILE), props.to_bytes(), background)


def new_topic_id() -> uuid.UUID:
    """A random id as Kafka's Uuid.randomUuid: never 0, never 1, base64 form not starting with '-'."""
    while True:
        u = uuid.uuid4()
        if u.int > 1 and not base64.urlsafe_b64encode(u.bytes).startswith(b"-"):
            return u


def uuid_to_base64(u: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(u.bytes).rstrip(b"=").decode()


def new_directory_id() -> str:
    return uuid_to_base64(new_topic_id())


def has_data(data_dir: str) -> bool:
    """Whether an earlier release used the directory (it always writes ``meta/cluster_id``)."""
    return os.path.exists(os.path.join(data_dir, CLUSTER_ID_FILE))

