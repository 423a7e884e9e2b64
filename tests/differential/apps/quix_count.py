"""A quixstreams application (tests/differential/test_applications.py): exactly-once, a stateful count per key.

    python quix_count.py BOOTSTRAP INPUT OUTPUT GROUP STATE_DIR RECORDS

Reads INPUT (JSON values {"i": n}) from the earliest offset, counts the records of each key in its state
(RocksDB in STATE_DIR, changelogged to Kafka) and writes {"n": count, "i": n} to OUTPUT; stops after RECORDS
outputs (or 30 s without a new record). Run again with an empty STATE_DIR, it recovers its counts from the
changelog topic.
"""
import sys

from quixstreams import Application

bootstrap, source, sink, group, state_dir, records = sys.argv[1:]
app = Application(broker_address=bootstrap, consumer_group=group, auto_offset_reset="earliest",
                  processing_guarantee="exactly-once", state_dir=state_dir, loglevel="WARNING")
out = app.topic(sink, key_serializer="str", value_serializer="json")
sdf = app.dataframe(app.topic(source, key_deserializer="str", value_deserializer="json"))


def count(value, state):
    n = state.get("n", 0) + 1
    state.set("n", n)
    return {"n": n, "i": value["i"]}


sdf.apply(count, stateful=True).to_topic(out)
app.run(count=int(records), timeout=30)
