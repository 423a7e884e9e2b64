"""What loads on first use: protocol.lazy_messages, the handler table, the record registry, and what a
started broker has imported (broker/README.md, "Start-up and idle memory")."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from broker.dispatch import load_handlers
from protocol.lazy_messages import LazyClass, module_of, resolve_names
from protocol.messages.join_group import JoinGroupResponse as RealJoinGroupResponse

ROOT = Path(__file__).resolve().parents[2]


def test_a_lazy_class_builds_the_real_class_and_keeps_nested_classes_lazy():
    lazy = LazyClass("protocol.messages.join_group", "JoinGroupResponse")
    member = lazy.JoinGroupResponseMember  # read before the class is: stays lazy
    assert isinstance(member, LazyClass)
    resp = lazy(error_code=0, members=[member(member_id="m")])
    assert type(resp) is RealJoinGroupResponse
    assert type(resp.members[0]) is RealJoinGroupResponse.JoinGroupResponseMember
    assert lazy.MAX_VERSION == RealJoinGroupResponse.MAX_VERSION  # constants are the real ones
    assert lazy.resolve() is RealJoinGroupResponse
    assert lazy.JoinGroupResponseMember is RealJoinGroupResponse.JoinGroupResponseMember  # once resolved
    assert resp.encode(9) == RealJoinGroupResponse(error_code=0, members=[
        RealJoinGroupResponse.JoinGroupResponseMember(member_id="m")]).encode(9)


def test_names_map_to_their_modules_and_unknown_names_fail_at_import():
    assert module_of("AddPartitionsToTxnResponse") == "protocol.messages.add_partitions_to_txn"
    assert module_of("ConsumerProtocolSubscription") == "protocol.messages.consumer_protocol_subscription"
    from protocol.lazy_messages import DescribeUserScramCredentialsRequest

    assert DescribeUserScramCredentialsRequest.resolve().API_KEY == 50
    with pytest.raises(ImportError):
        from protocol.lazy_messages import NoSuchThingResponse  # noqa: F401


def test_every_handler_serves_versions_inside_its_schema():
    handlers = [h for h in load_handlers() if h is not None]
    assert len(handlers) > 50
    for h in handlers:
        cls = h.request_cls
        assert cls.MIN_VERSION <= h.min_version <= h.max_version <= cls.MAX_VERSION, cls.__name__
        assert h.response_cls.API_KEY == h.api_key


# What a started broker that has served nothing must not have imported: no request needs it.
DEFERRED = {
    "broker.log.cleaner.cleaner", "broker.log.cleaner.worker", "broker.log.cleaner.transactions",  # first pass
    "broker.security.sasl",  # a SASL or TLS listener
    "broker.status_page", "html",  # a metrics listener
    "encodings.idna", "stringprep", "unicodedata",  # a listener on a host name (uvloop's lookup)
    "pickle", "ctypes",  # the cleaner's worker handle
}
# What every request may need: loaded before connections are accepted (an import opens files, which
# fails at the open-file limit: a connection would close unanswered).
REQUEST_PATH = {
    "coordinator.assignors.range", "coordinator.assignors.share_lag", "coordinator.assignors.uniform",
    "broker.share.partition", "broker.share.dlq", "hashlib", "hmac", "secrets", "crc32c",
}


def test_a_started_broker_has_loaded_what_requests_need_and_nothing_else(tmp_path):
    """Start-up (uvloop, as ``python -m broker``) imports every message and record codec, the assignors,
    the share-partition code and CRC32C, and binds the handlers' classes, before it accepts connections;
    it imports none of the cleaner's pass code, no SASL, no status page and no idna codec, and starts no
    name-lookup thread.  A Metadata request over a socket is answered."""
    script = textwrap.dedent(f"""
        import asyncio, json, os, socket, struct, sys
        import uvloop
        from broker.app import Broker
        from broker.config import BrokerConfig

        def threads():
            return sorted(open(f"/proc/self/task/{{t}}/comm").read().strip() for t in os.listdir("/proc/self/task"))

        async def main():
            config = BrokerConfig.load(None, {{}})
            config.set("log.dirs", {str(tmp_path / "data")!r})
            config.set("listeners", "PLAINTEXT://127.0.0.1:0")
            broker = Broker(config)
            await broker.start()
            await broker.components.wait_loaded()
            started = sorted(sys.modules)
            started_threads = threads()
            from protocol.messages.request_header import RequestHeader
            from protocol.messages.metadata import MetadataResponse
            import broker.handlers.metadata as h
            import broker.server as server
            from protocol.messages.api_versions import ApiVersionsResponse
            bound = (h.MetadataResponse is MetadataResponse and h._T is MetadataResponse.MetadataResponseTopic
                     and server.ApiVersionsResponse is ApiVersionsResponse)
            r, w = await asyncio.open_connection("127.0.0.1", broker.port)
            body = RequestHeader(request_api_key=3, request_api_version=4, correlation_id=7,
                                 client_id="t").encode(1) + bytes([0xff, 0xff, 0xff, 0xff, 0])  # all topics
            w.write(struct.pack(">i", len(body)) + body)
            size = struct.unpack(">i", await r.readexactly(4))[0]
            corr = struct.unpack(">i", (await r.readexactly(size))[:4])[0]
            w.close()
            await broker.stop()
            return dict(modules=started, threads=started_threads, corr=corr, bound=bound)

        print(json.dumps(uvloop.run(main())))
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    mods = set(result["modules"])
    for package in ("protocol.messages", "protocol.coordinator_records"):
        pkg_dir = ROOT.joinpath(*package.split("."))
        codecs = {f"{package}.{p.stem}" for p in pkg_dir.glob("*.py") if p.stem != "__init__"}
        assert codecs <= mods, sorted(codecs - mods)
    assert REQUEST_PATH <= mods, sorted(REQUEST_PATH - mods)
    assert not DEFERRED & mods, sorted(DEFERRED & mods)
    assert "libuv-worker" not in result["threads"], result["threads"]
    assert result["bound"] and result["corr"] == 7


def test_resolve_names_puts_the_real_classes_in_place_of_the_stand_ins():
    namespace = {"Resp": LazyClass("protocol.messages.join_group", "JoinGroupResponse"), "other": 1}
    namespace["Member"] = namespace["Resp"].JoinGroupResponseMember  # a module-level alias of a nested class
    resolve_names(namespace)
    assert namespace == {"Resp": RealJoinGroupResponse, "other": 1,
                         "Member": RealJoinGroupResponse.JoinGroupResponseMember}


def test_record_classes_load_on_first_lookup_of_their_type():
    script = textwrap.dedent("""
        import sys
        from protocol.coordinator_records import registry
        from protocol.coordinator_records.registry import GROUP_COORDINATOR_RECORDS, OffsetCommitKey
        before = "protocol.coordinator_records.offset_commit" in sys.modules
        key_cls, value_cls = GROUP_COORDINATOR_RECORDS[1]
        assert GROUP_COORDINATOR_RECORDS.get(1) == (key_cls, value_cls) and GROUP_COORDINATOR_RECORDS.get(9) is None
        assert OffsetCommitKey.resolve() is key_cls and key_cls.API_KEY == registry.RECORD_TYPES["OffsetCommit"] == 1
        print(before, "protocol.coordinator_records.group_metadata" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]
