"""`wanka`, the command-line client, run as a subprocess against a live portal (daphne, a Celery
worker, and `wanka-agent` running the jobs as real processes): login, submit, list, show,
follow the output, wait, cancel, quota and usage, with the exit codes scripts rely on; and an
inference service whose replica is a real server process."""

import json
import shlex
import socket
import subprocess
import sys
import threading
import urllib.request

import pytest
import yaml

from portal.cluster.models import GpuModel, Node
from portal.services import autoscaling
from portal.services.models import Service
from portal.tenancy.models import ApiToken
from portal.workloads.choices import State
from portal.workloads.models import Workload
from tests.builders import api_client, make_cluster, make_queue
from tests.portal.processes import ROOT, child_env, start_agent, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

SHORT = shlex.join(
    [
        sys.executable,
        "-c",
        "import time\nfor i in range(5): print('line', i, flush=True); time.sleep(0.4)",
    ]
)
LONG = shlex.join([sys.executable, "-c", "import time\ntime.sleep(600)"])


@pytest.fixture
def portal(portal_server, celery_worker, clean_redis, tmp_path, acme):
    [node] = make_cluster({"dc1": {"p1": ("H800", 1)}}, nodes_per_leaf=1, connected=False)
    make_queue(acme, "llm", h800=8)
    agent = start_agent(portal_server, node, tmp_path / "agent")
    yield f"http://127.0.0.1:{portal_server}"
    agent.stop()


def wanka(tmp_path, *args, stdin=None):
    """Run `wanka ARGS` with its own config file; (exit code, stdout, stderr)."""
    env = {**child_env(), "WANKA_CONFIG": str(tmp_path / "wanka.json")}
    env.pop("WANKA_URL", None), env.pop("WANKA_TOKEN", None)
    done = subprocess.run(
        [sys.executable, "-m", "scheduler.client.cli", *map(str, args)],
        cwd=ROOT, env=env, input=stdin, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return done.returncode, done.stdout, done.stderr


def wanka_into_a_closed_pipe(tmp_path, *args):
    """Run `wanka ARGS` writing into a pipe whose reader has gone; (exit code, stderr)."""
    env = {**child_env(), "WANKA_CONFIG": str(tmp_path / "wanka.json")}
    child = subprocess.Popen(
        [sys.executable, "-m", "scheduler.client.cli", *map(str, args)], cwd=ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    child.stdout.close()  # before it has written: its first write breaks the pipe
    return child.wait(timeout=120), child.stderr.read()


def test_a_researchers_day_from_the_terminal(portal, tmp_path, bob):
    _, key = ApiToken.issue(bob, "laptop")
    assert wanka(tmp_path, "ls")[0] == 3  # not signed in yet
    code, out, _ = wanka(tmp_path, "login", "--url", portal, "--token", key)
    assert code == 0 and "as bob (member of Acme)" in out
    assert (tmp_path / "wanka.json").stat().st_mode & 0o077 == 0  # its token is private

    job = tmp_path / "job.yaml"
    job.write_text(
        f"name: short\nqueue: llm\ngpu_model: H800\ngpus: 8\ncommand: {json.dumps(SHORT)}\n"
    )
    code, out, _ = wanka(tmp_path, "submit", job, "--json")
    assert code == 0
    short = json.loads(out)["id"]
    code, out, _ = wanka(tmp_path, "logs", short, "-f")  # follows until the job has ended
    assert (code, out) == (0, "".join(f"line {i}\n" for i in range(5)))
    code, _, err = wanka(tmp_path, "wait", short, "--timeout", "30")
    assert code == 0 and "succeeded" in err

    spec = json.dumps(
        {"name": "long", "queue": "llm", "gpu_model": "H800", "gpus": 8, "command": LONG}
    )
    code, out, _ = wanka(tmp_path, "submit", "-", stdin=spec)
    assert code == 0 and out.startswith("Submitted workload ")
    long = int(out.split()[2])
    assert wanka(tmp_path, "wait", long, "--until", "running", "--timeout", "30")[0] == 0
    code, out, _ = wanka(tmp_path, "ls")
    assert code == 0 and out.splitlines()[0].split() == [
        "ID",
        "NAME",
        "QUEUE",
        "GPUS",
        "STATE",
        "SUBMITTED",
        "WHY",
    ]
    assert [line.split()[1] for line in out.splitlines()[1:]] == ["long", "short"]
    assert wanka_into_a_closed_pipe(tmp_path, "ls") == (141, "")  # `wanka ls | head`: quietly
    code, out, _ = wanka(tmp_path, "quota")
    assert code == 0 and out.splitlines()[1].split()[:5] == ["llm", "H800", "0", "8", "8"]
    code, out, _ = wanka(tmp_path, "usage", "--json")
    [row] = json.loads(out)["rows"]
    assert (row["queue"], row["in_use"]) == ("llm", 8) and row["gpu_hours"] > 0
    code, out, _ = wanka(tmp_path, "usage", "--group-by", "queue,user")
    lines = out.splitlines()
    assert code == 0 and lines[1].split()[:4] == ["QUEUE", "USER", "IN", "USE"]
    assert lines[2].split()[:3] == ["llm", "bob", "8"] and lines[-1].startswith("total ")

    code, out, _ = wanka(tmp_path, "cancel", long)
    assert (code, out) == (0, f"Cancelled workload {long} (long).\n")
    assert "cancelled" in wanka(tmp_path, "show", long)[1]
    code, _, err = wanka(tmp_path, "cancel", long)
    assert code == 1 and err.startswith("wanka: state: ")  # the API's field and reason
    assert wanka(tmp_path, "wait", long)[0] == 1  # it did not succeed


def test_refusals_print_the_field_and_reason_with_exit_codes_for_scripts(portal, tmp_path, bob):
    _, read_only = ApiToken.issue(bob, "dashboards", scope="read")
    wanka(tmp_path, "login", "--url", portal, "--token", read_only)
    spec = json.dumps({"name": "x", "queue": "llm", "gpu_model": "H800", "gpus": 8})
    code, _, err = wanka(tmp_path, "submit", "-", stdin=spec)
    assert (code, err) == (1, "wanka: This API token is read-only (scope read).\n")
    _, key = ApiToken.issue(bob, "laptop")
    code, _, err = wanka(tmp_path, "submit", "-", "--token", key, stdin=spec.replace("8}", "0}"))
    assert code == 1 and err.startswith("wanka: gpus: ")
    typo = spec.replace('"gpus"', '"gpu"')  # a misspelt key in a job file is named, not dropped
    code, _, err = wanka(tmp_path, "submit", "-", "--token", key, stdin=typo)
    assert code == 1 and err.startswith("wanka: gpu: No such field. The fields are: name, queue,")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    assert wanka(tmp_path, "submit", bad)[0] == 2
    assert wanka(tmp_path, "show", 10**9)[0] == 1  # no such workload (404)
    assert wanka(tmp_path, "login", "--url", portal, "--token", "wk_wrong")[0] == 3
    code, _, err = wanka(tmp_path, "ls", "--url", "http://127.0.0.1:9")
    assert code == 4 and "cannot reach" in err


def test_the_example_job_file_is_a_submission_the_api_takes(acme_llm, bob):
    spec = yaml.safe_load((ROOT / "examples" / "job.yaml").read_text())
    answer = api_client(bob).post("/api/v1/workloads/", spec, format="json")
    assert answer.status_code == 201, answer.json()
    assert answer.json()["command"] == "python3 train_tiny.py --log-every 50"


def test_the_example_share_job_file_asks_for_a_quarter_of_a_gpu(acme_llm, bob):
    GpuModel.objects.filter(name="H800").update(memory_gb=80)
    spec = yaml.safe_load((ROOT / "examples" / "eval.yaml").read_text())
    answer = api_client(bob).post("/api/v1/workloads/", spec, format="json")
    assert answer.status_code == 201, answer.json()
    assert answer.json()["gpus"] == 0.25
    assert Workload.objects.get(pk=answer.json()["id"]).slices == 2


def test_the_example_mig_job_file_asks_for_a_1g_10gb_instance(acme_llm, bob):
    GpuModel.objects.filter(name="H800").update(memory_gb=80)
    spec = yaml.safe_load((ROOT / "examples" / "mig.yaml").read_text())
    answer = api_client(bob).post("/api/v1/workloads/", spec, format="json")
    assert answer.status_code == 201, answer.json()
    assert (answer.json()["gpus"], answer.json()["mig"]) == (1, "1g.10gb")


def test_an_inference_service_from_the_terminal_runs_real_replicas(portal, tmp_path, bob):
    """`wanka serve` a service whose replica is a real server process (`serve_tiny.py`); its
    load, written to the agent's load file, reaches the autoscaler; scale, list, stop."""
    _, key = ApiToken.issue(bob, "laptop")
    wanka(tmp_path, "login", "--url", portal, "--token", key)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    spec = yaml.safe_load((ROOT / "examples" / "service.yaml").read_text())
    spec.update(
        port=port,
        max_replicas=1,
        command=shlex.join([sys.executable, str(ROOT / "examples" / "serve_tiny.py")]),
    )
    code, out, _ = wanka(tmp_path, "serve", "-", stdin=json.dumps(spec))
    assert code == 0 and out.startswith("Created service ")
    service = Service.objects.get(name="tiny-chat")

    def ticked(predicate):
        autoscaling.tick()  # beat's tick, every 2 s in production
        return predicate()

    def endpoints():
        code, out, _ = wanka(tmp_path, "service", service.pk, "--json")
        return json.loads(out)["endpoints"]

    [endpoint] = wait_until(lambda: ticked(endpoints), 60, "the replica to serve")
    assert (endpoint["host"], endpoint["port"]) == (Node.objects.get().name, port)

    def ask():
        body = json.dumps({"prompt_tokens": 10, "output_tokens": 160}).encode()  # 4 s
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body)
        return json.load(urllib.request.urlopen(request, timeout=30))

    asking = [threading.Thread(target=ask) for _ in range(3)]
    for thread in asking:
        thread.start()
    wait_until(lambda: ticked(lambda: service.samples.filter(in_flight=3).exists()), 20, "its load")
    for thread in asking:
        thread.join()

    code, out, _ = wanka(tmp_path, "scale", service.pk, "--max", "2", "--target", "2")
    assert (code, out) == (0, "Service tiny-chat: 1 to 2 replicas at 2 requests in flight each.\n")
    code, out, _ = wanka(tmp_path, "services")
    assert out.splitlines()[1].split()[1:5] == ["tiny-chat", "llm", "8", "×"]
    code, out, _ = wanka(tmp_path, "unserve", service.pk)
    assert (code, out) == (0, f"Stopped service {service.pk}; its replicas are stopped.\n")
    [replica] = Workload.objects.filter(replica__service=service)
    assert replica.state == State.STOPPED
    assert "stopped" in replica.events.last().reason
    assert wanka(tmp_path, "wait", replica.pk)[0] == 0  # its service ended it: no failure
    with pytest.raises(OSError):  # its process is gone
        wait_until(lambda: not ask(), 10, "the server to stop")
