"""Fixtures for every test directory, and how the whole suite is spread over processes.

Parallel runs: ``pytest`` without paths (the README's command, which ``.ci/run`` runs) runs the suite
on pytest-xdist workers (``--dist loadgroup``; ``SHAREBROKER_TEST_WORKERS`` sets how many, 0 runs it
in this process). A run given paths (``pytest tests/unit/test_x.py``) or its own ``-n`` is left as it
is. The tests are independent: every broker listens on port 0 and keeps its data under the test's
``tmp_path`` (each worker has its own), and what must share one process says so with an
``xdist_group`` (the Spark tests: one SparkSession, ``tests/pipeline/conftest.py``).

The one traceback check: every ``BrokerProcess`` started while the tests run (by a fixture of
any scope, by ``broker_factory``, by the ``sharebroker`` plugin fixtures or by a test itself)
is registered in ``BrokerProcess.started``; after each test, and at the end of each module (for
module-scoped brokers stopped after their last test), the lines each broker logged since the
previous check must hold no Python traceback: an internal error is a bug whatever the test was
about.

``kafka_ref`` (``tests/reference.py``): a reference Apache Kafka 4.4.0 started once for the whole run
and shared by the xdist workers.
"""
from __future__ import annotations

import os

import pytest

from broker.testing import BrokerProcess
from tests.reference import kafka_ref  # noqa: F401  (the reference Apache Kafka 4.4 session fixture)


WORKERS_ENV = "SHAREBROKER_TEST_WORKERS"


def default_workers() -> int:
    """Most tests wait on brokers and clients (timeouts, heartbeats, lock expiry) rather than compute,
    so two workers per core, at most 4 (measured on 2 cores: see the README's test section)."""
    return min(4, 2 * len(os.sched_getaffinity(0)))


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which turns numprocesses into workers
def pytest_cmdline_main(config):
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        # an xdist worker parses the original command line again, which did not ask for loadgroup:
        # its xdist_group marks count only with this (read when it collects)
        if workerinput.get("sharebroker_loadgroup"):
            config.option.loadgroup = True
        return
    if (not config.pluginmanager.hasplugin("xdist")
            or config.args_source != pytest.Config.ArgsSource.TESTPATHS
            or config.option.numprocesses is not None or config.option.dist != "no"
            or config.option.collectonly or config.option.usepdb):
        return
    workers = int(os.environ.get(WORKERS_ENV) or default_workers())
    if workers > 0:
        config.option.numprocesses = workers
        config.option.dist = "loadgroup"


@pytest.hookimpl(optionalhook=True)  # xdist, in the controller, for each worker it starts
def pytest_configure_node(node):
    node.workerinput["sharebroker_loadgroup"] = node.config.option.dist == "loadgroup"


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
