"""A faststream application (tests/differential/test_applications.py): consume, transform, publish.

    python faststream_transform.py BOOTSTRAP SOURCE SINK_MANUAL SINK_AUTO GROUP_MANUAL GROUP_AUTO ENDS

Two subscribers of SOURCE (JSON values {"i": n}) on faststream's Kafka broker (aiokafka), each in its
consumer group, each publishing {"i": n, "double": 2n} under the record's key:
- GROUP_MANUAL with ``AckPolicy.MANUAL``: ``broker.publish`` to the same partition of SINK_MANUAL, then
  commits the record's offset with ``msg.ack()``;
- GROUP_AUTO with ``AckPolicy.ACK_FIRST`` (aiokafka's auto commit, also done when the consumer stops): the
  handler's return value is published to SINK_AUTO by ``@broker.publisher``.
Stops (the app's own ``exit()``, as on SIGTERM) once both have handled the record before ENDS
("end0,end1": each SOURCE partition's end offset), or after 30 s; prints what each handled as JSON:
{group: [[partition, offset], ...]}, in the order handled.
"""
import asyncio
import json
import sys

from faststream import AckPolicy, FastStream
from faststream.kafka import KafkaBroker, KafkaMessage, KafkaResponse

bootstrap, source, sink_manual, sink_auto, group_manual, group_auto, ends = sys.argv[1:]
ends = [int(e) for e in ends.split(",")]
broker = KafkaBroker(bootstrap, log_level=30)
app = FastStream(broker)
handled: dict[str, list[tuple[int, int]]] = {group_manual: [], group_auto: []}


def transform(body: dict) -> dict:
    return {"i": body["i"], "double": 2 * body["i"]}


def done(group: str) -> bool:
    last = {}
    for partition, offset in handled[group]:
        last[partition] = offset
    return all(last.get(p, -1) >= end - 1 for p, end in enumerate(ends))


def seen(group: str, msg: KafkaMessage) -> None:
    handled[group].append((msg.raw_message.partition, msg.raw_message.offset))
    if all(done(g) for g in handled):
        asyncio.get_running_loop().call_soon(app.exit)


@broker.subscriber(source, group_id=group_manual, auto_offset_reset="earliest", ack_policy=AckPolicy.MANUAL)
async def manual(body: dict, msg: KafkaMessage) -> None:
    raw = msg.raw_message
    await broker.publish(transform(body), sink_manual, key=raw.key, partition=raw.partition)
    await msg.ack()  # commits this record's offset + 1
    seen(group_manual, msg)


@broker.subscriber(source, group_id=group_auto, auto_offset_reset="earliest", ack_policy=AckPolicy.ACK_FIRST,
                   auto_commit_interval_ms=500)
@broker.publisher(sink_auto)
async def auto(body: dict, msg: KafkaMessage) -> KafkaResponse:
    seen(group_auto, msg)
    return KafkaResponse(transform(body), key=msg.raw_message.key)


@app.after_startup
async def deadline() -> None:
    asyncio.get_running_loop().call_later(30, app.exit)


if __name__ == "__main__":
    asyncio.run(app.run(log_level=30))
    print(json.dumps(handled))
