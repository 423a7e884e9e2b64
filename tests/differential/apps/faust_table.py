"""A faust-streaming application (tests/differential/test_applications.py): a table counting each key,
exactly once (FAUST_GUARANTEE=at_least_once for faust's default).

    python faust_table.py BOOTSTRAP TOPIC APP_ID DATA_DIR TOTAL

Counts the records of TOPIC per key in a table (in memory, changelogged to Kafka, so a restart recovers it
from the changelog topic); once the counts add up to TOTAL (or after 45 s) it writes them as JSON to
DATA_DIR/counts.json (faust takes over stdout) and stops itself with SIGTERM, as an operator would (the
worker commits on the way out).
"""
import json
import os
import signal
import sys
import time

import faust

bootstrap, source, app_id, data_dir, total = sys.argv[1:]
app = faust.App(app_id, broker=f"kafka://{bootstrap}", store="memory://", datadir=data_dir, web_enabled=False,
                topic_partitions=2, topic_replication_factor=1, topic_allow_declare=True,
                processing_guarantee=os.environ.get("FAUST_GUARANTEE", "exactly_once"))
events = app.topic(source, key_type=str, value_type=bytes, partitions=2)
counts = app.Table("counts", default=int, partitions=2)
started = time.monotonic()
printed = False


@app.agent(events)
async def count(stream):
    async for key, _ in stream.items():
        counts[key] += 1


@app.timer(0.1)
async def report():
    global printed
    if printed:
        return
    got = dict(counts.items())
    if sum(got.values()) >= int(total) or time.monotonic() - started > 45:
        printed = True
        with open(os.path.join(data_dir, "counts.json"), "w") as f:
            json.dump(got, f)
        os.kill(os.getpid(), signal.SIGTERM)


if __name__ == "__main__":
    # --without-web: the worker command's --with-web default overrides web_enabled=False, and every worker
    # would bind 0.0.0.0:6066 (a second faust scenario on the machine then fails to start)
    sys.argv[1:] = ["worker", "--without-web", "--loglevel", os.environ.get("FAUST_LOGLEVEL", "warn")]
    app.main()
