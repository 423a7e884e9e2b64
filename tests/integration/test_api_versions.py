"""ApiVersions: advertised = served, every client API of Kafka 4.4 at Kafka's versions, Kafka 4.4's
features, and KIP-511 client validation.  (The reference Kafka 4.4's own answer is compared field by
field in tests/differential/test_protocol.py, scenario ``api_versions``.)"""
from __future__ import annotations

import re
from pathlib import Path


from broker.dispatch import load_handlers
from protocol.errors import Errors
from protocol.messages.api_versions import ApiVersionsRequest
from protocol.messages.registry import ApiKey
from tests import kafka_apis
from tests.wire import WireClient


def advertised_ranges(bootstrap: str) -> dict[int, tuple[int, int]]:
    with WireClient(bootstrap) as w:
        r = w.request(ApiVersionsRequest(client_software_name="wire-test", client_software_version="1.0"), 3)
    assert r.error_code == 0
    return {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}


def test_every_client_api_of_kafka_4_4_at_kafkas_versions(sharebroker):
    """Each API a Kafka 4.4 broker listener serves (its schemas' ``listeners``) is advertised with Kafka's
    highest stable version and no higher minimum, unless ``tests/kafka_apis`` lists it as deliberately
    not served; nothing is advertised that a Kafka broker does not serve; and the lists stay true."""
    ours = advertised_ranges(sharebroker.bootstrap)
    kafka = kafka_apis.broker_apis()
    excluded = kafka_apis.not_served()
    problems = []
    for key, api in sorted(kafka.items()):
        if key in excluded:
            if key in ours:
                problems.append(f"{key} {api.name}: served now, drop it from tests/kafka_apis.py's exclusions")
        elif key not in ours:
            problems.append(f"{key} {api.name}: not served (Kafka 4.4: {api.min_version}-{api.max_version})")
        elif ours[key][1] != api.max_version or ours[key][0] > api.min_version:
            problems.append(f"{key} {api.name}: ours {ours[key][0]}-{ours[key][1]}, "
                            f"Kafka 4.4 {api.min_version}-{api.max_version}")
    problems += [f"{key}: advertised, but not a Kafka 4.4 broker API" for key in sorted(set(ours) - set(kafka))]
    assert not problems, "\n".join(problems)
    # every API Kafka has is served or listed with its reason, and the controller-only list is exactly
    # what Kafka serves on no broker listener
    reference = kafka_apis.reference_apis()
    assert set(reference) == set(kafka) | set(excluded)
    assert set(kafka_apis.CONTROLLER_ONLY) == set(reference) - set(kafka)
    assert all(reference[k].name == name for k, (name, _) in excluded.items())


def _readme_api_table() -> dict[int, tuple[int, int] | None]:
    """The "Kafka 4.4's client APIs" table of docs/apis.md: {api key: (min, max), None where not served}. A
    row may name several keys ("29-31", "48, 49") with one range for all or one range each."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "apis.md").read_text()
    section = text[text.index("## Kafka 4.4's client APIs"):]
    end = section.find("\n#", 1)  # the next heading, or the end of the page
    section = section if end < 0 else section[:end]
    out = {}
    for keys, versions in re.findall(r"^\| ([\d, -]+) \| [^|]+ \| ([\d, —-]+) \|", section, re.M):
        def span(text: str) -> tuple[int, int]:  # "3" or "0-13"
            lo, _, hi = text.strip().partition("-")
            return int(lo), int(hi or lo)

        expanded = [k for part in keys.split(",") for k in range(span(part)[0], span(part)[1] + 1)]
        ranges = [None if v.strip() == "—" else span(v) for v in versions.split(",")]
        assert len(ranges) in (1, len(expanded)), keys
        for i, key in enumerate(expanded):
            assert key not in out, f"key {key} twice in the docs/apis.md table"
            out[key] = ranges[0] if len(ranges) == 1 else ranges[i]
    return out


def test_readme_api_table_is_what_apiversions_advertises(sharebroker):
    """Every broker API of Kafka 4.4 has its row, with the versions we advertise ("—": not served, and
    then one of the deliberate exclusions)."""
    ours = advertised_ranges(sharebroker.bootstrap)
    table = _readme_api_table()
    assert {k: v for k, v in table.items() if v is not None} == ours
    missing = {k for k, v in table.items() if v is None}
    assert missing <= set(kafka_apis.not_served())
    assert set(table) == set(kafka_apis.broker_apis())


def test_advertised_ranges_are_the_handler_table(sharebroker):
    with WireClient(sharebroker.bootstrap) as w:
        r = w.request(ApiVersionsRequest(client_software_name="wire-test", client_software_version="1.0"), 3)
    assert r.error_code == 0
    advertised = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
    served = {h.api_key: (h.advertised_min, h.max_version) for h in load_handlers() if h is not None}
    assert advertised == served
    assert advertised[ApiKey.PRODUCE] == (0, 13)            # v0-2 advertised as Kafka 4.x does
    assert advertised[ApiKey.SHARE_GROUP_HEARTBEAT] == (1, 1)  # librdkafka requires v1 in range
    assert advertised[ApiKey.SHARE_FETCH] == (1, 2)
    assert advertised[71] == advertised[72] == (0, 0)        # KIP-714 telemetry (test_client_telemetry.py)
    finalized = {f.name: f.max_version_level for f in r.finalized_features}
    assert finalized["share.version"] == 2 and finalized["group.version"] == 1  # 2: DLQ (KIP-1191)
    assert finalized["metadata.version"] == 33 and finalized["eligible.leader.replicas.version"] == 1 and finalized["transaction.version"] == 2
    # v3: only supported features with a minimum above 0 (KAFKA-17492); v4 lists them all
    assert {f.name for f in r.supported_features} == {"metadata.version"}
    with WireClient(sharebroker.bootstrap) as w:
        r4 = w.request(ApiVersionsRequest(client_software_name="wire-test", client_software_version="1.0"), 4)
    supported = {f.name: (f.min_version, f.max_version) for f in r4.supported_features}
    assert all(supported[n][0] <= lvl <= supported[n][1] for n, lvl in finalized.items())


def test_invalid_client_software_name_is_refused(sharebroker):
    with WireClient(sharebroker.bootstrap) as w:
        r = w.request(ApiVersionsRequest(client_software_name="bad name!", client_software_version="1"), 3)
    assert r.error_code == Errors.INVALID_REQUEST


def test_v5_checks_the_cluster_and_node_the_client_means(sharebroker):
    """KIP-1242: a v5 request naming another cluster id or node id gets REBOOTSTRAP_REQUIRED (no ranges);
    naming only one of them is INVALID_REQUEST; naming this broker, or neither, gets the ranges."""
    from protocol.messages.metadata import MetadataRequest

    with WireClient(sharebroker.bootstrap) as w:
        md = w.request(MetadataRequest(topics=[]), 12)

        def ask(**kw):
            return w.request(ApiVersionsRequest(client_software_name="wire-test", client_software_version="1.0",
                                                **kw), 5)

        for kw, code in (({"cluster_id": "AAAAAAAAAAAAAAAAAAAAAA", "node_id": md.controller_id},
                          Errors.REBOOTSTRAP_REQUIRED),
                         ({"cluster_id": md.cluster_id, "node_id": md.controller_id + 1}, Errors.REBOOTSTRAP_REQUIRED),
                         ({"node_id": md.controller_id}, Errors.INVALID_REQUEST),
                         ({"cluster_id": md.cluster_id}, Errors.INVALID_REQUEST)):
            r = ask(**kw)
            assert (r.error_code, r.api_keys) == (code, []), kw
        for kw in ({"cluster_id": md.cluster_id, "node_id": md.controller_id}, {}):
            r = ask(**kw)
            assert r.error_code == 0 and any(k.api_key == ApiKey.API_VERSIONS and k.max_version == 5
                                             for k in r.api_keys), kw
