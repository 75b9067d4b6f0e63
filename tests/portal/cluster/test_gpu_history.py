"""Each node's GPU history in Redis (real Redis): a point a minute from the heartbeats, trimmed
to a day, hour points that are the means of their minutes, read back by range in columns."""

import json

import pytest

from portal.cluster import gpu_history
from portal.cluster.gpu_history import HOURS, LISTS, MINUTES, Recorder, by_gpu, node_history
from portal.core.redis import client

HOUR = 1_800_000 * 3600  # a whole hour, as seconds since the epoch
NODE = 41


def gpu(index, util=50, memory=1000, temperature=40, power=300.0):
    return {"index": index, "util": util, "memory_used_mb": memory,
            "temperature_c": temperature, "power_w": power}  # fmt: skip


def beat(recorder, ts, gpus):
    """One heartbeat through a real pipeline, as the agents' server sends it."""
    with client().pipeline(transaction=False) as pipe:
        recorder.add(pipe, ts, gpus)
        pipe.execute()


def seed(node_id, now, minutes, gpus=2):
    """`minutes` minute points of `gpus` GPUs up to `now`, GPU i at 10 * i + 1 % busy."""
    recorder = Recorder(node_id)
    for m in range(minutes, 0, -1):
        beat(recorder, now - 60 * m, [gpu(i, util=10 * i + 1) for i in range(gpus)])


def stored(prefix, node_id=NODE):
    return [json.loads(p) for p in client().lrange(f"{prefix}{node_id}", 0, -1)]


def test_a_heartbeat_every_5_s_keeps_one_point_a_minute(clean_redis):
    recorder = Recorder(NODE)
    for second in range(0, 3 * 60, 5):  # three minutes of heartbeats, busier each minute
        beat(recorder, HOUR + second, [gpu(0, util=10 * (1 + second // 60)), gpu(1)])
    points = stored(MINUTES)
    assert [ts - HOUR for ts, _ in points] == [0, 60, 120]  # the first heartbeat of each
    assert [rows[0][1] for _, rows in points] == [10, 20, 30]
    assert points[0][1] == [[0, 10, 1000, 40, 300], [1, 50, 1000, 40, 300]]
    beat(Recorder(NODE + 1), HOUR, [])  # a heartbeat without GPUs writes nothing
    assert not clean_redis.exists(f"{MINUTES}{NODE + 1}")


def test_the_minutes_are_trimmed_to_a_day(clean_redis):
    recorder = Recorder(NODE)
    for minute in range(1500):
        beat(recorder, HOUR + 60 * minute + 7, [gpu(0, util=minute % 100)])
    points = stored(MINUTES)
    assert len(points) == 1440 == LISTS["minute"][2]
    assert points[0][0] == HOUR + 60 * 60 + 7  # the oldest 60 minutes are gone
    assert points[-1][0] == HOUR + 60 * 1499 + 7
    assert len(stored(HOURS)) == 24  # 25 hours begun, the last one not over
    # A node gone from the fleet leaves nothing once its history has run out.
    assert 86000 < clean_redis.ttl(f"{MINUTES}{NODE}") <= 86400
    assert 30 * 86400 - 400 < clean_redis.ttl(f"{HOURS}{NODE}") <= 30 * 86400


def test_an_hour_point_is_the_mean_of_its_minutes_gpu_by_gpu(clean_redis):
    recorder = Recorder(NODE)
    beat(recorder, HOUR + 10, [gpu(0, util=10, memory=100, temperature=30, power=100), gpu(1)])
    beat(recorder, HOUR + 20, [gpu(0, util=99), gpu(1, util=99)])  # same minute: no point
    beat(recorder, HOUR + 70, [gpu(0, util=20, memory=200, temperature=41, power=200)])
    beat(recorder, HOUR + 3599, [gpu(0, util=60, memory=301, temperature=50, power=301),
                                 gpu(1, util=90)])  # fmt: skip
    assert not stored(HOURS)  # the hour is not over
    beat(recorder, HOUR + 3600, [gpu(0, util=5), gpu(1, util=5)])
    ((ts, rows),) = stored(HOURS)
    assert ts == HOUR
    # GPU 0 over three minutes; GPU 1 missed one, so over its two: means, whole MiB and W.
    assert rows == [[0, 30.0, 200, 40.3, 200], [1, 70.0, 1000, 40.0, 300]]
    # Silent for two hours, it beats again: its last hour is rolled up, the silent ones not.
    beat(recorder, HOUR + 4 * 3600, [gpu(0)])
    assert [ts - HOUR for ts, _ in stored(HOURS)] == [0, 3600]
    assert stored(HOURS)[1][1] == [[0, 5.0, 1000, 40.0, 300], [1, 5.0, 1000, 40.0, 300]]


def test_the_hours_are_trimmed_too(clean_redis, monkeypatch):
    monkeypatch.setitem(LISTS, "hour", (HOURS, 3600, 3))
    recorder = Recorder(NODE)
    for hour in range(6):
        beat(recorder, HOUR + 3600 * hour, [gpu(0, util=hour)])
    assert [rows[0][1] for _, rows in stored(HOURS)] == [2.0, 3.0, 4.0]


@pytest.mark.parametrize(
    "span, minutes, expected",
    [
        ("1h", 90, 60),  # the last hour of an hour and a half
        ("6h", 90, 90),  # all of it
        ("24h", 1440, 1440),
    ],
)
def test_a_range_reads_its_own_points(clean_redis, span, minutes, expected):
    now = HOUR + 30
    seed(NODE, now, minutes)
    found = node_history(NODE, span, now=now)
    assert len(found["points"]) == expected
    assert found["until"] - found["since"] == gpu_history.SPANS[span][1]
    assert all(found["since"] <= ts <= now for ts, _ in found["points"])


def test_the_long_ranges_read_the_hours(clean_redis):
    for day in reversed(range(10)):  # a point a day for 10 days, oldest first, util = days ago
        clean_redis.rpush(f"{HOURS}{NODE}", json.dumps([HOUR - 86400 * day, [[0, day, 1, 2, 3]]]))
    clean_redis.rpush(f"{MINUTES}{NODE}", json.dumps([HOUR, [[0, 99, 1, 2, 3]]]))
    week = node_history(NODE, "7d", now=HOUR + 60)
    assert [rows[0][1] for _, rows in week["points"]] == [6, 5, 4, 3, 2, 1, 0]
    assert len(node_history(NODE, "30d", now=HOUR + 60)["points"]) == 10
    assert [rows[0][1] for _, rows in node_history(NODE, "1h", now=HOUR + 60)["points"]] == [99]


def test_one_redis_command_reads_a_range(clean_redis, monkeypatch):
    seed(NODE, HOUR, 5)
    sent = []
    execute = type(client()).execute_command
    monkeypatch.setattr(
        type(client()),
        "execute_command",
        lambda self, *args, **kw: sent.append(args[0]) or execute(self, *args, **kw),
    )
    node_history(NODE, "24h", now=HOUR)
    assert sent == ["LRANGE"]


def test_columns_per_gpu_with_gaps_where_a_gpu_was_missing(clean_redis):
    recorder = Recorder(NODE)
    beat(recorder, HOUR, [gpu(0, util=1), gpu(3, util=2)])
    beat(recorder, HOUR + 60, [gpu(0, util=3)])  # GPU 3 fell silent
    columns = by_gpu(node_history(NODE, "1h", now=HOUR + 61))
    assert columns["ts"] == [HOUR, HOUR + 60]
    assert [g["index"] for g in columns["gpus"]] == [0, 3]
    assert columns["gpus"][0]["util"] == [1, 3] and columns["gpus"][1]["util"] == [2, None]
    assert columns["gpus"][1]["memory_used_mb"] == [1000, None]
    assert by_gpu(node_history(NODE + 1, "1h", now=HOUR))["gpus"] == []  # none yet
