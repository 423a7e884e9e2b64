"""Transactions with aiokafka 0.14 and kafka-python 3.0: their transactional producers, read by a
confluent-kafka (librdkafka) read_committed consumer; aborted transactions stay invisible."""
from __future__ import annotations

import asyncio
import gc

import pytest

from tests.integration.test_transactions import consume_all
from tests.support import create_topic, unique


def test_aiokafka_transactions_interoperate(sharebroker):
    from aiokafka import AIOKafkaProducer

    bs = sharebroker.bootstrap
    topic = create_topic(bs)

    async def run():
        p = AIOKafkaProducer(bootstrap_servers=bs, transactional_id=unique("aio"), enable_idempotence=True)
        await p.start()
        try:
            async with p.transaction():
                for i in range(20):
                    await p.send(topic, b"aio-c-%d" % i, partition=0)
            await p.begin_transaction()
            for i in range(5):
                await p.send_and_wait(topic, b"aio-a-%d" % i, partition=0)
            await p.abort_transaction()
            async with p.transaction():
                await p.send(topic, b"aio-last", partition=0)
        finally:
            await p.stop()

    asyncio.run(run())
    values = consume_all(bs, topic, "read_committed", 21)
    assert sorted(values) == sorted([b"aio-c-%d" % i for i in range(20)] + [b"aio-last"])
    assert len(consume_all(bs, topic, "read_uncommitted", 26)) == 26


def test_aiokafka_fenced_producer_sees_producer_fenced(sharebroker):
    """aiokafka sends EndTxn / AddPartitionsToTxn / AddOffsetsToTxn v0, which predate PRODUCER_FENCED:
    a zombie must get INVALID_PRODUCER_EPOCH, which it raises as ProducerFenced (not UnknownError)."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import ProducerFenced

    bs = sharebroker.bootstrap
    topic = create_topic(bs)
    tid = unique("aio-fenced")

    async def run():
        old = AIOKafkaProducer(bootstrap_servers=bs, transactional_id=tid, enable_idempotence=True)
        await old.start()
        new = AIOKafkaProducer(bootstrap_servers=bs, transactional_id=tid, enable_idempotence=True)
        try:
            await old.begin_transaction()
            await new.start()  # InitProducerId bumps the epoch: `old` is a zombie
            async with new.transaction():
                await new.send(topic, b"fresh", partition=0)
            await old.send(topic, b"zombie", partition=0)  # its AddPartitionsToTxn v0 is fenced
            await old.commit_transaction()
        finally:
            await new.stop()
            await old.stop()

    with pytest.raises(ProducerFenced):
        asyncio.run(run())
    # aiokafka leaves the fenced commit's inner future with its exception unretrieved: collected here, asyncio
    # logs it now, not from a garbage collection during a later test (see tests/conftest.py on what that did)
    gc.collect()
    assert consume_all(bs, topic, "read_committed", 1) == [b"fresh"]


def test_kafka_python_transactions_interoperate(sharebroker):
    from kafka import KafkaProducer

    bs = sharebroker.bootstrap
    topic = create_topic(bs)
    p = KafkaProducer(bootstrap_servers=bs, transactional_id=unique("kp"), enable_idempotence=True)
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(10):
            p.send(topic, b"kp-c-%d" % i, partition=0)
        p.commit_transaction()
        p.begin_transaction()
        for i in range(4):
            p.send(topic, b"kp-a-%d" % i, partition=0)
        p.flush()
        p.abort_transaction()
    finally:
        p.close(5)
    assert sorted(consume_all(bs, topic, "read_committed", 10)) == sorted(b"kp-c-%d" % i for i in range(10))
    assert len(consume_all(bs, topic, "read_uncommitted", 14)) == 14
