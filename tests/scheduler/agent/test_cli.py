"""`wanka-agent`: settings, enrolment against a small local HTTP server, and a run to SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import stat
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from scheduler.agent import cli
from scheduler.agent.backends import Backend
from scheduler.agent.enrolment import EnrolmentRefused, EnrolmentUnavailable, enrol_url
from scheduler.agent.processes import ProcessBackend, recorded_group
from scheduler.agent.simulated import SimulatedGpus


class Portal:
    """A stand-in for the portal's enrolment endpoint: answers from a script, records posts."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, dict[str, Any]]] = []
        self.posts: list[tuple[str, dict[str, Any]]] = []
        portal = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the http.server spelling)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                portal.posts.append((self.path, json.loads(body)))
                status, answer = portal.answers.pop(0)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def ws_url(self) -> str:
        """The agent URL on the same host as the enrolment endpoint."""
        return f"ws://127.0.0.1:{self.server.server_address[1]}/ws/agent/"


@pytest.fixture
def portal() -> Iterator[Portal]:
    """A running Portal, shut down after the test."""
    server = Portal()
    server.thread.start()
    yield server
    server.server.shutdown()
    server.server.server_close()


ENROLLED = (201, {"node": "gpu-node-17", "token": "nt_secret"})
REFUSED = (
    400,
    {
        "errors": [
            {"field": "bootstrap_token", "reason": "This bootstrap token has already been used."}
        ]
    },
)
PLACE = ["--datacenter", "dc-east", "--pod", "pod-3", "--leaf", "leaf-12"]


def settings(portal: Portal, tmp_path: Path, *extra: str) -> cli.Settings:
    """Settings for a simulated node enrolling with `portal`, state in `tmp_path`."""
    argv = ["--url", portal.ws_url, "--state-dir", str(tmp_path / "state"), "--backend"]
    extra = ("--hostname", "gpu-node-17", "--gpu-model", "H200", *extra)
    return cli.load_settings([*argv, "simulated", *extra])


def backend(config: cli.Settings) -> Backend:
    """The backend the CLI builds for `config`: an 8-GPU simulated node."""
    return cli.build_backend(config)


@pytest.mark.parametrize(
    ("ws_url", "expected"),
    [
        pytest.param(
            "ws://127.0.0.1:8000/ws/agent/",
            "http://127.0.0.1:8000/api/v1/enrol/",
            id="ws becomes http on the same host and port",
        ),
        pytest.param(
            "wss://portal.example.com/ws/agent/?x=1",
            "https://portal.example.com/api/v1/enrol/",
            id="wss becomes https",
        ),
    ],
)
def test_the_enrolment_url_is_on_the_host_of_the_agent_url(ws_url: str, expected: str) -> None:
    assert enrol_url(ws_url) == expected


def test_an_http_url_is_not_an_agent_url() -> None:
    with pytest.raises(ValueError, match="expected a ws:// or wss:// URL"):
        enrol_url("https://portal.example.com/ws/agent/")


def test_the_first_start_enrols_keeps_the_token_private_and_later_starts_reuse_it(
    portal: Portal, tmp_path: Path
) -> None:
    portal.answers = [ENROLLED]
    first = settings(portal, tmp_path, "--bootstrap-token", "bt_once", *PLACE)
    assert cli.resolve_token(first, backend(first)) == "nt_secret"
    path, body = portal.posts[0]
    assert path == "/api/v1/enrol/"
    assert (body["bootstrap_token"], body["hostname"]) == ("bt_once", "gpu-node-17")
    facts = body["facts"]
    assert (facts["datacenter"], facts["pod"], facts["leaf"]) == ("dc-east", "pod-3", "leaf-12")
    assert (facts["gpu_model"], facts["gpu_count"]) == ("H200", 8)
    assert facts["nvlink"] == {"up": 144, "total": 144} and facts["cpu_count"] > 0
    kept = tmp_path / "state" / "token"
    assert kept.read_text().strip() == "nt_secret"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600

    # The next start: the kept token, even with the (now used) bootstrap token still given.
    assert cli.resolve_token(first, backend(first)) == "nt_secret"
    assert len(portal.posts) == 1


def test_a_refused_bootstrap_token_ends_the_agent_with_the_reason_and_no_token(
    portal: Portal, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    portal.answers = [REFUSED]
    argv = ["--url", portal.ws_url, "--state-dir", str(tmp_path / "state"), "--backend"]
    argv += ["simulated", "--bootstrap-token", "bt_used", *PLACE]
    assert cli.main(argv) == cli.EXIT_REFUSED
    assert "bootstrap_token: This bootstrap token has already been used." in caplog.text
    assert not (tmp_path / "state" / "token").exists()
    with pytest.raises(EnrolmentRefused) as refused:
        portal.answers = [REFUSED]
        config = settings(portal, tmp_path, "--bootstrap-token", "x", *PLACE)
        cli.resolve_token(config, backend(config))
    assert refused.value.status == 400 and refused.value.errors[0]["field"] == "bootstrap_token"


def test_a_portal_that_is_down_is_asked_again(portal: Portal, tmp_path: Path) -> None:
    portal.answers = [(503, {"detail": "starting"}), ENROLLED]
    config = settings(portal, tmp_path, "--bootstrap-token", "bt", *PLACE)
    assert cli.resolve_token(config, backend(config), retry_cap_s=0.05) == "nt_secret"
    assert len(portal.posts) == 2
    portal.answers = [(502, {})]
    (tmp_path / "state" / "token").unlink()
    with pytest.raises(EnrolmentUnavailable, match="502"):
        cli.resolve_token(config, backend(config), retry_cap_s=0.05, max_attempts=1)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        pytest.param([], "no node token: pass --token", id="no token of any kind"),
        pytest.param(
            ["--bootstrap-token", "bt", "--datacenter", "dc-east"],
            "enrolment needs the node's place: set pod, leaf",
            id="enrolment without the node's place",
        ),
    ],
)
def test_what_the_agent_cannot_start_without(
    portal: Portal, tmp_path: Path, extra: list[str], message: str
) -> None:
    with pytest.raises(cli.ConfigError, match=message):
        config = settings(portal, tmp_path, *extra)
        cli.resolve_token(config, backend(config))
    assert portal.posts == []


def test_flags_win_over_the_config_file_which_wins_over_the_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANKA_AGENT_TOKEN", "from-env")
    config = tmp_path / "agent.toml"
    config.write_text(
        'url = "wss://portal.example.com/ws/agent/"\nbackend = "processes"\n'
        'datacenter = "dc-west"\npod = "p1"\ngrace_s = 45\n'
    )
    loaded = cli.load_settings(["--config", str(config), "--backend", "simulated", "--pod", "p2"])
    assert loaded.url == "wss://portal.example.com/ws/agent/"
    assert (loaded.backend, loaded.grace_s, loaded.heartbeat_s) == ("simulated", 45, 5.0)
    assert loaded.labels == cli.TopologyLabels("dc-west", "p2", None)
    assert loaded.token == "from-env" and loaded.hostname


@pytest.mark.parametrize(
    ("config", "argv", "message"),
    [
        pytest.param("colour = 'blue'\n", [], "unknown settings ['colour']", id="an unknown key"),
        pytest.param("url = \n", [], "cannot read the config file", id="TOML that is not"),
        pytest.param("", [], "no portal URL", id="no URL anywhere"),
        pytest.param(
            "", ["--url", "https://portal/ws/agent/"], "url: expected a ws://", id="an http URL"
        ),
    ],
)
def test_a_bad_configuration_ends_the_agent_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture, config: str, argv: list[str], message: str
) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(config)
    assert cli.main(["--config", str(path), *argv]) == cli.EXIT_CONFIG
    assert message in capsys.readouterr().err


def test_the_nvml_backend_without_nvml_refuses_to_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # the package missing
    argv = ["--url", "ws://127.0.0.1:1/ws/agent/", "--token", "t", "--state-dir", str(tmp_path)]
    assert cli.main([*argv, "--backend", "nvml"]) == cli.EXIT_REFUSED
    assert "the nvml backend cannot start" in caplog.text and "nvidia-ml-py" in caplog.text


def test_the_agent_runs_work_until_sigterm_then_stops_it(agent_server: Any, tmp_path: Path) -> None:
    """The CLI's serve loop with real processes, ended by a real SIGTERM to this process."""

    async def scenario() -> None:
        async with agent_server() as server:
            config = cli.Settings(url=server.url, backend="processes", heartbeat_s=0.05,
                                  state_dir=str(tmp_path), grace_s=2.0)  # fmt: skip
            machine = SimulatedGpus("node-a", "H100-SXM-80GB", 2, 81559)
            runner = ProcessBackend(machine, tmp_path, grace_s=2.0, poll_s=0.05)
            serving = asyncio.create_task(cli.serve(config, runner, "tok-a"))
            peer = await server.next_connection()
            await peer.expect("hello")
            command = shlex.join([sys.executable, "-c", "import time; time.sleep(60)"])
            work = {"workload_id": 1, "gpu_indices": [0], "command": command, "env": {},
                    "simulated_duration_s": None, "nnodes": 1, "node_rank": 0,
                    "master_addr": "", "master_port": 0}  # fmt: skip
            await peer.send("desired_state", generation=1, assignments=[work])
            await peer.expect("event", lambda m: m["kind"] == "workload_started")
            pid = recorded_group(tmp_path / "workloads" / "1")["pgid"]
            os.kill(os.getpid(), signal.SIGTERM)
            async with asyncio.timeout(10):
                await serving
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)

    asyncio.run(scenario())
