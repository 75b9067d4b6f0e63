"""Each node's GPU telemetry over time, kept in Redis as the cluster's utilization history is
(`summary.HISTORY`, `ROLLUPS`): a point a minute for a day and a point an hour for 30 days, so
the node page draws DCGM-style charts of 1 h to 30 d from one Redis read.

A point is `[time, [[GPU, utilization %, memory used MiB, temperature C, power W], ...]]`,
whole numbers in a minute point (as DCGM reports most of them). A minute point samples the
first heartbeat of its minute, as a scrape would; an hour point is the mean of the hour's minute
points, GPU by GPU (means, not maxima, as the cluster's roll-ups: the 7 d and 30 d charts show
how a GPU was used; a minute's peak stays on the 24 h chart for a day).

The agents' server writes them (`Recorder`, one per connection): it remembers the minute it
last wrote and sums the hour so far, so a heartbeat adds no Redis command, except the first of
each minute, which adds an RPUSH, an LTRIM and an EXPIRE to the pipeline the heartbeat sends
anyway (and three more when the hour turns): no read, no extra round trip. Rolling the hours
up there is cheaper than in a periodic task, which would read every node's last 60 minutes
back each hour (12,500 lists, some 130 MB) to learn what the connections saw go by. Its price:
a connection that began mid-hour (a reconnect) rolls up only the minutes it saw, and the hour
in which a node fell silent gets no hour point (its minutes are kept for a day).

Memory: a minute point of an 8-GPU node is about 175 bytes of JSON and an hour point about
205, so a node costs 1,440 x 175 + 720 x 205 B, some 420 KB with Redis's list overhead (as
MEMORY USAGE counts it), and 12,500 nodes some 5.2 GB.
"""

import json
import time

from portal.cluster.summary import RANGES
from portal.core.redis import client

MINUTES = "wanka:gpu-history:minutes:"  # + node id: Redis list of minute points, newest last
HOURS = "wanka:gpu-history:hours:"  # + node id: Redis list of hour points, newest last
LISTS = {"minute": (MINUTES, 60, 1440), "hour": (HOURS, 3600, 720)}  # key, step (s), kept
SPANS = {span: kept for span, kept in RANGES.items() if kept[0] in LISTS}  # 1h ... 30d
FIGURES = ("util", "memory_used_mb", "temperature_c", "power_w")  # as a heartbeat names them
MEAN_DIGITS = (1, None, 1, None)  # an hour's mean of each: tenths of % and C, whole MiB and W


def _push(pipe, resolution: str, node_id: int, point: list) -> None:
    prefix, step, keep = LISTS[resolution]
    key = f"{prefix}{node_id}"
    pipe.rpush(key, json.dumps(point, separators=(",", ":")))
    pipe.ltrim(key, -keep, -1)
    pipe.expire(key, step * keep)  # a node gone from the fleet leaves nothing behind


class Recorder:
    """Writes one node's minute and hour points, from its connection's heartbeats."""

    def __init__(self, node_id: int):
        self.node_id = node_id
        self.minute = None  # the minute of the last point written
        self.hour = None  # the hour being summed
        # GPU index -> (minute points, then the sum of each figure): tuples of numbers, which
        # Python's collector stops walking (its full collections walk the live lists of every
        # connection: 8 a node, made anew each minute, out of reach of `Freezer`).
        self.sums = {}

    def add(self, pipe, now: float, gpus: list[dict]) -> None:
        """Queue on `pipe` the heartbeat's point if it is the first of its minute, and the
        mean of the hour before if it is the first of an hour."""
        minute = int(now // 60)
        if minute == self.minute or not gpus:
            return
        self.minute = minute
        rows = [[g["index"], *(round(g[f]) for f in FIGURES)] for g in gpus]
        _push(pipe, "minute", self.node_id, [int(now), rows])
        hour = int(now // 3600)
        if hour != self.hour:
            if self.sums:
                _push(pipe, "hour", self.node_id, [self.hour * 3600, self._means()])
            self.hour, self.sums = hour, {}
        for index, *values in rows:
            n, *sums = self.sums.get(index, (0,) * (1 + len(FIGURES)))
            self.sums[index] = (n + 1, *(s + v for s, v in zip(sums, values, strict=True)))

    def _means(self) -> list[list]:
        return [
            [index, *(round(s / n, d) for s, d in zip(sums, MEAN_DIGITS, strict=True))]
            for index, (n, *sums) in sorted(self.sums.items())
        ]


def node_history(node_id: int, span: str, now: float | None = None) -> dict:
    """The node's points over one of `SPANS` up to now: {"range", "since", "until", "points"}.
    One Redis read, of no more points than the range can hold."""
    resolution, seconds = SPANS[span]
    prefix, step, _ = LISTS[resolution]
    until = time.time() if now is None else now
    since = until - seconds
    raw = client().lrange(f"{prefix}{node_id}", -(seconds // step), -1)
    points = [p for p in map(json.loads, raw) if since <= p[0] <= until]
    return {"range": span, "since": since, "until": until, "points": points}


def by_gpu(history: dict) -> dict:
    """A history in columns, as charts want it: "ts", and per GPU its index and a list per
    figure, None where a point lacks the GPU."""
    points = history["points"]
    indices = sorted({row[0] for _, rows in points for row in rows})
    gpus = {i: {"index": i, **{f: [None] * len(points) for f in FIGURES}} for i in indices}
    for n, (_, rows) in enumerate(points):
        for index, *values in rows:
            for figure, value in zip(FIGURES, values, strict=True):
                gpus[index][figure][n] = value
    columns = {"ts": [p[0] for p in points], "gpus": list(gpus.values())}
    return {key: history[key] for key in ("range", "since", "until")} | columns
