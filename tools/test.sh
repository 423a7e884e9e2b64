#!/usr/bin/env bash
# The README's test command: sets up everything the test suite needs on a fresh machine (Debian; nothing
# needed but Python), then runs pytest with this script's arguments:
#
#     tools/test.sh -q                  # the whole suite (what .ci/run runs)
#     tools/test.sh -q tests/unit       # any pytest arguments
#     tools/test.sh --install-only      # only the set-up
#
# One function per requirement, each named need_*: it checks for what it needs and installs it only when
# it is missing, so a second run installs nothing. System packages come from Debian with apt-get, as root
# (through sudo when not root); REQUIREMENTS lists the functions in the order they run. To add one: write
# a need_* function (a comment saying which tests need it), add it to REQUIREMENTS.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore

say() { echo "tools/test.sh: $*" >&2; }
have() { command -v "$1" >/dev/null 2>&1; }

# Runs a command as root: directly when root, else through sudo; stops with a message otherwise.
as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif have sudo; then
        sudo "$@"
    else
        say "installing needs root and there is no sudo: run as root, or run this yourself first: $*"
        exit 1
    fi
}

APT_UPDATED=
# apt_ready WHAT: apt-get is there (else stop, naming WHAT to install by hand); its package lists updated once.
apt_ready() {
    if ! have apt-get; then
        say "no apt-get on this machine: install $1 yourself"
        exit 1
    fi
    if [ -z "$APT_UPDATED" ]; then
        as_root apt-get update -qq
        APT_UPDATED=1
    fi
}

# apt_install PACKAGE...: Debian packages, without their recommends.
apt_install() {
    apt_ready "the equivalents of the Debian packages '$*'"
    say "installing $*"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

# The Spark tests (tests/pipeline) run on a Java 17 runtime; the reference Apache Kafka 4.4 and the Java
# programs beside it (tests/kafka_ref, tests/differential, test_java_apps.py, ...) need the compiler too.
need_java() {
    { have java && have javac; } || apt_install openjdk-17-jdk-headless
}

# The reference Apache Kafka 4.4 and the Java clients, Streams, Connect and MirrorMaker 2 jars are resolved
# from Maven Central by tests/kafka_ref with Maven (cached in ~/.m2 and ~/.cache/sharebroker).
need_maven() {
    have mvn || apt_install maven
}

# The status-page test (tests/integration/test_status_page.py): headless chromium and its chromedriver.
need_chromium() {
    { have chromium && have chromedriver; } || apt_install chromium chromium-driver
}

# The alert rules (tests/integration/test_dashboard.py): promtool, taken out of Debian's prometheus
# package (no Prometheus server is installed or started).
need_promtool() {
    have promtool && return
    apt_ready "promtool (Prometheus)"
    say "installing promtool (from Debian's prometheus package)"
    local deb
    deb=$(mktemp -d)
    (cd "$deb" && apt-get download -qq prometheus && dpkg-deb -x prometheus_*.deb x)
    as_root install -m 0755 "$deb/x/usr/bin/promtool" /usr/local/bin/promtool
    rm -rf "$deb"
}

# The compaction tests read a cleaned log with kcat too (tests/integration/test_compaction.py).
need_kcat() {
    have kcat || apt_install kcat
}

# The Node applications of the differential suite (tests/differential/test_applications.py: kafkajs and
# @platformatic/kafka, installed by the test with npm from tests/differential/apps/package.json into
# ~/.cache/sharebroker/node-apps).
need_node() {
    { have node && have npm; } || apt_install nodejs npm
}

# The package itself, editable, with the test extra (pytest, the Kafka clients, pyspark, ...).
need_python_packages() {
    if ! "$PYTHON" -m pip --version >/dev/null 2>&1; then
        say "$PYTHON has no pip: install it (Debian: python3-pip, or python3 -m ensurepip) and run this again"
        exit 1
    fi
    "$PYTHON" -m pip install -q -e '.[test]'
}

REQUIREMENTS=(need_java need_maven need_chromium need_promtool need_kcat need_node need_python_packages)

install_only=
if [ "${1-}" = --install-only ]; then
    install_only=1
    shift
fi
for need in "${REQUIREMENTS[@]}"; do
    "$need"
done
if [ -n "$install_only" ]; then
    exit 0
fi
"$PYTHON" --version >&2
java -version
exec "$PYTHON" -m pytest "$@"
