"""The load generator against simulated replicas on real sockets: least busy first, what a
request waited, and failures counted rather than lost."""

import asyncio
import json

from scheduler.agent.serving import SimulatedReplica
from scheduler.inference import Request
from scheduler.loadgen import drive


def run(coroutine):
    return asyncio.run(coroutine)


def test_requests_are_served_and_those_past_the_batch_wait():
    async def go():
        replica = SimulatedReplica("H800", slots=2)
        port = await replica.start()
        arrivals = [Request(0.0, 0, 8) for _ in range(4)]  # 0.2 s each on an H800
        report = await drive(arrivals, lambda: [("127.0.0.1", port)])
        replica.close()
        return report, replica

    report, replica = run(go())
    assert (report.sent, report.ok, report.failed) == (4, 4, 0)
    assert sorted(q > 0.1 for q in report.queued) == [False, False, True, True]
    assert replica.in_flight == 0 and replica.requests_per_s() == 0.4


def test_the_least_busy_replica_gets_the_next_request():
    async def go():
        replicas = [SimulatedReplica("H800") for _ in range(2)]
        ports = [await r.start() for r in replicas]
        arrivals = [Request(0.0, 0, 40) for _ in range(6)]
        task = asyncio.create_task(drive(arrivals, lambda: [("127.0.0.1", p) for p in ports]))
        await asyncio.sleep(0.5)
        held = [r.in_flight for r in replicas]
        await task
        return held

    assert run(go()) == [3, 3]


def test_without_a_replica_requests_fail_after_waiting_for_one():
    report = run(drive([Request(0.0, 1, 1)] * 3, lambda: [], wait_s=0.5))
    assert (report.ok, report.failed, report.errors["no replica"]) == (0, 3, 3)


def test_a_replica_refuses_what_it_cannot_serve():
    async def go():
        replica = SimulatedReplica("H800")
        port = await replica.start()
        answers = []
        for request in (
            b"POST /v1/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
            b"GET /health HTTP/1.1\r\n\r\n",
            b"GET /nowhere HTTP/1.1\r\n\r\n",
        ):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request)
            status = (await reader.readline()).split()[1]
            await reader.readuntil(b"\r\n\r\n")
            answers.append((int(status), json.loads(await reader.read(4096))))
            writer.close()
        replica.close()
        return answers

    (bad, why), health, missing = run(go())
    assert bad == 400 and "prompt_tokens" in why["reason"]
    assert health == (200, {"ok": True}) and missing[0] == 404
