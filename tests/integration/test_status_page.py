"""The status page (``GET /`` on the metrics listener) as a person sees it, in a real browser.

Debian's chromium runs headless and selenium drives it through Debian's chromedriver (nothing is
downloaded; tools/test.sh installs both).  The test reads the rendered text of the page: the share group
with its state, members and per-partition numbers, a member leaving, the lag rising in the
sparkline, a consumer group's lag and the dead-letter topic's record count; the expected numbers
come from what the test itself produced and acknowledged.  Group and client ids full of HTML must
show as the text they are.  ``SHAREBROKER_STATUS_SCREENSHOT=path.png`` saves the final page
(deploy/status-page.png is made that way).
"""
from __future__ import annotations

import os
import re
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer, TopicPartition
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from tests.support import create_topic, set_group_configs, unique, until

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--window-size=1100,800"]


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(p)]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: apt-get install -y chromium chromium-driver (tools/test.sh does)")
    opts = webdriver.ChromeOptions()
    for flag in FLAGS + [f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"]:
        opts.add_argument(flag)
    opts.binary_location = CHROMIUM
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def _table(root, css: str) -> list[dict[str, str]]:
    tables = root.find_elements(By.CSS_SELECTOR, css)
    if not tables:
        return []
    heads = [th.text for th in tables[0].find_elements(By.CSS_SELECTOR, "thead th")]
    return [dict(zip(heads, [td.text for td in tr.find_elements(By.TAG_NAME, "td")]))
            for tr in tables[0].find_elements(By.CSS_SELECTOR, "tbody tr")]


def _spark(root) -> dict:
    svg = root.find_element(By.CSS_SELECTOR, "svg.spark")
    points = [tuple(map(float, p.split(","))) for p in
              (svg.find_element(By.TAG_NAME, "polyline").get_attribute("points") or "").split()] \
        if svg.find_elements(By.TAG_NAME, "polyline") else []
    return {"title": svg.find_element(By.TAG_NAME, "title").get_attribute("textContent"), "points": points,
            "displayed": svg.is_displayed()}


def read_page(driver, url: str) -> dict | None:
    """What the page shows, as text; None when it changed under the reader (read again)."""
    try:
        driver.get(url)
        page: dict = {"title": driver.title, "scripts": len(driver.find_elements(By.TAG_NAME, "script")),
                      "share": {}, "consumer": {}, "dlq": {}}
        for sec in driver.find_elements(By.CSS_SELECTOR, "section.share-group"):
            summary = sec.find_element(By.CSS_SELECTOR, "p.summary").text
            state, members, lag = re.search(r"state (\w+)\s+members (\d+)\s+lag ([\d,]+)", summary).groups()
            page["share"][sec.find_element(By.TAG_NAME, "h3").text] = {
                "state": state, "members": int(members), "lag": int(lag.replace(",", "")),
                "member_rows": _table(sec, "table.members"), "partitions": _table(sec, "table.share-partitions"),
                "spark": _spark(sec)}
        for row in driver.find_elements(By.CSS_SELECTOR, "table.consumer-groups tbody tr"):
            cells = row.find_elements(By.TAG_NAME, "td")
            page["consumer"][cells[0].text] = {"state": cells[2].text, "members": int(cells[3].text),
                                               "lag": int(cells[4].text.replace(",", "")), "spark": _spark(cells[5])}
        for row in _table(driver, "table.dlq-topics"):
            page["dlq"][row["Topic"]] = row
        return page
    except (StaleElementReferenceException, NoSuchElementException):
        return None


def num(text: str) -> int:
    return int(text.replace(",", ""))


def test_status_page_in_a_browser(broker_factory, browser):
    b = broker_factory({"sharebroker.metrics.listener": "127.0.0.1:0", "sharebroker.status.lag.sample.ms": 200})
    url = b.metrics_url.replace("/metrics", "/")
    with urllib.request.urlopen(url, timeout=10) as r:  # what the browser is given
        assert r.headers["Content-Type"] == "text/html; charset=utf-8"
        assert "script-src" not in r.headers["Content-Security-Policy"]
        assert r.headers["Content-Security-Policy"].startswith("default-src 'none'")
    bs = b.bootstrap
    topic = create_topic(bs, 1, prefix="orders")
    dlq = create_topic(bs, 1, prefix="dlq.orders", errors_deadletterqueue_group_enable="true")
    group = unique("billing") + ' <b>&amp; "x"</b>'  # group and client ids are user input: shown as text
    clients = ["worker-a <script>alert(1)</script>", "worker-b"]
    set_group_configs(bs, group, share_auto_offset_reset="earliest", errors_deadletterqueue_topic_name=dlq)
    first, bad = 20, 7
    p = Producer({"bootstrap.servers": bs})
    for i in range(first):
        p.produce(topic, b"bad" if i == bad else b"ok-%d" % i, partition=0)
    assert p.flush(15) == 0

    consumers = [ShareConsumer({"bootstrap.servers": bs, "group.id": group, "client.id": cid,
                                "share.acknowledgement.mode": "explicit"}) for cid in clients]
    for c in consumers:
        c.subscribe([topic])
    try:
        # Both members join and share the work; the bad record is rejected into the DLQ.
        done: set[int] = set()

        def consumed():
            for c in consumers:
                for m in c.poll(0.2) or []:
                    if m.error() is None:
                        c.acknowledge(m, AcknowledgeType.REJECT if m.value() == b"bad" else AcknowledgeType.ACCEPT)
                        done.add(m.offset())
                c.commit_sync(30)
            return len(done) == first
        until(consumed, 60, "the first records acknowledged")

        def settled():
            page = read_page(browser, url)
            g = page and page["share"].get(group)
            return g and g["members"] == 2 and g["partitions"] and \
                num(g["partitions"][0]["Start offset"]) == first and page
        page = until(settled, 30, "the page showing both members and the start offset past the records")
        g = page["share"][group]
        assert page["title"] == "sharebroker status" and page["scripts"] == 0
        assert g["state"] == "Stable" and g["lag"] == 0
        assert sorted(r["Client id"] for r in g["member_rows"]) == sorted(clients)
        assert all(r["Host"].endswith("127.0.0.1") and r["Member"] for r in g["member_rows"])
        assert g["partitions"] == [{"Topic": topic, "Partition": "0", "Start offset": str(first), "In-flight": "0",
                                    "Archived": "1", "Lag": "0"}]
        assert page["dlq"][dlq] == {"Topic": dlq, "Records": "1", "Appended": "1", "Share groups": group}

        # A member leaves: the page shows one member, and which one.
        consumers.pop().close()

        def one_member():
            page = read_page(browser, url)
            g = page and page["share"].get(group)
            return g and g["members"] == 1 and page
        g = until(one_member, 30, "the page showing the member that left gone")["share"][group]
        assert [r["Client id"] for r in g["member_rows"]] == clients[:1] and g["state"] == "Stable"

        # The member left stops polling; more records arrive in steps: the backlog rises, so does the sparkline
        # (to more than the 20 records a sample may have caught before they were acknowledged).
        more = 0
        for _step in range(3):
            for _ in range(10):
                p.produce(topic, b"later", partition=0)
            assert p.flush(15) == 0
            more += 10

            def lag_shown():
                page = read_page(browser, url)
                g = page and page["share"].get(group)
                return g and g["lag"] == more and f"now {more}," in g["spark"]["title"] and page
            page = until(lag_shown, 30, f"lag {more} on the page and in the sparkline")
        g = page["share"][group]
        assert g["partitions"][0]["Lag"] == str(more) and g["partitions"][0]["Start offset"] == str(first)
        spark = g["spark"]
        assert spark["displayed"] and len(spark["points"]) >= 4 and f"max {more}," in spark["title"]
        ys = [y for _, y in spark["points"]]
        assert ys[-1] == min(ys) < ys[0], "the line ends at its top (SVG y grows downwards)"

        # A consumer group that committed offset 5 of the partition.
        cgroup = unique("reports")
        c = Consumer({"bootstrap.servers": bs, "group.id": cgroup, "enable.auto.commit": False})
        try:
            c.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
        finally:
            c.close()
        lag = first + more - 5

        def consumer_group():
            pg = read_page(browser, url)
            return pg and cgroup in pg["consumer"] and f"now {lag}," in pg["consumer"][cgroup]["spark"]["title"] and pg
        page = until(consumer_group, 30, "the consumer group and its sampled lag on the page")
        assert page["consumer"][cgroup]["lag"] == lag and page["consumer"][cgroup]["members"] == 0
        assert page["consumer"][cgroup]["state"] == "Empty"
        assert page["scripts"] == 0
        shot = os.environ.get("SHAREBROKER_STATUS_SCREENSHOT")
        if shot:
            browser.save_screenshot(str(Path(shot).resolve()))
    finally:
        for c in consumers:
            c.close()

    # The last member leaves: the group is empty, its backlog stays.
    def empty():
        page = read_page(browser, url)
        g = page and page["share"].get(group)
        return g and g["members"] == 0 and page
    g = until(empty, 30, "the page showing the group empty")["share"][group]
    assert g["state"] == "Empty" and not g["member_rows"] and g["lag"] == more


def test_the_page_without_groups_and_unknown_paths(broker_factory, browser):
    b = broker_factory({"sharebroker.metrics.listener": "127.0.0.1:0"})
    page = read_page(browser, b.metrics_url.replace("/metrics", "/"))
    assert page["share"] == {} and page["consumer"] == {} and page["dlq"] == {}
    body = browser.find_element(By.TAG_NAME, "body").text
    assert "No share groups." in body and "No consumer groups." in body and "No dead-letter topics." in body
    browser.get(b.metrics_url)  # the metrics are still where they were
    assert "sharebroker_connections" in browser.find_element(By.TAG_NAME, "body").text
