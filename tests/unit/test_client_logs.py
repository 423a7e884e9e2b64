"""librdkafka's log lines reach Python logging (tests/client_logs.py), not the terminal."""
from __future__ import annotations

import logging
import time

from confluent_kafka import Producer

from tests.client_logs import LOGGER


def test_a_client_logs_through_python_logging_not_to_stderr(capfd, caplog):
    """A producer pointed at a closed port logs a failed connection: a log record of the ``librdkafka``
    logger, served by its poll; nothing of it written to the process's stderr by librdkafka's thread."""
    caplog.set_level(logging.INFO, logger=LOGGER.name)
    p = Producer({"bootstrap.servers": "127.0.0.1:1", "reconnect.backoff.ms": 100})
    deadline = time.monotonic() + 30
    while not [r for r in caplog.records if r.name == LOGGER.name] and time.monotonic() < deadline:
        p.poll(0.2)
    del p
    assert any("Connect to" in r.getMessage() for r in caplog.records if r.name == LOGGER.name), caplog.text
    assert "|FAIL|" not in capfd.readouterr().err


def test_every_client_kind_gets_the_logger(capfd, caplog):
    from confluent_kafka import Consumer, ShareConsumer
    from confluent_kafka.admin import AdminClient

    caplog.set_level(logging.INFO, logger=LOGGER.name)
    conf = {"bootstrap.servers": "127.0.0.1:1", "reconnect.backoff.ms": 100}
    def subscribed(c):
        c.subscribe(["t"])
        return c

    for make in (lambda: subscribed(Consumer({**conf, "group.id": "g"})),
                 lambda: subscribed(ShareConsumer({**conf, "group.id": "g"})), lambda: AdminClient(conf)):
        caplog.clear()
        c = make()
        deadline = time.monotonic() + 30
        while not [r for r in caplog.records if r.name == LOGGER.name] and time.monotonic() < deadline:
            c.poll(0.2)
        if hasattr(c, "close"):
            c.close()
        del c
        assert [r for r in caplog.records if r.name == LOGGER.name], make
    assert "|FAIL|" not in capfd.readouterr().err
