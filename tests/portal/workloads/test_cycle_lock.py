"""One scheduling cycle at a time, under a lease that dies with its worker."""

import threading
import time

from portal.workloads import cycle


def test_a_lock_left_by_a_dead_worker_expires_within_the_lease(clean_redis):
    clean_redis.lock(cycle.LOCK, timeout=cycle.LEASE_S).acquire()  # ... and its worker died
    assert 0 < clean_redis.pttl(cycle.LOCK) <= cycle.LEASE_S * 1000
    assert cycle.run_cycles() is False  # held: the trigger is kept for the holder
    assert clean_redis.exists(cycle.AGAIN)


def test_a_running_cycle_renews_its_lease_and_keeps_others_out(clean_redis, monkeypatch):
    monkeypatch.setattr(cycle, "LEASE_S", 0.6)
    rounds = []

    def slow_cycle():
        rounds.append(time.monotonic())
        time.sleep(1.5)  # longer than the lease: only renewal keeps the lock

    monkeypatch.setattr(cycle, "scheduling_cycle", slow_cycle)
    runner = threading.Thread(target=cycle.run_cycles)
    runner.start()
    time.sleep(1.0)
    assert clean_redis.exists(cycle.LOCK)
    assert cycle.run_cycles() is False  # a second worker stays out, and asks for a round
    runner.join(timeout=10)
    assert len(rounds) == 2  # the running cycle went round once more for that trigger
    assert not clean_redis.exists(cycle.LOCK)
