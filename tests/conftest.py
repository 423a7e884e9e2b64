"""Fixtures for every test directory, and how the whole suite is spread over processes.

Parallel runs: ``pytest`` without paths (what the README's ``tools/test.sh -q`` runs, and so ``.ci/run``) runs the suite
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

librdkafka's log lines go to Python logging (``tests/client_logs.py``): into the failing test's report
and ``librdkafka.log`` under pytest's base temporary directory, not among the progress dots.

The one client-leak check: every librdkafka client (confluent-kafka's Producer, Consumer,
ShareConsumer, AdminClient) runs one ``rdk:main`` thread from its creation until it is closed or
destroyed. After each test, and at the end of each module, no more of these threads may run than
before it: a client a test (or a module's fixtures) created and left open keeps connecting to its
broker, stopped by then, for the rest of the run. The check is the thread count, so it needs no
hook into the C types and cannot miss a client created by a helper; when it fails it names the
client objects still alive and what refers to them.
"""
from __future__ import annotations

import gc
import os
import sys
import traceback

import pytest

from broker.testing import BrokerProcess
from tests import client_logs
from tests.reference import kafka_ref  # noqa: F401  (the reference Apache Kafka 4.4 session fixture)
from tests.keycloak import keycloak  # noqa: F401  (the OpenID Connect provider of the OAUTHBEARER tests)
from tests.missing_inputs import (  # noqa: F401  (hooks: a skip for a missing input fails under CI)
    pytest_make_collect_report, pytest_runtest_makereport)


def _import_generated_codecs() -> None:
    """Import every generated codec module (``protocol/messages``, ``protocol/coordinator_records``) now,
    while the process collects and nothing else runs. pytest marks all packages of this distribution
    for assertion rewriting (its ``pytest11`` plugin), so each module's first import ``ast.parse``-s its
    source; CPython 3.11.7's AST conversion keeps one recursion counter per interpreter, and a garbage
    collection inside that parse which formats a traceback (3.11's traceback module parses source too:
    e.g. asyncio logging "Future exception was never retrieved") leaves it off:
    ``SystemError: AST constructor recursion depth mismatch``. Imported lazily mid-test (tests/wire.py,
    the round-trip tests), the big generated modules were where that happened (twice in full runs)."""
    import importlib
    import pkgutil

    import protocol.coordinator_records
    import protocol.messages

    for pkg in (protocol.messages, protocol.coordinator_records):
        for mod in pkgutil.iter_modules(pkg.__path__):
            importlib.import_module(f"{pkg.__name__}.{mod.name}")


_import_generated_codecs()
client_logs.install()  # before the test modules import the client classes


@pytest.fixture(scope="session", autouse=True)
def _librdkafka_log_file(tmp_path_factory):
    """librdkafka's lines of the whole run (of this xdist worker) in ``librdkafka.log`` under pytest's base
    temporary directory; each test's are also in its report when it fails."""
    handler = client_logs.log_to_file(tmp_path_factory.getbasetemp() / "librdkafka.log")
    yield
    client_logs.LOGGER.removeHandler(handler)
    handler.close()


WORKERS_ENV = "SHAREBROKER_TEST_WORKERS"


def default_workers() -> int:
    """Most tests wait on brokers and clients (timeouts, heartbeats, lock expiry) rather than compute,
    so two workers per core, at most 4 (measured on 2 cores)."""
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


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    """An xdist worker with ``--dist loadgroup``: every test with an ``xdist_group`` mark must carry
    xdist's ``@group`` suffix in its id, or the tests of a group spread over every worker (each then
    starts its own SparkSession or 3-node Kafka cluster). pytest 9.2 silently dropped the suffix
    xdist 3.8.0 sets: pyproject pins a pytest that keeps it, and this says so if that breaks."""
    if not getattr(session.config.option, "loadgroup", False) or not hasattr(session.config, "workerinput"):
        return
    lost = [item.nodeid for item in session.items
            if any(True for _ in item.iter_markers("xdist_group")) and "@" not in item.nodeid]
    if lost:
        raise pytest.UsageError(f"xdist_group marks are ignored by this pytest / pytest-xdist pair (pinned in "
                                f"pyproject.toml's test extra), e.g. {lost[0]}")


def _assert_no_new_tracebacks(when: str) -> None:
    problems = [f"[broker {b.bootstrap}, data {b.data_dir}]\n{t}"
                for b in BrokerProcess.started for t in b.new_tracebacks()]
    assert not problems, f"the broker logged a Python traceback ({when}):\n" + "\n----\n".join(problems)


def rdkafka_clients() -> int:
    """How many librdkafka client handles this process runs (one ``rdk:main`` thread each; the
    thread ends inside ``close()`` / the handle's destruction, which joins it)."""
    n = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                n += f.read().startswith("rdk:main")
        except OSError:  # the thread ended meanwhile
            pass
    return n


_session_clients = [0]  # clients created by session-scoped fixtures: they live as long as the run


class _SessionFixtureClients:
    """Counts the clients session-scoped fixtures create. A plugin, not a hook of this conftest: the
    setup hook of a session-scoped fixture is called on the session's node, which does not see
    conftests below the rootdir."""

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef, request):
        if fixturedef.scope not in ("session", "package"):
            return (yield)
        before = rdkafka_clients()  # rd_kafka_new() returns once its rdk:main thread is up (and named)
        try:
            return (yield)
        finally:
            _session_clients[0] += rdkafka_clients() - before


def pytest_configure(config):
    config.pluginmanager.register(_SessionFixtureClients(), "sharebroker-session-fixture-clients")
    _keep_ignored_warnings_under_command_line_filters(config)


def _keep_ignored_warnings_under_command_line_filters(config) -> None:
    """pyproject.toml's ``filterwarnings`` ignores a few third-party deprecations; pytest applies command-line
    ``-W`` filters after the ini's, so ``-W error`` would turn them into errors again (kafka-python's, at
    import). Repeated after the command line's, the ignores stay narrower than ``-W error``: every other
    warning still fails the run."""
    ignores = [f for f in config.getini("filterwarnings") if f.startswith("ignore:")]
    ns = config.known_args_namespace
    ns.pythonwarnings = [*(ns.pythonwarnings or []), *ignores]


def own_clients() -> int:
    """The clients not owned by session-scoped fixtures (which may first be set up in any module)."""
    return rdkafka_clients() - _session_clients[0]


def _dict_name(d: dict) -> str:
    """A module's globals or a dict some module holds in a global, by name; else its first keys."""
    for m in list(sys.modules.values()):
        g = getattr(m, "__dict__", None)
        if g is d:
            return f"the globals of {m.__name__}"
        if isinstance(g, dict):
            for k, v in list(g.items()):
                if v is d:
                    return f"{m.__name__}.{k}"
    return f"a dict with keys {list(d)[:5]}"


def _client_objects() -> list[str]:
    """The live confluent-kafka client objects, each with what refers to it (for the failure message)."""
    try:
        from confluent_kafka import Consumer, Producer, ShareConsumer
        from confluent_kafka.admin import AdminClient
    except ImportError:
        return []
    kinds = (Producer, Consumer, ShareConsumer, AdminClient)
    out = []
    for obj in gc.get_objects():
        if isinstance(obj, kinds):
            holders = []
            for r in gc.get_referrers(obj):
                if isinstance(r, dict):
                    holders.append(_dict_name(r))
                elif type(r).__name__ == "frame":
                    holders.append(f"a frame of {r.f_code.co_name} ({r.f_code.co_filename}:{r.f_lineno})")
                elif r is not out and not isinstance(r, list):
                    holders.append(type(r).__name__)
            out.append(f"{type(obj).__name__} at {id(obj):#x}, held by {', '.join(holders) or 'nothing visible'}")
    return out


def _release_failed_test_frames(config) -> None:
    """pytest keeps the last failure's traceback (``sys.last_traceback``), and with it the clients
    in that test's frames; its report is written by now, so free them (unless --pdb wants them)."""
    tb = getattr(sys, "last_traceback", None)
    if tb is not None and not config.option.usepdb:
        traceback.clear_frames(tb)
        sys.last_traceback = sys.last_value = None
        if hasattr(sys, "last_exc"):
            sys.last_exc = None


_current_item: list = [None]  # the test being run: its fixture values are released by the checks


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _current_item[0] = item


def _assert_no_new_clients(before: int, when: str, config) -> None:
    if own_clients() <= before:
        return
    _release_failed_test_frames(config)
    item = _current_item[0]
    if item is not None and isinstance(getattr(item, "funcargs", None), dict):
        item.funcargs.clear()  # the fixture values, torn down by now (pytest drops them after this teardown)
    gc.collect()  # clients only in reference cycles are destroyed by a collection
    after = own_clients()
    assert after <= before, (
        f"{after - before} librdkafka client(s) left open {when} (close() consumers, let producers and admin "
        f"clients go out of scope): live client objects:\n  " + "\n  ".join(_client_objects()))


@pytest.fixture(autouse=True)
def _no_broker_tracebacks(request):
    """Set up first and torn down last among function fixtures, so brokers stopped by other
    fixtures are checked too; so are the clients the test's fixtures closed."""
    clients = own_clients()
    yield
    _assert_no_new_tracebacks(f"during {request.node.nodeid}")
    _assert_no_new_clients(clients, f"by {request.node.nodeid}", request.config)


@pytest.fixture(scope="module", autouse=True)
def _no_broker_tracebacks_module(request):
    clients = own_clients()
    yield
    _assert_no_new_tracebacks(f"while tearing down {request.node.nodeid}")
    _assert_no_new_clients(clients, f"by the module fixtures of {request.node.nodeid}", request.config)
