"""Producer id allocation that never repeats an id across restarts.

Ids are handed out from blocks; the end of the current block is persisted
(atomically) before any id of it is used, so after a crash the next block starts
past every id that may have been given out (the file is renamed into place before
the first id of a block is used; its fsync runs on the log manager's file worker).
"""
from __future__ import annotations

import json
import os

from broker.log.files import atomic_write

BLOCK = 1000


class ProducerIdManager:
    def __init__(self, meta_dir: str, background=None):
        self.background = background
        self._path = os.path.join(meta_dir, "producer-ids.json")
        try:
            with open(self._path, "rb") as f:
                self._next = int(json.loads(f.read())["next_block_start"])
        except FileNotFoundError:
            self._next = 0
        self._block_end = self._next

    def next_id(self) -> int:
        if self._next >= self._block_end:
            self._block_end = self._next + BLOCK
            atomic_write(self._path, json.dumps({"next_block_start": self._block_end}).encode(), self.background)
        pid = self._next
        self._next += 1
        return pid
