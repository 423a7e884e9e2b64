"""``--listen`` / ``--metrics`` as the listener settings they become."""
from __future__ import annotations

import argparse

import pytest

from broker.cli import host_port, parse_listen
from broker.config import BrokerConfig
from broker.security import listeners as L


@pytest.mark.parametrize("arg, host, port", [("127.0.0.1:9092", "127.0.0.1", 9092), (":9092", "0.0.0.0", 9092),
                                             ("[::1]:0", "::1", 0), ("[::]:19092", "::", 19092)])
def test_listen_argument_becomes_the_listener_it_names(arg, host, port):
    """``--listen [::1]:0`` was refused at start-up ("Unable to parse PLAINTEXT://::1:0"): the brackets
    were dropped when the argument was written into ``listeners``."""
    h, p = parse_listen(arg)
    [listener] = L.parse_listeners(BrokerConfig({"listeners": f"PLAINTEXT://{host_port(h, p)}"}))
    assert (listener.host, listener.port) == (host, port)


@pytest.mark.parametrize("arg", ["9092", "host:", "host:99999", "host:x"])
def test_listen_argument_refused(arg):
    with pytest.raises(argparse.ArgumentTypeError):
        parse_listen(arg)
