"""The event-loop stall watch (``sharebroker.loop.stall.log.ms``): a stall is logged with its length,
the loop thread's time on a CPU / asleep in it, and the frames the loop thread was in."""
from __future__ import annotations

import asyncio
import logging
import re
import time

from broker import loop_watch
from broker.config import BrokerConfig

LINE = re.compile(r"event loop stalled (\d+) ms \(loop thread: on CPU (\d+) ms, waiting for a CPU (\d+) ms, "
                  r"blocked (\d+) ms; process CPU (\d+) ms.*\): (.*)")


def spin_on_the_loop(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def sleep_on_the_loop(seconds: float) -> None:
    time.sleep(seconds)


def stalls(caplog) -> list[tuple[int, int, int, int, str]]:
    out = []
    for r in caplog.records:
        m = LINE.search(r.getMessage())
        if m:
            out.append((int(m[1]), int(m[2]), int(m[3]), int(m[4]), m[6]))
    return out


def test_off_by_default():
    assert loop_watch.start(BrokerConfig({})) is None


def test_stalls_are_logged_with_their_cause_and_frames(caplog):
    caplog.set_level(logging.INFO, logger="sharebroker")

    async def main():
        watch = loop_watch.start(BrokerConfig({loop_watch.SETTING: "40"}))
        try:
            await asyncio.sleep(0.05)
            spin_on_the_loop(0.15)
            await asyncio.sleep(0.05)
            sleep_on_the_loop(0.15)
            await asyncio.sleep(0.05)
        finally:
            watch.stop()
        return watch

    watch = asyncio.run(main())
    found = stalls(caplog)
    spin = [s for s in found if "spin_on_the_loop" in s[4]]
    slept = [s for s in found if "sleep_on_the_loop" in s[4]]
    assert spin and slept, found
    ms, on_cpu, wait, blocked, _ = spin[0]
    assert ms >= 140 and on_cpu + wait >= 100 and blocked < 50, spin  # busy: on a CPU or waiting for one
    ms, on_cpu, wait, blocked, _ = slept[0]
    assert ms >= 140 and blocked >= 100 and on_cpu < 50, slept  # asleep in a system call
    assert watch.longest_ms >= 140
    assert any("longest" in r.getMessage() for r in caplog.records), "the longest stall is logged at stop"
