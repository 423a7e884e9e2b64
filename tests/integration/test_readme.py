"""The README's examples run as written (against a real broker, with its address substituted)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def example(name: str) -> str:
    m = re.search(rf"<!-- readme-example: {re.escape(name)} .*?-->\s*```python\n(.*?)```", README.read_text(), re.S)
    assert m, f"README example {name!r} not found"
    return m.group(1)


def test_share_consumer_example_prints_the_ten_jobs(sharebroker):
    code = example("share-consumer").replace("127.0.0.1:9092", sharebroker.bootstrap)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert sorted(p.stdout.split("\n")[:-1]) == sorted(f"job {i}" for i in range(10))


@pytest.mark.sharebroker({"group.share.min.record.lock.duration.ms": 1000,
                          "group.share.record.lock.duration.ms": 1000, "num.partitions": 3})
def test_fixture_marker_passes_settings(sharebroker):
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": sharebroker.bootstrap})
    res = ConfigResource(ResourceType.BROKER, "1")
    configs = admin.describe_configs([res])[res].result(20)
    assert configs["group.share.record.lock.duration.ms"].value == "1000"
    assert configs["num.partitions"].value == "3"


def test_fixture_factory_starts_brokers_with_their_settings(sharebroker_factory):
    a = sharebroker_factory({"num.partitions": 2})
    b = sharebroker_factory()
    assert a.bootstrap != b.bootstrap and a.data_dir != b.data_dir
    assert a.config["num.partitions"] == "2" and "num.partitions" not in b.config


# ------------------------------------------------------------------ the Quick start's two commands
ROOT = README.parent


def quick_start_commands() -> list[str]:
    """The ``sh`` blocks of the README's Quick start section, in order."""
    text = README.read_text()
    section = text[text.index("## Quick start"):]
    section = section[:section.index("\n## ", 1)]
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", section, re.S)]


def test_ci_runs_the_readme_test_command_verbatim():
    install, tests = quick_start_commands()
    lines = [line.strip() for line in (ROOT / ".ci/run").read_text().splitlines()]
    commands = [line for line in lines if line and not line.startswith("#")]
    # set-up of the shell, then the README's command as the last line, and nothing installed here:
    # everything the tests need is set up by that command itself
    assert commands[-1] == tests
    assert commands[:-1] == ["set -euo pipefail", 'cd "$(dirname "$0")/.."']
    program = tests.split()[0]
    assert os.access(ROOT / program, os.X_OK), f"{program} is not an executable file of the repository"
    # the script ends by running pytest with its arguments
    assert (ROOT / program).read_text().rstrip().endswith('exec "$PYTHON" -m pytest "$@"')


def test_the_readme_install_command_installs_this_package_and_starts_the_broker():
    install, _ = quick_start_commands()
    pip, script = install.split(" && ")
    assert pip == "python3 -m pip install -e ."
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts[script] == "broker.cli:main"
    assert "listener `127.0.0.1:9092`, data in `./data`" in README.read_text()
    from broker.config import DEFAULTS

    assert (DEFAULTS["listeners"], DEFAULTS["log.dirs"]) == ("PLAINTEXT://127.0.0.1:9092", "./data")


# tools/test.sh on a fresh machine, simulated: a PATH holding only the basic tools the script uses and
# stubs that record what they are asked (apt-get "installs" a package by adding stubs of its commands)
STUB = """#!/bin/bash
echo "{name} $*" >> "$STUB_LOG"
{body}
"""
STUBS = {
    "apt-get": """
if [ "$1" = install ]; then
    for pkg in "$@"; do
        case "$pkg" in
            openjdk-17-jdk-headless) cmds="java javac" ;;
            maven) cmds="mvn" ;;
            chromium) cmds="chromium" ;;
            chromium-driver) cmds="chromedriver" ;;
            kcat) cmds="kcat" ;;
            nodejs) cmds="node" ;;
            npm) cmds="npm" ;;
            *) cmds="" ;;
        esac
        for c in $cmds; do printf '#!/bin/bash\\necho "%s $*" >> "$STUB_LOG"\\n' "$c" > "$STUB_BIN/$c"; /bin/chmod +x "$STUB_BIN/$c"; done
    done
elif [ "$1" = download ]; then
    : > prometheus_2.42.0_amd64.deb
fi""",
    "dpkg-deb": '/bin/mkdir -p "$3/usr/bin" && : > "$3/usr/bin/promtool"',
    "install": '/bin/cp "$4" "$STUB_BIN/promtool" && /bin/chmod +x "$STUB_BIN/promtool"',
    "sudo": '"$@"',
    "id": "echo 1000",
    "python": "exit 0",
}


def fresh_machine(tmp_path, sudo: bool = True) -> dict:
    import shutil

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in STUBS.items():
        if name == "sudo" and not sudo:
            continue
        (bin_dir / name).write_text(STUB.format(name=name, body=body))
        (bin_dir / name).chmod(0o755)
    for tool in ("bash", "env", "dirname", "mktemp", "rm"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    return {"PATH": str(bin_dir), "STUB_BIN": str(bin_dir), "STUB_LOG": str(tmp_path / "calls"),
            "PYTHON": str(bin_dir / "python"), "HOME": str(tmp_path), "TMPDIR": str(tmp_path)}


def run_script(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(ROOT / "tools/test.sh"), *args], env=env, capture_output=True, text=True,
                          timeout=60)


def calls(env: dict) -> list[str]:
    log = Path(env["STUB_LOG"])
    return log.read_text().splitlines() if log.exists() else []


def test_the_test_script_sets_up_a_fresh_machine_then_runs_pytest(tmp_path):
    env = fresh_machine(tmp_path)
    p = run_script(env, "-q", "tests/unit", "-k", "a b")
    assert p.returncode == 0, p.stderr
    install = "sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends"
    as_root = [re.sub(r"install -m 0755 \S+/x/usr/bin/promtool", "install -m 0755 .../x/usr/bin/promtool", c)
               for c in calls(env) if c.startswith("sudo")]
    assert as_root == ["sudo apt-get update -qq", f"{install} openjdk-17-jdk-headless", f"{install} maven",
                       f"{install} chromium chromium-driver",
                       "sudo install -m 0755 .../x/usr/bin/promtool /usr/local/bin/promtool",
                       f"{install} kcat", f"{install} nodejs npm"]
    assert "apt-get download -qq prometheus" in calls(env)
    python = [c for c in calls(env) if c.startswith("python")]
    assert python == ["python -m pip --version", "python -m pip install -q -e .[test]", "python --version",
                      "python -m pytest -q tests/unit -k a b"]
    # a second run finds everything and installs nothing
    Path(env["STUB_LOG"]).unlink()
    assert run_script(env, "--install-only").returncode == 0
    assert calls(env) == ["python -m pip --version", "python -m pip install -q -e .[test]"]


def test_the_test_script_says_what_to_do_without_root_or_sudo(tmp_path):
    env = fresh_machine(tmp_path, sudo=False)
    p = run_script(env, "-q")
    assert p.returncode == 1
    assert "installing needs root and there is no sudo: run as root, or run this yourself first: apt-get update" \
        in p.stderr
    assert not [c for c in calls(env) if c.startswith(("python", "apt-get"))]
