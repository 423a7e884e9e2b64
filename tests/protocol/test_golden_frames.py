"""Golden frames: bytes real clients sent, decoded by our codec and re-encoded byte for byte.

tests/protocol/golden/<set>/ holds hex frames captured by tests/tools/capture_golden.py
(see golden/README.md).  Each file is one frame without its 4-byte length prefix:
request header + body (``*_req_*``) or response header + body (``*_resp_*``).
Checked both ways: bytes -> message -> the same bytes, and message -> bytes -> an
equal message.  The capture proxy itself is tested here against a scripted broker.
"""
from __future__ import annotations

import asyncio
import re
import struct
from pathlib import Path

import pytest

from protocol.messages.registry import REQUESTS, RESPONSES, ApiKey
from protocol.messages.request_header import RequestHeader
from protocol.messages.response_header import ResponseHeader
from tests.tools import capture_proxy
from tests.tools.capture_proxy import CaptureProxy, read_hex, rewrite_response

GOLDEN = Path(__file__).resolve().parent / "golden"
NAME = re.compile(r"^(?P<api>[a-z_]+)_(?P<kind>req|resp)_v(?P<version>\d+)_(?P<n>\d{3})\.hex$")
FILES = sorted(GOLDEN.glob("*/*.hex"))
REQUEST_FILES = [p for p in FILES if "_req_" in p.name]
RESPONSE_FILES = [p for p in FILES if "_resp_" in p.name]


def _id(p: Path) -> str:
    return f"{p.parent.name}/{p.stem}"


def request_header_version(api_key: int, api_version: int) -> int:
    cls = REQUESTS[api_key]
    return 2 if cls.FLEXIBLE_VERSION is not None and api_version >= cls.FLEXIBLE_VERSION else 1


def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == ApiKey.API_VERSIONS:  # so that any client can read it
        return 0
    cls = RESPONSES[api_key]
    return 1 if cls.FLEXIBLE_VERSION is not None and api_version >= cls.FLEXIBLE_VERSION else 0


def _normalize(obj):
    if isinstance(obj, list):
        return [_normalize(x) for x in obj]
    if isinstance(obj, memoryview):
        return bytes(obj)
    if hasattr(type(obj), "__slots__") and not isinstance(obj, (str, bytes)):
        for s in obj.__slots__:
            setattr(obj, s, _normalize(getattr(obj, s)))
    return obj


def _parse_name(path: Path):
    m = NAME.match(path.name)
    assert m, f"bad golden file name {path.name}"
    return m["api"], m["kind"], int(m["version"])


# ------------------------------------------------------------------ the set
def test_golden_set_is_present_and_modest():
    sets = {p.parent.name for p in FILES}
    assert {"confluent_kafka", "kafka_python", "aiokafka", "confluent_kafka_share"} <= sets
    assert 30 <= len(REQUEST_FILES) <= 120
    for p in FILES:
        assert len(read_hex(p)) <= 8192, p.name
        _parse_name(p)


def test_golden_requests_cover_the_core_apis():
    apis = {_parse_name(p)[0] for p in REQUEST_FILES}
    for api in ("api_versions", "metadata", "produce", "fetch", "list_offsets", "find_coordinator",
                "create_topics", "describe_configs", "offset_commit", "offset_fetch", "join_group",
                "sync_group", "heartbeat"):
        assert api in apis, api
    for client in ("confluent_kafka", "kafka_python", "aiokafka"):
        got = {_parse_name(p)[0] for p in REQUEST_FILES if p.parent.name == client}
        assert {"api_versions", "metadata", "produce", "fetch"} <= got, client


def test_golden_share_set_covers_share_apis_both_ways():
    share = {(_parse_name(p)[0], _parse_name(p)[1]) for p in FILES if p.parent.name == "confluent_kafka_share"}
    for api in ("share_group_heartbeat", "share_fetch", "share_acknowledge"):
        assert (api, "req") in share and (api, "resp") in share, api
    # responses are golden only from our own broker, i.e. only in the sets captured from it
    assert {p.parent.name for p in RESPONSE_FILES} == {"confluent_kafka_share", "confluent_kafka_telemetry"}


def test_golden_telemetry_set_covers_kip714_both_ways():
    got = {_parse_name(p)[:2] for p in FILES if p.parent.name == "confluent_kafka_telemetry"}
    for api in ("get_telemetry_subscriptions", "push_telemetry"):
        assert (api, "req") in got and (api, "resp") in got, api


# ------------------------------------------------------------------ both ways
@pytest.mark.parametrize("path", REQUEST_FILES, ids=_id)
def test_golden_request_round_trips(path):
    api, _, version = _parse_name(path)
    frame = read_hex(path)
    m = memoryview(frame)
    api_key, api_version = struct.unpack_from(">hh", frame)
    assert ApiKey(api_key).name.lower() == api and api_version == version
    hv = request_header_version(api_key, api_version)
    header, p = RequestHeader.decode_from(m, 0, hv)
    assert header.request_api_key == api_key and header.request_api_version == version
    assert header.client_id.startswith("golden-")
    cls = REQUESTS[api_key]
    body, end = cls.decode_from(m, p, version)
    assert end == len(frame), "trailing bytes after the body"
    assert header.encode(hv) + body.encode(version) == frame
    again = _normalize(cls.decode(body.encode(version), version))
    assert again == _normalize(body)


@pytest.mark.parametrize("path", RESPONSE_FILES, ids=_id)
def test_golden_response_round_trips(path):
    api, _, version = _parse_name(path)
    api_key = ApiKey[api.upper()]
    frame = read_hex(path)
    m = memoryview(frame)
    hv = response_header_version(api_key, version)
    header, p = ResponseHeader.decode_from(m, 0, hv)
    cls = RESPONSES[api_key]
    body, end = cls.decode_from(m, p, version)
    assert end == len(frame), "trailing bytes after the body"
    assert header.encode(hv) + body.encode(version) == frame
    assert _normalize(cls.decode(body.encode(version), version)) == _normalize(body)


def test_header_version_rules():
    assert request_header_version(ApiKey.API_VERSIONS, 2) == 1
    assert request_header_version(ApiKey.API_VERSIONS, 3) == 2
    assert request_header_version(ApiKey.FETCH, 11) == 1
    assert request_header_version(ApiKey.FETCH, 12) == 2
    assert request_header_version(ApiKey.SASL_HANDSHAKE, 1) == 1
    assert response_header_version(ApiKey.API_VERSIONS, 4) == 0
    assert response_header_version(ApiKey.METADATA, 9) == 1
    assert response_header_version(ApiKey.METADATA, 8) == 0


# ------------------------------------------------------------------ the proxy
async def _scripted_broker(responses_for):
    """A tiny broker: answers each request with ``responses_for(header, raw)`` frames."""

    async def on_client(reader, writer):
        try:
            while True:
                n = struct.unpack(">i", await reader.readexactly(4))[0]
                frame = await reader.readexactly(n)
                api_key, version, corr = struct.unpack_from(">hhi", frame)
                out = responses_for(api_key, version, corr)
                if out is not None:
                    writer.write(struct.pack(">i", len(out)) + out)
                    await writer.drain()
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()

    return await asyncio.start_server(on_client, "127.0.0.1", 0)


async def _call(port, frames):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    got = []
    for f in frames:
        writer.write(struct.pack(">i", len(f)) + f)
    await writer.drain()
    for _ in frames:
        n = struct.unpack(">i", await reader.readexactly(4))[0]
        got.append(await reader.readexactly(n))
    writer.close()
    return got


def _request(api_key, version, corr, body, client_id="golden-test"):
    hv = request_header_version(api_key, version)
    h = RequestHeader(request_api_key=api_key, request_api_version=version, correlation_id=corr,
                      client_id=client_id)
    return h.encode(hv) + body.encode(version)


def test_capture_proxy_records_and_pairs_frames(tmp_path):
    from protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
    from protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse

    def respond(api_key, version, corr):
        if api_key == ApiKey.API_VERSIONS:
            body = ApiVersionsResponse(api_keys=[ApiVersionsResponse.ApiVersion(api_key=1, max_version=17)])
        else:
            body = HeartbeatResponse(error_code=27)
        return ResponseHeader(correlation_id=corr).encode(response_header_version(api_key, version)) \
            + body.encode(version)

    av = _request(ApiKey.API_VERSIONS, 3, 7, ApiVersionsRequest(client_software_name="x",
                                                               client_software_version="1"))
    hb1 = _request(ApiKey.HEARTBEAT, 4, 8, HeartbeatRequest(group_id="g", generation_id=3, member_id="m"))
    hb2 = _request(ApiKey.HEARTBEAT, 4, 9, HeartbeatRequest(group_id="g", generation_id=4, member_id="m"))

    async def scenario():
        server = await _scripted_broker(respond)
        target = server.sockets[0].getsockname()[:2]
        try:
            async with CaptureProxy(target, tmp_path / "out") as proxy:
                replies = await _call(proxy.port, [av, hb1, hb2])
                await asyncio.sleep(0.05)
                return proxy, replies
        finally:
            server.close()
            await server.wait_closed()

    proxy, replies = asyncio.run(scenario())
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == ["api_versions_req_v3_000.hex", "api_versions_resp_v3_000.hex",
                     "heartbeat_req_v4_000.hex", "heartbeat_req_v4_001.hex",
                     "heartbeat_resp_v4_000.hex", "heartbeat_resp_v4_001.hex"]
    out = tmp_path / "out"
    assert read_hex(out / "api_versions_req_v3_000.hex") == av
    assert read_hex(out / "heartbeat_req_v4_001.hex") == hb2
    assert read_hex(out / "heartbeat_resp_v4_001.hex") == replies[2]
    assert struct.unpack_from(">i", replies[2])[0] == 9
    assert [(f.kind, f.correlation_id, f.client_id) for f in proxy.frames if f.kind == "resp"] == [
        ("resp", 7, "golden-test"), ("resp", 8, "golden-test"), ("resp", 9, "golden-test")]


def test_capture_proxy_rewrites_advertised_address():
    from protocol.messages.metadata import MetadataResponse

    body = MetadataResponse(brokers=[MetadataResponse.MetadataResponseBroker(
        node_id=1, host="127.0.0.1", port=9092)], cluster_id="c", controller_id=1)
    frame = ResponseHeader(correlation_id=5).encode(1) + body.encode(12)
    out = rewrite_response(frame, ApiKey.METADATA, 12, ("127.0.0.1", 9092), ("127.0.0.1", 40000))
    h, p = ResponseHeader.decode_from(memoryview(out), 0, 1)
    back = MetadataResponse.decode(out[p:], 12)
    assert h.correlation_id == 5 and (back.brokers[0].host, back.brokers[0].port) == ("127.0.0.1", 40000)
    # another address, or an API without addresses, passes through untouched
    assert rewrite_response(frame, ApiKey.METADATA, 12, ("10.0.0.1", 9092), ("127.0.0.1", 1)) is frame
    assert rewrite_response(b"\x00\x00\x00\x05", ApiKey.HEARTBEAT, 4, ("a", 1), ("b", 2)) == b"\x00\x00\x00\x05"


def test_hex_files_are_wrapped_and_read_back():
    data = bytes(range(200))
    text = capture_proxy.to_hex(data)
    assert all(len(line) <= 128 for line in text.splitlines())
    assert bytes.fromhex(text) == data
