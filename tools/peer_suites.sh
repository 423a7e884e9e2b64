#!/usr/bin/env bash
# Runs our users' clients' own share-consumer suites against this broker (too heavy for the test suite):
#
#     tools/peer_suites.sh                        # librdkafka, confluent-kafka-python and franz-go
#     tools/peer_suites.sh librdkafka franz-go    # some of them
#
# Checkouts, builds, a virtual environment and logs go to $PEER_DIR (default
# ~/.cache/sharebroker/peer-suites), never into the repository. A checkout already there is used as it is
# (so a copy brought by other means works offline); otherwise it is cloned from GitHub at $LIBRDKAFKA_REF,
# $CKP_REF, $FRANZ_REF (default: the default branch). Each suite gets a broker of its own, started from this
# work tree with the broker settings that suite's CI gives its Kafka cluster (librdkafka's and
# confluent-kafka-python's CI start it with trivup, whose brokers auto-create topics with 3 partitions:
# num.partitions=3, which librdkafka's 0184 needs), on a free port, with a fresh
# data directory; it is stopped (by its pid) when the suite ends. The broker runs on $SHAREBROKER_VENV
# (default .venv, as tools/test.sh makes it).
#
# - librdkafka: tests 0170-0185 ($RDK_TESTS; the share consumer tests, *_mock and *_local need no broker) with
#   test-runner, TEST_KAFKA_VERSION=4.3.0, one test at a time; broker setting as in librdkafka's
#   packaging/tools/run-share-consumer-tests.sh (group.share.min.record.lock.duration.ms=1000; lock
#   duration left at its default). test.timeout.multiplier=$RDK_TIMEOUT_MULTIPLIER (default 5: a loaded
#   2-core machine runs 0170's sub-tests past the default 150 s limit of the whole test).
# - confluent-kafka-python: tests/integration/share_consumer with confluent-kafka $CKP_VERSION from PyPI
#   (BROKERS=...), broker settings of its tests/common TestUtils.broker_conf() (1 s locks). The Schema
#   Registry tests are left out (they need a Schema Registry). The throttle tests shell out to
#   kafka-configs.sh: a KAFKA_HOME whose bin/kafka-configs.sh runs Kafka 4.4's ConfigCommand from the
#   jars tests/kafka_ref resolves is made when java and mvn are there. Then the whole-batch test again on
#   a broker with fair acquisition off (group.share.fair.acquisition.enable=false, Kafka's exact way).
# - franz-go: pkg/kgo's TestShareGroup* and TestAuditShare* (KGO_SEEDS, KGO_TEST_RF=1; KGO_TEST_RECORDS as
#   set, franz-go's default 500,000 otherwise), default broker settings. Needs Go.
#
# Debian build packages for librdkafka (build-essential, libssl-dev, zlib1g-dev, libzstd-dev) are installed
# with apt-get when missing. The exit status is non-zero when any suite failed; each suite's output is in
# $PEER_DIR/logs/.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PEER_DIR=${PEER_DIR:-$HOME/.cache/sharebroker/peer-suites}
VENV=${SHAREBROKER_VENV:-$REPO/.venv}
CKP_VERSION=${CKP_VERSION:-2.16.1}
LOGS=$PEER_DIR/logs
RDK_TESTS=${RDK_TESTS:-0170,0171,0172,0173,0174,0175,0176,0177,0178,0179,0180,0181,0182,0183,0184,0185}
WHOLE_BATCH_TEST=tests/integration/share_consumer/test_share_consumer.py::test_poll_returns_whole_batch_exceeding_max_poll_records
mkdir -p "$LOGS"

say() { echo "tools/peer_suites.sh: $*" >&2; }
have() { command -v "$1" >/dev/null 2>&1; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# checkout NAME GITHUB_REPO REF: $PEER_DIR/NAME, cloned when absent.
checkout() {
    local dir=$PEER_DIR/$1
    if [ ! -d "$dir" ]; then
        say "cloning github.com/$2 ($3) into $dir"
        git clone -q "https://github.com/$2" "$dir" && git -C "$dir" checkout -q "$3" || return 1
    fi
    echo "$dir"
}

BROKER_PID=
# start_broker NAME KEY=VALUE...: a broker with these settings on a free port; sets BOOTSTRAP.
start_broker() {
    local name=$1 dir=$PEER_DIR/brokers/$1 set=() kv
    shift
    for kv in "$@"; do set+=(--set "$kv"); done
    rm -rf "$dir" && mkdir -p "$dir"
    (cd "$REPO" && PYTHONPATH=$REPO exec "$VENV/bin/python" -m broker --listen 127.0.0.1:0 \
        --data-dir "$dir/data" "${set[@]}" >"$dir/broker.log" 2>&1) &
    BROKER_PID=$!
    local deadline=$((SECONDS + 60))
    until BOOTSTRAP=$(grep -so 'accepting connections on [0-9.:]*' "$dir/broker.log" | awk '{print $4}') \
            && [ -n "$BOOTSTRAP" ]; do
        if [ $SECONDS -ge $deadline ] || ! kill -0 "$BROKER_PID" 2>/dev/null; then
            say "broker $name did not start; its log:" && cat "$dir/broker.log" >&2
            return 1
        fi
        sleep 0.2
    done
    say "broker $name on $BOOTSTRAP (settings: ${*:-defaults}; log $dir/broker.log)"
}
stop_broker() {
    [ -n "$BROKER_PID" ] && kill "$BROKER_PID" 2>/dev/null && wait "$BROKER_PID" 2>/dev/null
    BROKER_PID=
}
trap stop_broker EXIT

run_librdkafka() {
    local src
    src=$(checkout librdkafka confluentinc/librdkafka "${LIBRDKAFKA_REF:-master}") || return 1
    local pkg missing=()
    for pkg in build-essential libssl-dev zlib1g-dev libzstd-dev; do
        dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        say "installing ${missing[*]} with apt-get (log $LOGS/apt.log)"
        { as_root apt-get update -q && as_root apt-get install -y -q "${missing[@]}"; } >>"$LOGS/apt.log" 2>&1 \
            || return 1
    fi
    if [ ! -x "$src/tests/test-runner" ]; then
        say "building librdkafka and its test-runner (log $LOGS/librdkafka-build.log)"
        (cd "$src" && ./configure --disable-gssapi --disable-sasl && make -j2 libs \
            && make -C tests -j2 test-runner) >"$LOGS/librdkafka-build.log" 2>&1 || return 1
    fi
    start_broker librdkafka num.partitions=3 group.share.min.record.lock.duration.ms=1000 || return 1
    printf 'metadata.broker.list=%s\ntest.timeout.multiplier=%s\n' "$BOOTSTRAP" \
        "${RDK_TIMEOUT_MULTIPLIER:-5}" >"$src/tests/test.conf"
    (cd "$src/tests" && LD_LIBRARY_PATH=../src:../src-cpp TEST_KAFKA_VERSION=4.3.0 TESTS=$RDK_TESTS \
        ./test-runner -p1) >"$LOGS/librdkafka.log" 2>&1
    local rc=$?
    stop_broker
    sed 's/\x1b\[[0-9;]*m//g' "$LOGS/librdkafka.log" | grep -E '=+ Test .* (PASSED|FAILED)|failed at' >&2
    return $rc
}

run_python() {
    local src py=$PEER_DIR/venv/bin/python rc=0
    src=$(checkout confluent-kafka-python confluentinc/confluent-kafka-python "${CKP_REF:-master}") || return 1
    if ! "$py" -c "import confluent_kafka, trivup, pytest_timeout" 2>/dev/null; then
        "$VENV/bin/python" -m venv "$PEER_DIR/venv" && "$PEER_DIR/venv/bin/pip" install -q \
            "confluent-kafka[schemaregistry,avro,json,protobuf]==$CKP_VERSION" trivup pytest pytest-timeout \
            || return 1
    fi
    local env=()
    if have java && have mvn; then
        local cp
        cp=$(cd "$REPO" && "$VENV/bin/python" -m tests.kafka_ref classpath | tail -1) || return 1
        mkdir -p "$PEER_DIR/kafka-home/bin"
        printf '#!/bin/sh\nexec java -Xmx256m -cp "$(cat %s)" org.apache.kafka.tools.ConfigCommand "$@"\n' \
            "$cp" >"$PEER_DIR/kafka-home/bin/kafka-configs.sh"
        chmod +x "$PEER_DIR/kafka-home/bin/kafka-configs.sh"
        env=(KAFKA_HOME="$PEER_DIR/kafka-home")
    fi
    local settings=(num.partitions=3 group.share.record.lock.duration.ms=1000
                    group.share.min.record.lock.duration.ms=1000)
    start_broker confluent-kafka-python "${settings[@]}" || return 1
    (cd "$src" && env "${env[@]}" BROKERS="$BOOTSTRAP" "$py" -m pytest -p no:cacheprovider -q -rfEs \
        --timeout 300 tests/integration/share_consumer -k "not schema_registry") >"$LOGS/python.log" 2>&1 || rc=1
    stop_broker
    tail -n 3 "$LOGS/python.log" >&2
    start_broker kafka-exact "${settings[@]}" group.share.fair.acquisition.enable=false || return 1
    (cd "$src" && BROKERS="$BOOTSTRAP" "$py" -m pytest -p no:cacheprovider -q -rfE --timeout 300 \
        "$WHOLE_BATCH_TEST") >"$LOGS/python-kafka-exact.log" 2>&1 || rc=1
    stop_broker
    tail -n 1 "$LOGS/python-kafka-exact.log" >&2
    return $rc
}

run_franz_go() {
    have go || { say "franz-go needs Go"; return 1; }
    local src
    src=$(checkout franz-go twmb/franz-go "${FRANZ_REF:-master}") || return 1
    start_broker franz-go || return 1
    (cd "$src/pkg/kgo" && KGO_SEEDS=$BOOTSTRAP KGO_TEST_RF=1 KGO_LOG_LEVEL=none \
        go test -count=1 -v -timeout 40m -run 'TestShareGroup|TestAuditShare' .) >"$LOGS/franz-go.log" 2>&1
    local rc=$?
    stop_broker
    grep -E '^(--- |ok|FAIL)' "$LOGS/franz-go.log" >&2
    return $rc
}

[ $# -gt 0 ] || set -- librdkafka python franz-go
status=0
for suite in "$@"; do
    case $suite in
        librdkafka) run_librdkafka ;;
        python) run_python ;;
        franz-go) run_franz_go ;;
        *) say "unknown suite $suite (librdkafka, python, franz-go)"; false ;;
    esac
    rc=$?
    say "$suite: $([ $rc -eq 0 ] && echo passed || echo "FAILED (see $LOGS)")"
    [ $rc -eq 0 ] || status=1
done
exit $status
