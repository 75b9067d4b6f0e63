"""A MIG job end to end: submitted through the API, placed by the cycle on the node's GPU in
MIG mode (GPU 1, whose one instance is idle but of another profile) rather than on its GPU not
in MIG mode (GPU 0, which best-fit would take), the agent re-slices that GPU through NVML and
the job's process sees its MIG device in CUDA_VISIBLE_DEVICES.

The agent is `wanka-agent --backend nvml` (real processes, as the processes backend runs
them) on a fake of NVML (`tests/fake_pynvml`, `tests.fake_nvml`), which stands in for NVML
because this machine has no GPU: it answers, and records the changes made to it, as NVML's
documentation says the real one does. `bench/device_check mig` sets a layout on a real GPU."""

import shlex
import sys

import pytest

from portal.cluster.models import Gpu, GpuModel
from portal.workloads.choices import State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import Allocation, LogChunk, Workload
from tests.builders import api_client, make_cluster, make_queue
from tests.portal.processes import start_agent, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

SAYS_ENV = shlex.join(
    [
        sys.executable,
        "-c",
        "import os, time; print('gpus', os.environ['CUDA_VISIBLE_DEVICES'], flush=True); "
        "time.sleep(60)",
    ]
)


def _output(job_id: int) -> str:
    return "\n".join(c.text for c in LogChunk.objects.filter(workload_id=job_id).order_by("id"))


def _profiles(node) -> list[str]:
    layout = Gpu.objects.get(node=node, index=1).mig
    return [device["profile"] for device in layout.get("devices", ())]


@pytest.fixture
def agent_on_two_h200s(portal_server, tmp_path, acme):
    """An agent on the fake NVML's node of two H200s, GPU 1 in MIG mode as one idle 7g.141gb
    (reported), a queue `llm` of two of them; the agent, its node and its NVML changes' file."""
    GpuModel.objects.create(name="NVIDIA H200", memory_gb=141)
    [node] = make_cluster({"dc1": {"p1": ("NVIDIA H200", 1)}}, nodes_per_leaf=1, connected=False)
    node.gpu_count = 2
    node.save(update_fields=["gpu_count"])
    changes = tmp_path / "nvml-changes.log"
    agent = start_agent(portal_server, node, tmp_path / "agent", fake_nvml_log=changes)
    try:
        wait_until(lambda: _profiles(node) == ["7g.141gb"], 30, "the layout", check=agent)
        make_queue(acme, "llm", **{"nvidia h200": 2})
        yield agent, node, changes
    finally:
        agent.stop()


def _submit(user, **asked) -> int:
    """A job of `asked` through the API, then a cycle: its id."""
    asked = {"queue": "llm", "gpu_model": "NVIDIA H200", "command": SAYS_ENV, **asked}
    response = api_client(user).post(
        "/api/v1/workloads/", {**asked, "checkpoint_policy": "none"}, format="json"
    )
    assert response.status_code == 201, response.json()
    scheduling_cycle()
    return response.json()["id"]


def test_a_mig_job_re_slices_an_idle_gpu_and_runs_on_its_mig_device(
    agent_on_two_h200s, celery_worker, clean_redis, alice, client
):
    agent, node, changes = agent_on_two_h200s
    job_id = _submit(alice, name="slice", gpus=1, mig="1g.18gb")
    wait_until(lambda: "gpus" in _output(job_id), 30, "the job's output", check=agent)
    [uuid] = _output(job_id).split()[1:2]
    assert uuid.startswith("MIG-")
    assert changes.read_text().splitlines() == [
        "GPU 1: MIG device 7g.141gb destroyed",
        "GPU 1: GPU instance 7g.141gb destroyed",
        "GPU 1: GPU instance 1g.18gb at slot 0",
        f"GPU 1: MIG device 1g.18gb {uuid}",
    ]
    assert Workload.objects.get(pk=job_id).state == State.RUNNING
    assert list(Allocation.objects.values_list("gpu_index", "slices")) == [(1, 1)]
    wait_until(lambda: _profiles(node) == ["1g.18gb"], 10, "the new layout reported")
    client.force_login(alice)
    assert "1g.18gb × NVIDIA H200" in client.get(f"/workloads/{job_id}/").content.decode()


def test_a_whole_gpu_job_takes_an_idle_gpu_in_mig_mode_and_the_agent_turns_mig_off(
    agent_on_two_h200s, celery_worker, clean_redis, alice
):
    """No MIG job waits, so the GPU in MIG mode is free to a two-GPU job: the cycle places it
    on both GPUs, the agent destroys the idle instance and turns MIG off before the job starts,
    the job sees both GPUs, and the node's next heartbeat shows GPU 1 out of MIG mode."""
    agent, node, changes = agent_on_two_h200s
    job_id = _submit(alice, name="whole", gpus=2)
    wait_until(lambda: "gpus" in _output(job_id), 30, "the job's output", check=agent)
    assert _output(job_id).split()[:2] == ["gpus", "0,1"]
    assert changes.read_text().splitlines() == [
        "GPU 1: MIG device 7g.141gb destroyed",
        "GPU 1: GPU instance 7g.141gb destroyed",
        "GPU 1: MIG mode off",
    ]
    wait_until(lambda: not Gpu.objects.get(node=node, index=1).mig, 10, "MIG off reported")
    assert Workload.objects.get(pk=job_id).state == State.RUNNING
