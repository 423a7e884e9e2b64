"""``broker.testing.BrokerProcess`` chooses its listener ports below the kernel's ephemeral range, so a
broker killed in a test binds the same port again: a port the kernel handed out is drawn again by the
next outgoing connection of any process on the machine (it made a restart fail with "address already in
use" on a busy test machine)."""
from __future__ import annotations

import socket

import broker.testing as testing
from broker.testing import BrokerProcess, listen_port


def ephemeral_low() -> int:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        return int(f.read().split()[0])


def test_listen_port_is_free_and_below_the_ephemeral_range():
    ports = {listen_port() for _ in range(20)}
    assert all(10000 <= p < ephemeral_low() for p in ports), ports
    assert len(ports) > 1  # chosen at random, not the same for every process
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports.pop()))  # free when chosen


def test_a_killed_broker_restarts_on_its_port_while_other_connections_come_and_go(tmp_path):
    b = BrokerProcess(tmp_path / "b").start()
    try:
        port = b.port
        assert port < ephemeral_low()
        # outgoing connections draw ephemeral ports; none of them can be the broker's
        others = []
        for _ in range(50):
            c = socket.create_connection(("127.0.0.1", port))
            others.append(c)
            assert c.getsockname()[1] != port
        b.kill9()
        b.start()
        assert b.port == port
        for c in others:
            c.close()
    finally:
        b.stop()


def test_a_first_start_chooses_again_when_its_port_was_taken(tmp_path, monkeypatch):
    taken = socket.socket()
    taken.bind(("127.0.0.1", listen_port()))
    taken.listen()
    choices = [taken.getsockname()[1]]
    real = testing.listen_port
    monkeypatch.setattr(testing, "listen_port", lambda host="127.0.0.1": choices.pop() if choices else real(host))
    b = BrokerProcess(tmp_path / "b")
    try:
        b.start()
        assert b.port not in (0, taken.getsockname()[1])
        assert any("address already in use" in line for line in b.log_lines)  # the first try was refused
    finally:
        b.stop()
        taken.close()
