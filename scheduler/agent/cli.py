"""`wanka-agent`: the node agent as a command.

    wanka-agent --url wss://portal.example.com/ws/agent/ --bootstrap-token BT \\
        --datacenter dc-east --pod pod-3 --leaf leaf-12          # first start: enrols
    wanka-agent --url wss://portal.example.com/ws/agent/        # then: the kept token

The node token comes from ``--token`` (or ``WANKA_AGENT_TOKEN``, which keeps it out of the
process list), else from the state directory, else from enrolment with ``--bootstrap-token``,
which keeps it in the state directory for the next start.

Settings come from the command line, else from a TOML file (``--config``) with the same names
(``url``, ``backend``, ``datacenter``, ``grace_s``, ...), else from the defaults. Backends:

- ``nvml``: real GPUs through NVML, workloads as processes. Refuses to start without NVML.
- ``simulated``: simulated GPUs and workloads (timers), as the fleet runs; faults for drills.
- ``processes``: simulated GPUs, workloads as real processes: for trying real scripts on a
  machine without GPUs.

Logs go to stderr. The agent keeps its workloads running through any outage of the control
plane; stopping the agent (SIGINT, SIGTERM) stops its workloads with the grace period.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import random
import signal
import socket
import ssl
import sys
import time
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from scheduler.agent.agent import Agent, backoff_delay
from scheduler.agent.backends import Backend, TopologyLabels
from scheduler.agent.enrolment import (
    EnrolmentRefused,
    EnrolmentUnavailable,
    enrol,
    enrol_url,
    load_token,
    save_token,
)
from scheduler.agent.nvml import NvmlMachine, NvmlUnavailable
from scheduler.agent.processes import DEFAULT_GRACE_S, ProcessBackend
from scheduler.agent.simulated import SimulatedBackend, SimulatedGpus

logger = logging.getLogger("scheduler.agent.cli")

BACKENDS = ("nvml", "simulated", "processes")
TOKEN_ENV = "WANKA_AGENT_TOKEN"
EXIT_CONFIG = 2  # a setting is wrong or missing
EXIT_REFUSED = 3  # NVML missing, or the portal refused the bootstrap token


@dataclass(frozen=True)
class Settings:
    """Everything the agent is told, merged from flags, the config file and the defaults."""

    url: str = ""
    token: str | None = None
    bootstrap_token: str | None = None
    state_dir: str = "/var/lib/wanka-agent"
    backend: str = "nvml"
    hostname: str = ""
    datacenter: str | None = None
    pod: str | None = None
    leaf: str | None = None
    grace_s: float = DEFAULT_GRACE_S
    heartbeat_s: float = 5.0
    ca_file: str | None = None
    gpus: int = 8  # simulated backends only
    gpu_model: str = "H100-SXM-80GB"  # simulated backends only
    log_level: str = "INFO"

    @property
    def labels(self) -> TopologyLabels:
        """The topology labels."""
        return TopologyLabels(self.datacenter, self.pod, self.leaf)


class ConfigError(ValueError):
    """A setting that is wrong or missing; the message says which and why."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the agent until SIGINT or SIGTERM; returns the process exit code."""
    try:
        settings = load_settings(argv)
    except ConfigError as exc:
        print(f"wanka-agent: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    logging.basicConfig(
        level=settings.log_level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        backend = build_backend(settings)
    except NvmlUnavailable as exc:
        logger.error("the nvml backend cannot start: %s", exc)
        return EXIT_REFUSED
    try:
        token = resolve_token(settings, backend)
        asyncio.run(serve(settings, backend, token))
    except ConfigError as exc:
        logger.error("%s", exc)
        return EXIT_CONFIG
    except EnrolmentRefused as exc:
        logger.error("%s", exc)
        return EXIT_REFUSED
    finally:
        close = getattr(backend, "close", None)
        if close is not None:
            close()
    return 0


def load_settings(argv: Sequence[str] | None = None) -> Settings:
    """Flags over the config file over the defaults; raises ConfigError."""
    args = vars(_parser().parse_args(argv))
    config_path = args.pop("config")
    values = _read_config(Path(config_path)) if config_path else {}
    values.update({k: v for k, v in args.items() if v is not None})
    if "token" not in values and os.environ.get(TOKEN_ENV):
        values["token"] = os.environ[TOKEN_ENV]
    values.setdefault("hostname", socket.gethostname())
    settings = Settings(**values)
    if not settings.url:
        raise ConfigError("no portal URL: pass --url wss://HOST/ws/agent/ or set url")
    try:
        enrol_url(settings.url)  # the same check: a ws:// or wss:// URL with a host
    except ValueError as exc:
        raise ConfigError(f"url: {exc}") from None
    if settings.backend not in BACKENDS:
        raise ConfigError(f"backend must be one of {', '.join(BACKENDS)}, not {settings.backend}")
    return settings


def build_backend(settings: Settings) -> Backend:
    """The backend the settings name; raises NvmlUnavailable for nvml without NVML."""
    state_dir = Path(settings.state_dir)
    if settings.backend == "simulated":
        return SimulatedBackend(
            settings.hostname, settings.gpu_model, settings.gpus, labels=settings.labels
        )
    if settings.backend == "processes":
        machine = SimulatedGpus(
            settings.hostname, settings.gpu_model, settings.gpus, labels=settings.labels
        )
    else:
        machine = NvmlMachine(settings.hostname, settings.labels)
    return ProcessBackend(machine, state_dir, grace_s=settings.grace_s)


def resolve_token(
    settings: Settings, backend: Backend, retry_cap_s: float = 60.0, max_attempts: int = 0
) -> str:
    """The node token: given, kept, or obtained by enrolling (then kept). Enrolment is retried
    while the portal cannot be reached (`max_attempts` 0: forever); a refusal is raised."""
    if settings.token:
        return settings.token
    kept = load_token(Path(settings.state_dir))
    if kept:
        if settings.bootstrap_token:
            logger.info("already enrolled: using the kept token, not the bootstrap token")
        return kept
    if not settings.bootstrap_token:
        raise ConfigError(
            "no node token: pass --token, or --bootstrap-token on the first start to enrol"
        )
    missing = [name for name in ("datacenter", "pod", "leaf") if not getattr(settings, name)]
    if missing:
        raise ConfigError(f"enrolment needs the node's place: set {', '.join(missing)}")
    enrolled = _enrol_with_retries(settings, backend, retry_cap_s, max_attempts)
    path = save_token(Path(settings.state_dir), enrolled.token)
    logger.info("enrolled as node %s; token kept in %s", enrolled.node, path)
    return enrolled.token


async def serve(settings: Settings, backend: Backend, token: str) -> None:
    """Run the agent until SIGINT or SIGTERM, then stop the workloads it runs."""
    agent = Agent(
        settings.url,
        token,
        backend,
        heartbeat_s=settings.heartbeat_s,
        ssl_context=_ssl_context(settings),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    run = asyncio.create_task(agent.run())
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait({run, stopper}, return_when=asyncio.FIRST_COMPLETED)
    stopper.cancel()
    await agent.stop()
    await run
    if isinstance(backend, ProcessBackend):
        stopped = await backend.stop_all()
        if stopped:
            logger.warning("agent stopping: stopped workloads %s", stopped)


def _enrol_with_retries(settings: Settings, backend: Backend, cap_s: float, attempts: int):
    inventory = backend.inventory()
    rng, attempt = random.Random(), 0
    while True:
        try:
            return enrol(
                settings.url,
                settings.bootstrap_token or "",
                settings.hostname,
                inventory.enrolment_facts(),
                ssl_context=_ssl_context(settings),
            )
        except EnrolmentUnavailable as exc:
            attempt += 1
            if attempts and attempt >= attempts:
                raise
            delay = backoff_delay(attempt, rng, cap_s=cap_s)
            logger.warning("enrolment failed (%s); trying again in %.1f s", exc, delay)
            time.sleep(delay)


def _ssl_context(settings: Settings) -> ssl.SSLContext | None:
    if settings.ca_file is None:
        return None
    return ssl.create_default_context(cafile=settings.ca_file)


def _read_config(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read the config file {path}: {exc}") from None
    known = {f.name: f.type for f in fields(Settings)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ConfigError(f"{path}: unknown settings {unknown}; known: {sorted(known)}")
    return data


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wanka-agent",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add("--url", help="the portal's agent endpoint, wss://HOST/ws/agent/")
    add("--token", help=f"the node token (or set {TOKEN_ENV})")
    add("--bootstrap-token", help="a one-time enrolment token, for the first start")
    add("--state-dir", help="where the token and the workloads' files live")
    add("--backend", choices=BACKENDS, help="nvml (default), simulated or processes")
    add("--hostname", help="the node's name (default: this host's name)")
    add("--datacenter", help="topology label: the node's data center")
    add("--pod", help="topology label: the node's pod")
    add("--leaf", help="topology label: the node's leaf switch")
    add("--grace-s", type=float, help="seconds between SIGTERM and SIGKILL when stopping work")
    add("--heartbeat-s", type=float, help="seconds between heartbeats")
    add("--ca-file", help="CA bundle to trust for the portal's TLS certificate")
    add("--gpus", type=int, help="GPUs of a simulated node")
    add("--gpu-model", help="GPU model of a simulated node")
    add("--config", help="TOML file with any of these settings")
    add("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return parser


if __name__ == "__main__":
    sys.exit(main())
