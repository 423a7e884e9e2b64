"""ApiVersions answers are encoded once per version (broker.handlers.api_versions): the kept bytes are
what the codec makes of the answer built from objects, a request counted by client quotas still gets an
object (its throttle time goes in), and registering a handler makes the next answer list it."""
from __future__ import annotations

import asyncio

import pytest

import broker.handlers  # noqa: F401 -- registers every handler
from broker.dispatch import REGISTERED, Encoded, RequestContext
from broker.handlers import api_versions as av
from protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse


def ask(version: int, quota=None):
    ctx = RequestContext(None, None, 18, version, 1, "client")
    ctx.quota = quota
    req = ApiVersionsRequest(client_software_name="librdkafka", client_software_version="2.16.0")
    return asyncio.run(av.api_versions(ctx, req))


@pytest.mark.parametrize("version", range(0, 6))
def test_kept_answer_is_the_codecs(version):
    first, again = ask(version), ask(version)
    assert type(first) is Encoded and again is first
    b = bytearray()
    av.answer(version).encode_into(b, version)
    assert first.body == bytes(b)
    decoded, _ = ApiVersionsResponse.decode_from(memoryview(first.body), 0, version)
    assert decoded.error_code == 0 and decoded.api_keys


def test_counted_request_gets_an_object():
    assert type(ask(3, quota=object())) is ApiVersionsResponse


def test_a_new_registration_is_answered():
    before = ask(4)
    REGISTERED[0] += 1
    try:
        assert ask(4) is not before
    finally:
        REGISTERED[0] -= 1
