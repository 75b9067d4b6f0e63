"""The utilization history rolled up into minutes and hours, offered by range on the dashboard
and as CSV (real Redis)."""

import csv
import io
import json
import time

import pytest

from portal.cluster.summary import ROLLED, ROLLUPS, history, record_point

HOUR = 1_800_000 * 3600  # a whole hour, as seconds since the epoch


def _record(ts, allocated, busy):
    total = {"gpus": 100, "allocated": allocated, "busy": busy}
    return record_point({"ts": ts, "total": total, "groups": []})


def test_each_minute_and_hour_become_the_mean_of_their_points(clean_redis):
    for second in range(0, 3 * 60, 2):  # three minutes: 10, 20 then 30 GPUs allocated
        _record(HOUR + second, allocated=10 * (1 + second // 60), busy=5)
    minutes = history("1h", now=HOUR + 180)
    assert [(p["ts"] - HOUR, p["allocated"]) for p in minutes] == [(0, 10), (60, 20)]
    assert not history("7d", now=HOUR + 180)  # the hour is not over
    _record(HOUR + 3600, allocated=40, busy=5)  # the next hour begins
    (hour,) = history("7d", now=HOUR + 3600)
    assert hour["ts"] == HOUR and hour["allocated"] == pytest.approx(20)  # of its 3 minutes
    assert clean_redis.hget(ROLLED, "hour") == str(HOUR // 3600)


def test_the_dashboard_offers_ranges_and_csv(clean_redis, bob, client):
    now = time.time()
    for i in range(5):
        point = {"ts": now - 600 + 60 * i, "gpus": 100, "allocated": 50.0 + i, "busy": 10.0}
        clean_redis.rpush(ROLLUPS["minute"][0], json.dumps(point))
    client.force_login(bob)
    page = client.get("/?range=6h").content.decode()
    assert 'href="?range=6h" aria-current="true"' in page
    assert 'data-live=""' in page  # a rolled-up range does not go on live
    rows = list(csv.reader(io.StringIO(client.get("/utilization.csv?range=6h").content.decode())))
    assert rows[0] == ["time", "gpus", "allocated", "busy"] and len(rows) == 6
    assert rows[1][2] == "50.0" and rows[1][0].endswith("+00:00")
