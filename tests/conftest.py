"""Fixtures for every test directory.

The one traceback check: every ``BrokerProcess`` started while the tests run (by a fixture of
any scope, by ``broker_factory``, by the ``sharebroker`` plugin fixtures or by a test itself)
is registered in ``BrokerProcess.started``; after each test, and at the end of each module (for
module-scoped brokers stopped after their last test), the lines each broker logged since the
previous check must hold no Python traceback: an internal error is a bug whatever the test was
about.
"""
from __future__ import annotations

import pytest

from broker.testing import BrokerProcess


def _assert_no_new_tracebacks(when: str) -> None:
    problems = [f"[broker {b.bootstrap}, data {b.data_dir}]\n{t}"
                for b in BrokerProcess.started for t in b.new_tracebacks()]
    assert not problems, f"the broker logged a Python traceback ({when}):\n" + "\n----\n".join(problems)


@pytest.fixture(autouse=True)
def _no_broker_tracebacks(request):
    """Set up first and torn down last among function fixtures, so brokers stopped by other
    fixtures are checked too."""
    yield
    _assert_no_new_tracebacks(f"during {request.node.nodeid}")


@pytest.fixture(scope="module", autouse=True)
def _no_broker_tracebacks_module(request):
    yield
    _assert_no_new_tracebacks(f"while tearing down {request.node.nodeid}")
