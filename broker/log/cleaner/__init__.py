"""The log cleaner (compaction of ``cleanup.policy=compact`` logs), as Kafka 4.4's ``LogCleaner``.

- ``manager.py``: on the event loop: checkpoints, choosing the dirtiest log, swapping cleaned
  segments in, metrics (Kafka's ``LogCleaner``, ``LogCleanerManager``, ``CleanerConfig``);
- ``worker.py``: the worker process that does the CPU work, and the broker's handle on it;
- ``cleaner.py``: cleaning one log (Kafka's ``Cleaner``), run by the worker;
- ``offset_map.py``, ``transactions.py``: ``OffsetMap`` and ``CleanedTransactionMetadata``.
See ``broker/log/README.md`` ("Compaction").

The broker imports ``manager.py`` at start-up (and ``offset_map.py``, to check the dedupe buffer);
the cleaning code (``cleaner.py``, ``transactions.py``) and the worker's handle load with the first pass.
"""
from .manager import CHECKPOINT_FILE, CleanerConfig, LogCleaner, LogToClean, read_checkpoints

_LAZY = {"Cleaner": "cleaner", "CleanJob": "cleaner", "group_segments_by_size": "cleaner", "OffsetMap": "offset_map"}

__all__ = ["Cleaner", "CleanJob", "group_segments_by_size", "CHECKPOINT_FILE", "CleanerConfig", "LogCleaner",
           "LogToClean", "read_checkpoints", "OffsetMap"]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = globals()[name] = getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
    return value
