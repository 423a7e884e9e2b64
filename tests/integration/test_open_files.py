"""The open-file limit: logged at start-up; a topic that cannot be opened under it fails cleanly
(KAFKA_STORAGE_ERROR, nothing half-created) with a broker log line that names the limit."""
from __future__ import annotations

import re
import subprocess
import sys
import threading

from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support import until


def test_partitions_beyond_the_open_file_limit(tmp_path):
    cmd = (f"ulimit -Sn 160 && ulimit -Hn 160 && exec {sys.executable} -m broker --listen 127.0.0.1:0 "
           f"--data-dir {tmp_path / 'data'}")
    proc = subprocess.Popen(["bash", "-c", cmd], stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True).start()
    try:
        ready = until(lambda: next((m for m in map(re.compile(r"accepting connections on \S+:(\d+)").search,
                                                      list(lines)) if m), None), 30, "the broker to listen")
        assert any("open-file limit 160: room for about 53 partitions" in line for line in lines)
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{ready.group(1)}"})
        err = admin.create_topics([NewTopic("too-many", 100, 1)])["too-many"].exception(30)
        assert err is not None and err.args[0].code() == KafkaError.KAFKA_STORAGE_ERROR
        until(lambda: any("open-file limit, 160, is reached" in line for line in lines), 10,
              "the broker's warning about the open-file limit")
        # Nothing was half-created, and a topic that fits still can be.
        assert "too-many" not in admin.list_topics(timeout=10).topics
        assert admin.create_topics([NewTopic("fits", 4, 1)])["fits"].exception(30) is None
        assert not any("Traceback" in line for line in lines)
    finally:
        proc.terminate()
        proc.wait(20)
