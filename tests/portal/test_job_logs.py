"""A job's output, every layer real: `wanka-agent` runs the job as a process (the processes
backend, on simulated GPUs), ships what it prints, and the portal keeps it per attempt and node,
for the API, the page and the download; a second attempt after a fault has its own log."""

import shlex
import sys

import pytest
from django.test import Client

from portal.agents import intake
from portal.workloads.choices import State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import LogChunk, Workload
from scheduler import faults
from tests.builders import api_client, make_cluster, make_queue, make_workload
from tests.portal.processes import start_agent, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

# Prints who it is, then a line a second; says something on stderr too.
JOB = shlex.join(
    [
        sys.executable,
        "-c",
        "import os, sys, time\n"
        "print('run', os.getpid(), 'of workload', os.environ['WANKA_WORKLOAD_ID'])\n"
        "print('a warning', file=sys.stderr)\n"
        "for i in range(600):\n"
        "    print('tick', i, flush=True); time.sleep(0.2)\n",
    ]
)


@pytest.fixture
def agent(portal_server, celery_worker, clean_redis, tmp_path):
    [node] = make_cluster({"dc1": {"p1": ("H800", 1)}}, nodes_per_leaf=1, connected=False)
    child = start_agent(portal_server, node, tmp_path / "agent")
    yield node
    child.stop()


def _lines(api, workload, **query):
    body = api.get(f"/api/v1/workloads/{workload.pk}/logs/", query).json()
    return [line for chunk in body["chunks"] for line in chunk["lines"]], body


def test_the_output_of_each_attempt_is_read_through_the_api_and_the_page(agent, acme, bob):
    queue = make_queue(acme, "llm", h800=8)
    job = make_workload(queue, "printer", gpus=8, command=JOB)
    scheduling_cycle()
    api = api_client(bob)
    wait_until(lambda: "tick 3" in _lines(api, job)[0], 30, "the first run's output")
    first, body = _lines(api, job)
    assert first[0] == f"run {first[0].split()[1]} of workload {job.pk}"
    assert "a warning" in first  # stderr too, in the order written
    assert {c["node"] for c in body["chunks"]} == {agent.name}
    assert {c["attempt"] for c in body["chunks"]} == {0}

    # A fault that kills the job and leaves the node in service: a second attempt, same node.
    intake.record_fault(agent.pk, faults.lookup("xid-13"), "drill")
    wait_until(lambda: Workload.objects.get(pk=job.pk).attempt == 1, 30, "a second attempt")
    wait_until(lambda: "tick 2" in _lines(api, job, attempt=1)[0], 60, "the second run's output")
    second, body = _lines(api, job, attempt=1, node=agent.name)
    assert second[0].startswith("run ") and second[0] != first[0]  # another process
    assert {c["attempt"] for c in body["chunks"]} == {1}
    assert {(r["attempt"], r["node"]) for r in body["runs"]} == {(0, agent.name), (1, agent.name)}
    only_first, _ = _lines(api, job, attempt=0)
    assert only_first[0] == first[0] and not any(line == second[0] for line in only_first)

    # Reading on from a cursor gives only what came after it.
    cursor = body["next"]
    wait_until(lambda: _lines(api, job, attempt=1, since=cursor)[0], 10, "more output")
    later, _ = _lines(api, job, attempt=1, since=cursor)
    assert later[0].startswith("tick ") and int(later[0].split()[1]) > int(second[-1].split()[1])

    browser = Client()
    browser.force_login(bob)
    assert 'id="output"' in browser.get(f"/workloads/{job.pk}/").content.decode()
    text = b"".join(
        browser.get(f"/workloads/{job.pk}/output.txt", {"attempt": 1, "node": agent.name})
    ).decode()
    assert text.startswith(second[0] + "\n") and first[0] not in text
    everything = b"".join(browser.get(f"/workloads/{job.pk}/output.txt")).decode()
    assert f"[0 {agent.name}] {first[0]}\n" in everything
    assert f"[1 {agent.name}] {second[0]}\n" in everything

    job.refresh_from_db()
    assert job.state == State.RUNNING
    rows = LogChunk.objects.filter(workload=job).count()
    lines = sum(LogChunk.objects.filter(workload=job).values_list("lines", flat=True))
    assert rows < lines  # batches, not a row a line
