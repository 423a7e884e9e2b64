"""librdkafka's log lines go to Python logging, and so to a file and to the failing test's report, never
straight to the terminal.

librdkafka writes its log lines (a refused connection, the share consumer's preview notice, telemetry
notes) from its own threads to the process's stderr unless the client's configuration has a ``logger``.
Inside a test pytest captures them; between tests (and under xdist, where a worker's stderr is the
terminal) they land among the progress dots. ``install()`` gives every confluent-kafka client this
process creates the ``librdkafka`` logger unless its configuration names one: confluent-kafka then hands
the lines to it from the client's ``poll``/``flush`` calls, as log records, which pytest keeps with the
test that made them (shown when it fails) and ``log_to_file`` writes to a file for the whole run.
"""
from __future__ import annotations

import logging
from pathlib import Path

LOGGER = logging.getLogger("librdkafka")


def _logging_init(init):
    """``init`` (a client's ``__init__``) with the configuration's ``logger`` defaulting to ``LOGGER``."""

    def __init__(self, *args, **kwargs):
        if args and isinstance(args[0], dict):
            if "logger" not in args[0] and "logger" not in kwargs:
                args = ({**args[0], "logger": LOGGER}, *args[1:])
        else:
            kwargs.setdefault("logger", LOGGER)
        init(self, *args, **kwargs)

    return __init__


def install() -> None:
    """Makes every client of ``confluent_kafka`` log through ``LOGGER``: to be called once, before any test
    module imports the client classes. The C types (``Producer``, ``Consumer``, ``ShareConsumer``) are
    replaced by subclasses; ``AdminClient``, a Python class whose ``__init__`` names itself, gets a new
    ``__init__``."""
    try:
        import confluent_kafka
        from confluent_kafka.admin import AdminClient
    except ImportError:
        return
    for name in ("Producer", "Consumer", "ShareConsumer"):
        cls = getattr(confluent_kafka, name)
        setattr(confluent_kafka, name, type(name, (cls,), {"__init__": _logging_init(cls.__init__), "__doc__": cls.__doc__,
                                                           "__module__": cls.__module__}))
    AdminClient.__init__ = _logging_init(AdminClient.__init__)


def log_to_file(path: Path) -> logging.Handler:
    """Every librdkafka line (INFO and up) of the run also goes to ``path``; returns the handler to remove."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    LOGGER.addHandler(handler)
    LOGGER.setLevel(logging.INFO)
    return handler
