"""Per-group share settings (broker/share/config.py): live changes, ISO-8601 durations,
share.auto.offset.reset values."""
from __future__ import annotations

import pytest

from protocol.errors import Errors

from broker.share.config import ShareGroupConfig, parse_auto_offset_reset, parse_iso_duration_ms
from broker.share.errors import ShareError
from broker.share.partition import ARCHIVED
from tests.unit.share_partition_support import make


# ---------------------------------------------------------------- config

async def test_group_config_changes_apply_to_a_live_partition():
    cfg = ShareGroupConfig()
    h = await make(sizes=(10,) * 3, start=0, config=cfg)
    cfg.update(record_lock_duration_ms=15_000)
    h.fetch("a", max_records=10)
    assert h.t.pending() == [15_000] and h.sp.acquisition_lock_timeout_ms == 15_000
    cfg.update(delivery_count_limit=1)
    h.t.advance(15_000)
    await h.sp.drain()
    assert h.last_write() == (0, 10, [(0, 9, ARCHIVED, 1)])
    with pytest.raises(ShareError) as e:
        cfg.update(isolation_level="read_commit", record_lock_duration_ms=1)
    assert e.value.code == Errors.INVALID_CONFIG and cfg.record_lock_duration_ms == 15_000


@pytest.mark.parametrize("text, ms", [
    ("PT1H", 3_600_000), ("P1D", 86_400_000), ("PT1.5S", 1500), ("PT-0.5S", -500),
    ("P1DT2H3M4.005S", 93_784_005), ("-PT1M", -60_000), ("pt10m", 600_000),
])
def test_iso_durations(text, ms):
    assert parse_iso_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["P", "PT", "1H", "P1H", "PT1D", ""])
def test_bad_iso_durations(text):
    with pytest.raises(ValueError):
        parse_iso_duration_ms(text)


def test_auto_offset_reset_values():
    assert parse_auto_offset_reset("Latest") == ("latest", None)
    assert parse_auto_offset_reset("earliest") == ("earliest", None)
    assert parse_auto_offset_reset("by_duration:PT5M") == ("by_duration", 300_000)
    for bad in ("by_duration:-PT5M", "by_duration:", "none", "by_duration"):
        with pytest.raises(ValueError):
            parse_auto_offset_reset(bad)
