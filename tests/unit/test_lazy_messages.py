"""Codec modules load on first use: protocol.lazy_messages, the handler table, and what start-up imports."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from broker.dispatch import load_handlers
from protocol.lazy_messages import LazyClass, module_of
from protocol.messages.join_group import JoinGroupResponse as RealJoinGroupResponse

ROOT = Path(__file__).resolve().parents[2]
# The codecs of the per-request hot paths, imported directly (protocol/lazy_messages.py says why).
EAGER = {"fetch", "metadata", "produce", "registry", "request_header", "share_acknowledge", "share_fetch"}


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


def test_a_started_broker_has_imported_only_the_hot_codecs(tmp_path):
    """Start-up imports the codecs of the hot paths only, not the compression extra, nor the CRC
    package or importlib.metadata (which read distribution metadata): each is loaded on first use."""
    script = textwrap.dedent(f"""
        import asyncio, json, sys
        from broker.app import Broker
        from broker.config import BrokerConfig

        async def main():
            config = BrokerConfig.load(None, {{}})
            config.set("log.dirs", {str(tmp_path / "data")!r})
            config.set("listeners", "PLAINTEXT://127.0.0.1:0")
            broker = Broker(config)
            await broker.start()
            await broker.components.wait_loaded()
            mods = sorted(sys.modules)
            await broker.stop()
            return mods

        print(json.dumps(asyncio.run(main())))
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    mods = set(json.loads(out.stdout.strip().splitlines()[-1]))
    codecs = {m.rpartition(".")[2] for m in mods if m.startswith("protocol.messages.")}
    assert codecs <= EAGER, sorted(codecs - EAGER)
    assert not {"cramjam", "crc32c", "importlib.metadata", "email"} & mods
