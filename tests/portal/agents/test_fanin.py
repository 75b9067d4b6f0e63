import logging

from portal.agents.fanin import FanInStats


def test_a_window_reports_rate_and_percentiles(caplog, monkeypatch):
    clock = iter([0.0, 1.0, 2.0, 10.5])
    monkeypatch.setattr("portal.agents.fanin.time.monotonic", lambda: next(clock))
    stats = FanInStats(period_s=10)
    caplog.set_level(logging.INFO, logger="portal.agents.fanin")
    for seconds in (0.001, 0.002, 0.100):
        stats.record(seconds)
    assert caplog.messages == [
        "agent fan-in: 3 messages in 10.5 s (0/s), handle p50 2.00 ms p99 100.00 ms"
    ]
    assert stats.durations == []
