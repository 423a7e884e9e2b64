"""A test whose input is missing must not pass as skipped where everything was set up.

``missing_input(what)`` skips the running test (or module) because something it needs is missing here: a
tool, a package, a file resolved from a registry. On a developer's machine that is a skip with the reason;
under CI (``CI=true``), where tools/test.sh has installed every input, it is a failure, since the suite would
otherwise report green without testing what it claims to. Skips that are choices (an opt-in scenario, the
reference Kafka turned off, a machine that cannot mount file systems) stay plain ``pytest.skip``.

tests/conftest.py imports the two hooks below; a pytest run elsewhere loads them with ``-p tests.missing_inputs``.
"""
from __future__ import annotations

import os

import pytest

PREFIX = "missing input: "


class MissingInput(pytest.skip.Exception):
    """Raised by ``missing_input``; a skip everywhere but under CI."""


def missing_input(what: str):
    raise MissingInput(PREFIX + what, allow_module_level=True)


def require_modules(*names: str) -> None:
    """Import each module, or skip the calling module (or conftest's directory) as missing its input."""
    import importlib

    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as e:
            missing_input(f"the Python module {name} ({e})")


def under_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


def _fail_if_missing_input(report) -> None:
    """Turn a skip for a missing input into a failure under CI. The reason is the one mark the report
    keeps of the exception (a collection report has no excinfo), so the prefix is what is recognised."""
    if report.skipped and under_ci() and isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2])  # "Skipped: missing input: ...", "...MissingInput: missing input: ..."
        if PREFIX in reason:
            reason = reason[reason.index(PREFIX):]
            report.outcome = "failed"
            report.longrepr = f"{reason} (CI=true: every input must be there, tools/test.sh installs them)"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    _fail_if_missing_input(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    report = yield
    _fail_if_missing_input(report)
    return report
