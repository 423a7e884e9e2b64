"""The log cleaner (compaction of ``cleanup.policy=compact`` logs), as Kafka 4.4's ``LogCleaner``.

- ``manager.py``: on the event loop: checkpoints, choosing the dirtiest log, swapping cleaned
  segments in, metrics (Kafka's ``LogCleaner``, ``LogCleanerManager``, ``CleanerConfig``);
- ``worker.py``: the worker process that does the CPU work, and the broker's handle on it;
- ``cleaner.py``: cleaning one log (Kafka's ``Cleaner``), run by the worker;
- ``offset_map.py``, ``transactions.py``: ``OffsetMap`` and ``CleanedTransactionMetadata``.
See ``broker/log/README.md`` ("Compaction").
"""

from .cleaner import Cleaner, CleanJob, group_segments_by_size
from .manager import CHECKPOINT_FILE, CleanerConfig, LogCleaner, LogToClean, read_checkpoints
from .offset_map import OffsetMap

__all__ = ["Cleaner", "CleanJob", "group_segments_by_size", "CHECKPOINT_FILE", "CleanerConfig", "LogCleaner",
           "LogToClean", "read_checkpoints", "OffsetMap"]
