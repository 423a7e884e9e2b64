"""The status page's lag ring buffer and sparkline (pure logic; the page itself is tested in a browser)."""
from __future__ import annotations

import re

from broker.status_page import LagHistory, sparkline


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def history(samples: list[dict], slots: int = 4) -> tuple[LagHistory, Clock]:
    clock, it = Clock(), iter(samples)
    h = LagHistory(lambda: next(it), interval_s=10, slots=slots, clock=clock)
    for _ in samples:
        h.tick()
        clock.now += 10
    return h, clock


def test_the_ring_keeps_the_last_slots_oldest_first():
    g = ("share", "g")
    h, _ = history([{g: n} for n in range(6)])
    assert h.points(g) == [(1020.0, 2), (1030.0, 3), (1040.0, 4), (1050.0, 5)]
    assert h.window_s == 40


def test_a_group_missing_from_some_samples_has_gaps_and_goes_when_the_ring_forgets_it():
    a, b = ("share", "a"), ("consumer", "b")
    h, _ = history([{a: 1, b: 7}, {a: 2}, {a: 3, b: 9}, {a: 4}])
    assert h.points(b) == [(1000.0, 7), (1020.0, 9)]
    h2, _ = history([{a: 1, b: 7}, {a: 2}, {a: 3}, {a: 4}, {a: 5}], slots=4)
    assert h2.points(b) == [] and b not in h2._series and h2.points(a)[-1] == (1040.0, 5)


def test_sparkline_rises_with_the_lag_and_says_its_figures():
    svg = sparkline([(1000.0, 0), (1010.0, 5), (1020.0, 10)], now=1020.0, window_s=40)
    pts = [tuple(map(float, p.split(","))) for p in re.search(r'points="([^"]+)"', svg).group(1).split()]
    assert [x for x, _ in pts] == sorted(x for x, _ in pts)
    assert pts[0][1] > pts[1][1] > pts[2][1]          # SVG y grows downwards: a rising line
    assert pts[-1][0] > 200 and pts[0][0] > 100        # the samples sit in the right half of the 40 s window
    assert "now 10, max 10, min 0" in svg and "max 10</span>" in svg and "last 40 s" in svg


def test_sparkline_without_samples_and_with_one():
    assert "no samples yet" in sparkline([], now=0.0, window_s=3600)
    one = sparkline([(100.0, 3)], now=100.0, window_s=3600)
    assert len(re.search(r'points="([^"]+)"', one).group(1).split()) == 2 and "last 60 min" in one
