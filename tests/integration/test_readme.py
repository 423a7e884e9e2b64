"""The README's and docs/'s examples run as written (against a real broker, with its address substituted),
every command block is checked, tools/test.sh sets up a fresh machine, and the documentation site builds.

Blocks: every fenced block of README.md and docs/*.md names its kind. ``python`` blocks run (against a
broker started with the settings of the page's last ``sharebroker`` command), ``sh`` blocks are commands
a user copies (each line checked; ``sharebroker`` start commands started, Apache Kafka's own tools run
through Kafka 4.4's jars), ``yaml`` / ``properties`` blocks parse, ``text`` blocks are output, logs and
synopses."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from broker.testing import BrokerProcess
from tests.missing_inputs import missing_input

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
KINDS = {"python", "sh", "text", "yaml", "properties"}
MARKER = re.compile(r"<!-- (?:readme|docs)-example: (\S+)")


class Block:
    def __init__(self, page: Path, line: int, kind: str, code: str, before: str):
        self.page, self.line, self.kind, self.code, self.before = page, line, kind, code, before
        names = MARKER.findall(before[-300:].rsplit("```", 1)[-1])
        self.name = names[-1] if names else None

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    def commands(self) -> list[str]:
        """The block's commands: continuation lines joined, comments and blank lines left out."""
        joined = re.sub(r"\\\n\s*", " ", self.code)
        return [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def blocks(kind: str | None = None) -> list[Block]:
    out = []
    for page in PAGES:
        text = page.read_text()
        for m in re.finditer(r"^```(\S*)\n(.*?)^```$", text, re.S | re.M):
            if kind is None or m.group(1) == kind:
                out.append(Block(page, text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2),
                                 text[:m.start()]))
    return out


def example(name: str) -> str:
    found = [b.code for b in blocks("python") if b.name == name]
    assert len(found) == 1, f"example {name!r}: {len(found)} blocks"
    return found[0]


def broker_settings(block: Block) -> dict[str, str]:
    """The ``--set`` settings of the last ``sharebroker`` start command above the block on its page."""
    settings: dict[str, str] = {}
    for b in blocks("sh"):
        if b.page == block.page and b.line < block.line:
            for command in b.commands():
                if is_broker_start(command):
                    settings = start_settings(command)
    return settings


def is_broker_start(command: str) -> bool:
    return shlex.split(command)[0] in ("sharebroker", ".venv/bin/sharebroker")


def start_settings(command: str) -> dict[str, str]:
    args = shlex.split(command)[1:]
    assert len(args) % 2 == 0 and all(a == "--set" for a in args[::2]), f"only --set is expected: {command}"
    return dict(kv.split("=", 1) for kv in args[1::2])


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


# ------------------------------------------------------------------ every block of README.md and docs/
def test_every_block_says_what_it_is():
    found = blocks()
    assert len(found) > 20
    assert [b.id for b in found if b.kind not in KINDS] == [], f"a block's kind must be one of {sorted(KINDS)}"


@pytest.mark.parametrize("block", [b for b in blocks("python") if b.name != "share-consumer"], ids=lambda b: b.id)
def test_python_block_runs(block, sharebroker_factory):
    broker = sharebroker_factory(broker_settings(block))
    code = block.code.replace("127.0.0.1:9092", broker.bootstrap)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr


CONSOLE_SCRIPTS = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"])
KAFKA_DISTRIBUTION = "Apache Kafka distribution"


@pytest.mark.parametrize("block", blocks("sh"), ids=lambda b: b.id)
def test_command_block_can_be_copied(block):
    """Every line runs on a stock Debian with this repository and its virtual environment: ``python3``
    (Debian has no ``python``), no ``sudo``, pip only in the virtual environment and from the clone, this
    package's own scripts, and Apache Kafka's tools only where the text says where they come from."""
    commands = block.commands()
    assert commands
    for command in commands:
        for part in re.split(r"&&|\|\||;", command.split(" #")[0]):
            words = shlex.split(part)
            while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # S=... T=...
                words.pop(0)
            if not words:
                continue
            program = words[0]
            assert "sudo" not in words, command
            assert program not in ("python", "pip", "pip3"), f"{block.id}: {command}"
            if program.endswith("/pip"):
                assert program == ".venv/bin/pip" and words[1:3] == ["install", "-e"], f"{block.id}: {command}"
            elif program.startswith("kafka-"):
                assert program.endswith(".sh") and KAFKA_DISTRIBUTION in block.before[-600:], \
                    f"{block.id}: {program} without saying it comes from the {KAFKA_DISTRIBUTION}"
            else:
                script = program.removeprefix(".venv/bin/")
                assert program in ("python3", "tools/test.sh") or script in CONSOLE_SCRIPTS, f"{block.id}: {command}"


def test_documented_broker_commands_start_the_broker(tmp_path):
    started = 0
    for block in blocks("sh"):
        for command in block.commands():
            if is_broker_start(command) and block.page != README:  # the README's: test_first_command_*
                with BrokerProcess(data_dir=tmp_path / str(started), config=start_settings(command)) as b:
                    assert b.bootstrap
                started += 1
    assert started >= 1


def kafka_tool_lines() -> list[tuple[Block, str]]:
    return [(b, c) for b in blocks("sh") for c in b.commands() if c.startswith("kafka-configs.sh ")]


@pytest.mark.parametrize("block,command", kafka_tool_lines(), ids=lambda x: x.id if isinstance(x, Block) else "")
def test_kafka_tool_line_runs_with_kafkas_own_tool(block, command, sharebroker_factory):
    """``kafka-configs.sh`` is ``kafka-run-class.sh org.apache.kafka.tools.ConfigCommand``: run from Kafka
    4.4's jars (tests/kafka_ref resolves them with Maven) against a broker with the page's settings."""
    from tests.kafka_ref.launcher import classpath, missing_tools

    if missing_tools():
        missing_input(f"Kafka 4.4's tools need {' and '.join(missing_tools())} (tests/kafka_ref)")
    broker = sharebroker_factory(broker_settings(block))
    args = shlex.split(command)[1:]
    args = [broker.bootstrap if a == "127.0.0.1:9092" else a for a in args]
    p = subprocess.run(["java", "-Xmx256m", "-cp", classpath(), "org.apache.kafka.tools.ConfigCommand", *args],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr


def test_yaml_and_properties_blocks_parse():
    import yaml

    for block in blocks("yaml"):
        assert yaml.safe_load(block.code) is not None, block.id
    for block in blocks("properties"):
        for line in block.commands():
            assert re.match(r"[\w.]+=", line), f"{block.id}: {line}"


def test_the_migration_block_is_run_by_its_test():
    (block,) = [b for b in blocks("sh") if "sharebroker-migrate" in b.code]
    assert block.page.name == "migration.md"
    assert "def test_readme_move_runs_as_written" in (ROOT / "tests/integration/test_migrate.py").read_text()


def test_the_readme_is_a_landing_page_and_tables_stay_readable():
    """The README is short (the manual is docs/), and no table cell holds a page of text."""
    assert len(README.read_text().splitlines()) <= 250
    long_cells = [f"{page.relative_to(ROOT)}:{n}" for page in PAGES
                  for n, line in enumerate(page.read_text().splitlines(), 1)
                  if line.startswith("|") and max(len(c) for c in line.strip("|").split(" | ")) > 700]
    assert long_cells == []


def test_the_testing_page_counts_what_the_differential_suites_hold():
    """docs/testing.md's counts are the suites' own tables (a scenario or an expected difference added
    without the page fails here)."""
    from tests.differential import test_behaviour, test_operations, test_protocol

    text = (ROOT / "docs" / "testing.md").read_text()

    def section(start: str, end: str) -> str:
        return text[text.index(start):text.index(end)]

    def row(section_text: str, label: str) -> str:
        return re.search(rf"^\| {label}.*\| (\d+) \|$", section_text, re.M).group(1)

    protocol = section("**Differential suite, protocol level**", "**Operations APIs**")
    operations = section("**Operations APIs**", "**Differential suite, behaviour level**")
    behaviour = section("**Differential suite, behaviour level**", "**Differential suite, applications**")
    assert row(protocol, r"scenarios \(") == str(len(test_protocol.SCENARIOS))
    assert row(protocol, "expected differences") == str(len(test_protocol.EXPECTED))
    assert f"{len(test_operations.SCENARIOS)} scenarios" in operations
    assert f"{len(test_operations.EXPECTED)} expected\ndifferences" in operations
    # the behaviour scenarios, and the ACL decisions of test_acl_decisions_as_kafka
    assert row(behaviour, r"scenarios \(listed above\)") == str(len(test_behaviour.SCENARIOS) + 1)
    assert row(behaviour, "expected differences") == str(len(test_behaviour.EXPECTED))


# ------------------------------------------------------------------ the documentation site
def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def test_the_documentation_site_builds_strictly(tmp_path):
    p = mkdocs_build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "site" / "differences" / "index.html").is_file()
    # and the strict build fails on a broken link and on a page left out of the navigation
    for planted in ("See [nothing](no-such-page.md).", "See [no heading](apis.md#no-such-heading)."):
        copy = tmp_path / f"copy{len(planted)}"
        shutil.copytree(ROOT / "docs", copy / "docs")
        shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
        with (copy / "docs" / "index.md").open("a") as f:
            f.write(f"\n{planted}\n")
        assert mkdocs_build(copy / "mkdocs.yml", copy / "site").returncode == 1, planted
    (copy / "docs" / "index.md").write_text((ROOT / "docs" / "index.md").read_text())
    (copy / "docs" / "orphan.md").write_text("# Orphan\n")
    assert mkdocs_build(copy / "mkdocs.yml", copy / "site").returncode == 1


# ------------------------------------------------------------------ the Quick start's two commands


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


def test_the_readme_install_command_installs_this_package_and_its_client_and_starts_the_broker():
    install, _ = quick_start_commands()
    assert install.split(" && ") == ["python3 -m venv .venv", ".venv/bin/pip install -e '.[client]'",
                                     ".venv/bin/sharebroker"]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["sharebroker"] == "broker.cli:main"
    # the client the examples use, pinned as the tests pin it, new enough for ShareConsumer (2.16)
    (client,) = project["optional-dependencies"]["client"]
    assert client in project["optional-dependencies"]["test"]
    name, version = client.split("==")
    assert name == "confluent-kafka" and tuple(map(int, version.split("."))) >= (2, 16)
    text = README.read_text()
    assert "listener `127.0.0.1:9092`, data in `./data`" in text and f"confluent-kafka {version}" in text
    from broker.config import DEFAULTS

    assert (DEFAULTS["listeners"], DEFAULTS["log.dirs"]) == ("PLAINTEXT://127.0.0.1:9092", "./data")


def externally_managed_python(prefix: Path) -> Path:
    """A Python marked externally managed (PEP 668) as Debian marks its own: this interpreter's binary
    copied into ``prefix/bin``, its standard library linked entry by entry into ``prefix/lib``, and an
    ``EXTERNALLY-MANAGED`` file beside them (where pip looks: the stdlib directory)."""
    import sysconfig

    stdlib = Path(sysconfig.get_path("stdlib", vars={"installed_base": sys.base_prefix, "base": sys.base_prefix}))
    lib = prefix / "lib" / stdlib.name
    lib.mkdir(parents=True)
    for entry in stdlib.iterdir():
        if entry.name != "EXTERNALLY-MANAGED":  # Debian's own marker: never written through a link
            (lib / entry.name).symlink_to(entry)
    (lib / "EXTERNALLY-MANAGED").write_text("[externally-managed]\nError=marked by the test (PEP 668)\n")
    (prefix / "bin").mkdir()
    shutil.copy2(Path(sys._base_executable).resolve(), prefix / "bin" / "python3")
    return prefix / "bin"


def test_the_first_command_works_on_an_externally_managed_python(tmp_path):
    """The README's first command, in a copy of the repository, with ``python3`` an externally managed
    Python on which ``pip install`` is refused: the virtual environment installs the package and the
    client, and the broker starts (on a free port instead of 9092, the one change)."""
    bin_dir = externally_managed_python(tmp_path / "python")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    for var in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):
        env.pop(var, None)
    clone = tmp_path / "clone"
    shutil.copytree(ROOT, clone, ignore=shutil.ignore_patterns(".git", ".venv", "data", "site", "__pycache__",
                                                                "*.egg-info", "build"))
    # pip refuses it (this environment's pip, run for that interpreter: Debian's python3 may have no pip)
    refused = subprocess.run([sys.executable, "-m", "pip", "--python", str(bin_dir / "python3"), "install", "-e",
                              "."], cwd=clone, env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "externally-managed-environment" in refused.stderr + refused.stdout
    install, _ = quick_start_commands()
    command = install.removesuffix(".venv/bin/sharebroker") + ".venv/bin/sharebroker --listen 127.0.0.1:0"
    proc = subprocess.Popen(["sh", "-c", command], cwd=clone, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    output = []
    try:
        for line in proc.stdout:
            output.append(line)
            if "accepting connections on" in line:
                break
        assert "accepting connections on" in "".join(output[-1:]), "".join(output[-40:])
        check = subprocess.run([str(clone / ".venv/bin/python3"), "-c", "import confluent_kafka, broker"],
                               capture_output=True, text=True, timeout=60)
        assert check.returncode == 0, check.stderr
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(30)


# tools/test.sh on a fresh machine, simulated: a PATH holding only the basic tools the script uses and
# stubs that record what they are asked (apt-get "installs" a package by adding stubs of its commands)
STUB = """#!/bin/bash
echo "{name} $*" >> "$STUB_LOG"
{body}
"""
STUBS = {
    "apt-get": """
echo "Reading package lists... (apt-get's own output)"
if [ "$1" = install ]; then
    [ -n "$STUB_APT_FAILS" ] && case " $* " in *" $STUB_APT_FAILS "*) echo "E: Unable to locate package $STUB_APT_FAILS"; exit 100 ;; esac
    for pkg in "$@"; do
        case "$pkg" in
            openjdk-17-jdk-headless) cmds="java javac" ;;
            maven) cmds="mvn" ;;
            chromium) cmds="chromium" ;;
            chromium-driver) cmds="chromedriver" ;;
            kcat) cmds="kcat" ;;
            strace) cmds="strace" ;;
            krb5-kdc) cmds="krb5kdc" ;;
            krb5-admin-server) cmds="kadmin.local" ;;
            krb5-user) cmds="kinit" ;;
            libkrb5-dev) cmds="krb5-config" ;;
            libsasl2-modules-gssapi-mit) [ -n "$SHAREBROKER_SASL_PLUGINS" ] && /bin/mkdir -p "$SHAREBROKER_SASL_PLUGINS" &&
                : > "$SHAREBROKER_SASL_PLUGINS/libgssapiv2.so"; cmds="" ;;
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
    # the system Python: ensurepip present unless STUB_NO_ENSUREPIP; "-m venv DIR" makes DIR/bin/python
    "python": """
if [ "$1" = -c ]; then
    [ -z "$STUB_NO_ENSUREPIP" ]
elif [ "$1 $2" = "-m venv" ]; then
    /bin/mkdir -p "$3/bin"
    printf '#!/bin/bash\\necho "venv-python $*" >> "$STUB_LOG"\\n[ "$1 $2" != "-m pip" ] || echo "Collecting pytest (pip'"'"'s own output)"\\n' > "$3/bin/python"
    /bin/chmod +x "$3/bin/python"
fi""",
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
    for tool in ("bash", "env", "dirname", "mktemp", "rm", "cat"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    jvm = tmp_path / "jvm"  # the Java 21+ that Keycloak runs on (the project's machines have one)
    (jvm / "temurin-25").mkdir(parents=True)
    (jvm / "temurin-25" / "release").write_text('IMPLEMENTOR="Eclipse Adoptium"\nJAVA_VERSION="25.0.1"\n')
    return {"PATH": str(bin_dir), "STUB_BIN": str(bin_dir), "STUB_LOG": str(tmp_path / "calls"),
            "PYTHON": str(bin_dir / "python"), "HOME": str(tmp_path), "TMPDIR": str(tmp_path),
            "SHAREBROKER_VENV": str(tmp_path / "venv"), "SHAREBROKER_JVM_DIR": str(jvm)}


def run_script(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(ROOT / "tools/test.sh"), *args], env=env, capture_output=True, text=True,
                          timeout=60)


def calls(env: dict) -> list[str]:
    log = Path(env["STUB_LOG"])
    return log.read_text().splitlines() if log.exists() else []


def test_the_test_script_sets_up_a_fresh_machine_then_runs_pytest(tmp_path):
    env = fresh_machine(tmp_path)
    env["SHAREBROKER_SASL_PLUGINS"] = str(tmp_path / "sasl2")  # where the stub apt-get puts Cyrus SASL's plugin
    p = run_script(env, "-q", "tests/unit", "-k", "a b")
    assert p.returncode == 0, p.stderr
    install = "sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends"
    as_root = [re.sub(r"install -m 0755 \S+/x/usr/bin/promtool", "install -m 0755 .../x/usr/bin/promtool", c)
               for c in calls(env) if c.startswith("sudo")]
    assert as_root == ["sudo apt-get update -qq", f"{install} openjdk-17-jdk-headless", f"{install} maven",
                       f"{install} chromium chromium-driver",
                       "sudo install -m 0755 .../x/usr/bin/promtool /usr/local/bin/promtool",
                       f"{install} kcat", f"{install} strace",
                       f"{install} krb5-kdc krb5-admin-server krb5-user libkrb5-dev libsasl2-modules-gssapi-mit",
                       f"{install} nodejs npm"]
    assert "apt-get download -qq prometheus" in calls(env)
    # the package goes into a virtual environment made by the system Python, and pytest runs there
    python = [c for c in calls(env) if c.startswith(("python", "venv-python"))]
    assert python == ["python -c import ensurepip, venv", f"python -m venv {tmp_path}/venv",
                      "venv-python -m pip install -q -e .[test]", "venv-python --version",
                      "venv-python -m pytest -q tests/unit -k a b"]
    # quiet: apt-get's and pip's own output is kept in the set-up log, not shown
    for output in ("Reading package lists", "Collecting pytest"):
        assert output not in p.stdout + p.stderr
        assert output in (tmp_path / "sharebroker-test-setup.log").read_text()
    # Keycloak's distribution is fetched into the Maven cache
    keycloak = "org.keycloak:keycloak-quarkus-dist:26.4.2:zip"
    assert f"mvn -B -q dependency:get -Dartifact={keycloak} -Dtransitive=false" in calls(env)
    kc_zip = tmp_path / ".m2/repository/org/keycloak/keycloak-quarkus-dist/26.4.2/keycloak-quarkus-dist-26.4.2.zip"
    kc_zip.parent.mkdir(parents=True)
    kc_zip.write_bytes(b"")  # what Maven leaves there
    # a second run finds everything and installs nothing
    Path(env["STUB_LOG"]).unlink()
    assert run_script(env, "--install-only").returncode == 0
    assert calls(env) == ["venv-python -m pip install -q -e .[test]"]


def test_the_test_script_installs_python3_venv_where_the_system_python_lacks_it(tmp_path):
    env = {**fresh_machine(tmp_path), "STUB_NO_ENSUREPIP": "1"}
    assert run_script(env, "--install-only").returncode == 0
    install = "sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends"
    assert f"{install} python3-venv" in calls(env)


def test_the_test_script_shows_the_output_of_a_failed_step(tmp_path):
    env = {**fresh_machine(tmp_path), "STUB_APT_FAILS": "kcat"}
    p = run_script(env, "-q")
    assert p.returncode == 1
    assert "E: Unable to locate package kcat" in p.stderr and "Reading package lists" in p.stderr
    assert not [c for c in calls(env) if c.startswith("venv-python")]


def test_the_test_script_says_what_to_do_without_root_or_sudo(tmp_path):
    env = fresh_machine(tmp_path, sudo=False)
    p = run_script(env, "-q")
    assert p.returncode == 1
    assert "installing needs root and there is no sudo: run as root, or run this yourself first: apt-get update" \
        in p.stderr
    assert not [c for c in calls(env) if c.startswith(("python", "apt-get"))]
