"""A skip for a missing input is a skip on a developer's machine and a failure under CI (tests/missing_inputs.py),
wherever it is raised: in a test, in a fixture, at module level, in a conftest, or by a skipif mark; a skip
that is a choice stays a skip."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CASES = {
    "test_in_test.py": '''
from tests.missing_inputs import missing_input

def test_it():
    missing_input("a tool")
''',
    "test_in_fixture.py": '''
import pytest
from tests.missing_inputs import missing_input

@pytest.fixture
def tool():
    missing_input("a tool")

def test_it(tool):
    pass
''',
    "test_at_module_level.py": '''
from tests.missing_inputs import require_modules

require_modules("no_such_module_here")

def test_it():
    pass
''',
    "test_by_mark.py": '''
import pytest
from tests.missing_inputs import PREFIX

@pytest.mark.skipif(True, reason=PREFIX + "a tool")
def test_it():
    pass
''',
    "test_chosen.py": '''
import pytest

def test_it():
    pytest.skip("turned off on purpose")
''',
    "in_conftest/conftest.py": '''
from tests.missing_inputs import require_modules

require_modules("no_such_module_here")
''',
    "in_conftest/test_x.py": '''
def test_it():
    pass
''',
}


def outcomes(tmp_path: Path, ci: str | None) -> dict[str, str]:
    for name, text in CASES.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = str(ROOT)
    report = tmp_path / "report.json"
    plugin = tmp_path / "record.py"
    plugin.write_text('''
import json, os

results = {}

def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        results.setdefault(report.nodeid.split("::")[0], report.outcome)

def pytest_collectreport(report):
    if report.outcome != "passed":
        results[report.nodeid or "?"] = report.outcome

def pytest_sessionfinish(session):
    with open(os.environ["REPORT"], "w") as f:
        json.dump(results, f)
''')
    env["REPORT"] = str(report)
    env["PYTHONPATH"] += os.pathsep + str(tmp_path)
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tests.missing_inputs",
                        "-p", "record", "-q", "--continue-on-collection-errors", "--rootdir", str(tmp_path), str(tmp_path)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert report.exists(), p.stdout + p.stderr
    return json.loads(report.read_text())


EXPECTED_CI = {"test_in_test.py": "failed", "test_in_fixture.py": "failed", "test_at_module_level.py": "failed",
               "test_by_mark.py": "failed", "test_chosen.py": "skipped", "in_conftest": "failed"}


def summary(results: dict[str, str]) -> dict[str, str]:
    """Outcome per case file (the conftest's directory as one case)."""
    out: dict[str, str] = {}
    for nodeid, outcome in results.items():
        key = "in_conftest" if nodeid.startswith("in_conftest") else nodeid
        if out.get(key) != "failed":
            out[key] = outcome
    return out


def test_missing_inputs_fail_under_ci(tmp_path):
    assert summary(outcomes(tmp_path, "true")) == EXPECTED_CI


def test_missing_inputs_are_skips_elsewhere(tmp_path):
    assert summary(outcomes(tmp_path, None)) == {k: "skipped" for k in EXPECTED_CI}
