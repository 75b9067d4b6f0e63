"""`wanka`: the portal from a terminal, on its REST API only.

    wanka login --url https://portal.example.com      # asks for an API token, keeps it
    wanka submit job.yaml                             # the API's workload fields, YAML or JSON
    wanka ls [--state running] [--queue llm] [--all]
    wanka show ID
    wanka logs ID [-f] [--attempt N] [--node NAME]
    wanka cancel ID
    wanka wait ID [--until running|finished] [--timeout S]
    wanka quota
    wanka usage [--days 30 | --since ISO --until ISO] [--group-by queue,user]
    wanka serve service.yaml                          # an inference service, the API's fields
    wanka services
    wanka service ID                                  # its fields and the replicas serving
    wanka scale ID [--min N] [--max N] [--target REQUESTS]
    wanka unserve ID                                  # stop it: its replicas are stopped

Tables for people; `--json` prints what the API answered, for scripts. The portal and token
come from ``--url`` and ``--token``, else ``WANKA_URL`` and ``WANKA_TOKEN``, else what `login`
kept in ``$WANKA_CONFIG`` (default ``~/.config/wanka/config.json``, readable by its owner only).

Exit codes: 0 done (for `wait`: the job succeeded, or a service's replica was stopped by its
service, or the job runs with ``--until running``); 1 the API refused (its field and reason are
printed) or the job failed or was cancelled; 2 a wrong command line or file; 3 not signed in, or
the token was refused; 4 the portal cannot be reached or failed; 5 `wait` timed out; 141 its
reader went away (``wanka ls | head``), as any command killed by SIGPIPE.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from scheduler.agent.protocol import printable
from scheduler.client.api import ApiError, Client, Unreachable
from scheduler.words import amount

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_AUTH, EXIT_UNREACHABLE, EXIT_TIMEOUT = range(6)
EXIT_PIPE = 128 + 13  # SIGPIPE's, as the shell reports a command it killed
FINISHED = {"succeeded", "failed", "cancelled", "stopped"}
WAIT_POLL_S = 2.0


class UsageError(Exception):
    """A wrong command line, file or setting; the message says which."""


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:  # the reader is gone (`wanka ls | head`): so is what was left to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing to flush at exit
        return EXIT_PIPE


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.run(args) or EXIT_OK
    except UsageError as error:
        print(f"wanka: {error}", file=sys.stderr)
        return EXIT_USAGE
    except ApiError as error:
        for field, reason in error.errors:
            print(f"wanka: {field}: {reason}" if field else f"wanka: {reason}", file=sys.stderr)
        refused_login = error.status == 403 and args.command == "login"
        if error.status == 401 or refused_login:
            return EXIT_AUTH
        return EXIT_UNREACHABLE if error.status >= 500 else EXIT_REFUSED
    except Unreachable as error:
        print(f"wanka: {error}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except KeyboardInterrupt:
        return 130


# -- settings -----------------------------------------------------------------------------------


def config_path() -> Path:
    if os.environ.get("WANKA_CONFIG"):
        return Path(os.environ["WANKA_CONFIG"])
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "wanka" / "config.json"


def _saved() -> dict[str, str]:
    try:
        return json.loads(config_path().read_text())
    except FileNotFoundError:
        return {}
    except ValueError as error:
        raise UsageError(
            f"{config_path()} is not JSON ({error}); run `wanka login` again"
        ) from None


def _save(settings: dict[str, str]) -> None:
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Created readable by its owner only: it holds a token.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        json.dump(settings, file, indent=2)
    path.chmod(0o600)


def client(args: argparse.Namespace) -> Client:
    saved = _saved()
    url = args.url or os.environ.get("WANKA_URL") or saved.get("url")
    token = args.token or os.environ.get("WANKA_TOKEN") or saved.get("token")
    if not url or not token:
        print("wanka: not signed in; run `wanka login --url URL` first", file=sys.stderr)
        raise SystemExit(EXIT_AUTH)
    return Client(url, token, args.ca_file)


# -- commands -----------------------------------------------------------------------------------


def login(args: argparse.Namespace) -> int:
    url = args.url or os.environ.get("WANKA_URL") or _saved().get("url")
    if not url:
        raise UsageError("give the portal's address: wanka login --url https://HOST")
    token = args.token or os.environ.get("WANKA_TOKEN")
    if not token:
        token = getpass.getpass("API token (from the portal's API tokens page): ").strip()
    me = Client(url, token, args.ca_file).get("/api/v1/me/")
    _save({"url": url, "token": token})
    where = f"{me['role']} of {me['tenant']}" if me["tenant"] else "operator"
    print(f"Signed in to {url} as {me['username']} ({where}).")
    if me["token"]:
        scope = "read only" if me["token"]["scope"] == "read" else "read and write"
        expires = me["token"]["expires_at"]
        ends = _when(expires) if expires else "never"
        print(f"Token {me['token']['name']!r}: {scope}, expires {ends}.")
    return EXIT_OK


def submit(args: argparse.Namespace) -> int:
    spec = _load(args.file)
    workload = client(args).post("/api/v1/workloads/", spec, idempotency_key=uuid.uuid4().hex)
    if args.json:
        return _print_json(workload)
    name, queue, state = workload["name"], workload["queue"], workload["state"]
    print(f"Submitted workload {workload['id']} ({name}) to {queue}: {state}.")
    return EXIT_OK


def _models(workload: dict) -> str:
    """The model it runs on, or while it waits every model it accepts."""
    models = workload.get("gpu_models") or [workload["gpu_model"]]
    return "|".join(models) if workload["state"] == "pending" else workload["gpu_model"]


def ls(args: argparse.Namespace) -> int:
    api = client(args)
    query = {"state": args.state, "queue": args.queue, "ordering": "-submitted_at"}
    if args.all:
        workloads = list(api.pages("/api/v1/workloads/", **query))
        more = 0
    else:
        page = api.get("/api/v1/workloads/", limit=args.limit, **query)
        workloads, more = page["results"], page["count"] - len(page["results"])
    if args.json:
        return _print_json(workloads)
    rows = [
        (w["id"], w["name"], w["queue"], f"{w.get('mig') or w['gpus']} × {_models(w)}", w["state"],
         _when(w["submitted_at"]), _short(w.get("pending_reason") or ""))
        for w in workloads
    ]  # fmt: skip
    _table(("ID", "NAME", "QUEUE", "GPUS", "STATE", "SUBMITTED", "WHY"), rows)
    if more > 0:
        print(f"… and {more} more (--all, or --limit)", file=sys.stderr)
    return EXIT_OK


def show(args: argparse.Namespace) -> int:
    workload = client(args).get(f"/api/v1/workloads/{args.id}/")
    if args.json:
        return _print_json(workload)
    skip = {"events", "parallel_plans", "model", "env"}
    width = max(len(key) for key in workload)
    for key, value in workload.items():
        if key not in skip and value not in (None, "", [], {}):
            print(f"{key:<{width}}  {_when(value) if key.endswith('_at') else value}")
    if workload.get("env"):
        print(f"{'env':<{width}}  " + " ".join(f"{k}={v}" for k, v in workload["env"].items()))
    if workload.get("events"):
        print()
        rows = [
            (_when(e["at"]), e["from_state"], e["to_state"], e["reason"])
            for e in workload["events"]
        ]
        _table(("AT", "FROM", "TO", "REASON"), rows)
    return EXIT_OK


def logs(args: argparse.Namespace) -> int:
    api = client(args)
    since, attempt, shown = 0, None, None
    path = f"/api/v1/workloads/{args.id}/logs/"
    while True:
        body = api.get(
            path, timeout_s=60, since=since, attempt=args.attempt, node=args.node,
            follow="true" if args.follow else None,
        )  # fmt: skip
        if args.json:
            for chunk in body["chunks"]:
                print(json.dumps(chunk), flush=True)
        else:
            nodes = {run["node"] for run in body["runs"] if args.attempt in (None, run["attempt"])}
            for chunk in body["chunks"]:
                if args.attempt is None and chunk["attempt"] != attempt and shown is not None:
                    print(f"--- attempt {chunk['attempt']} ---", flush=True)
                attempt, shown = chunk["attempt"], True
                prefix = f"[{chunk['node']}] " if len(nodes) > 1 and not args.node else ""
                lines = map(printable, chunk["lines"])  # what older agents let through
                sys.stdout.write("".join(f"{prefix}{line}\n" for line in lines))
            sys.stdout.flush()
        since = body["next"]
        if not body["more"] and not (args.follow and body["writing"]):
            return EXIT_OK


def cancel(args: argparse.Namespace) -> int:
    workload = client(args).post(f"/api/v1/workloads/{args.id}/cancel/")
    if args.json:
        return _print_json(workload)
    print(f"Cancelled workload {workload['id']} ({workload['name']}).")
    return EXIT_OK


def wait(args: argparse.Namespace) -> int:
    api = client(args)
    deadline = time.monotonic() + args.timeout if args.timeout else None
    last = None
    while True:
        workload = api.get(f"/api/v1/workloads/{args.id}/")
        state = workload["state"]
        if state != last:
            reason = (
                f": {workload['pending_reason']}"
                if state == "pending" and workload.get("pending_reason")
                else ""
            )
            print(f"{_when(None)} {workload['name']} {state}{reason}", file=sys.stderr, flush=True)
            last = state
        if state in FINISHED or (args.until == "running" and state == "running"):
            if args.json:
                _print_json(workload)
            return EXIT_OK if state in ("succeeded", "stopped", "running") else EXIT_REFUSED
        if deadline is not None and time.monotonic() >= deadline:
            print(f"wanka: still {state} after {args.timeout:g} s", file=sys.stderr)
            return EXIT_TIMEOUT
        time.sleep(WAIT_POLL_S)


def quota(args: argparse.Namespace) -> int:
    api = client(args)
    queues = list(api.pages("/api/v1/queues/"))
    usage = api.get("/api/v1/usage/")
    if args.json:
        return _print_json({"queues": queues, "usage": usage})
    _table(
        ("QUEUE", "GPU MODEL", "GUARANTEE", "NOMINAL", "IN USE", "GPU-H 30D"),
        _quota_rows(queues, usage),
    )
    return EXIT_OK


def _quota_rows(queues: list[dict], usage: dict) -> list[tuple]:
    """A row per queue and GPU model of its quota, then per GPU family of its family quotas
    (in use: its models' GPUs together; a family quota has no guarantee)."""
    used = {(r["queue"], r["gpu_model"]): r for r in usage["rows"]}
    rows = []
    for queue in queues:
        name = queue["name"]
        for q in queue["quotas"]:
            row = used.get((name, q["gpu_model"]), {"in_use": 0, "gpu_hours": 0.0})
            rows.append(
                (name, q["gpu_model"], q["guarantee"], q["nominal"], amount(row["in_use"]),
                 f"{row['gpu_hours']:.1f}")
            )  # fmt: skip
        for q in queue.get("family_quotas", ()):  # an older portal's queues have none
            models = [used[name, m] for m in q.get("gpu_models", ()) if (name, m) in used]
            in_use = sum(r["in_use"] for r in models)
            hours = sum(r["gpu_hours"] for r in models)
            family = f"{q['family']} family"
            rows.append((name, family, "—", q["nominal"], amount(in_use), f"{hours:.1f}"))
    return rows


def usage(args: argparse.Namespace) -> int:
    until = args.until or datetime.now(UTC).isoformat()
    since = args.since or (datetime.fromisoformat(until) - timedelta(days=args.days)).isoformat()
    query = {"since": since, "until": until, "group_by": args.group_by}
    report = client(args).get("/api/v1/usage/", **query)
    if args.json:
        return _print_json(report)
    keys = report["group_by"]
    rows = [
        (*(r.get(key) or "—" for key in keys), amount(r["in_use"]), f"{r['gpu_hours']:.1f}",
         f"{r['cost']:.2f}")
        for r in report["rows"]
    ]  # fmt: skip
    print(f"GPU-hours from {_when(report['since'])} to {_when(report['until'])}")
    header = (*(key.replace("_", " ").upper() for key in keys), "IN USE", "GPU-HOURS")
    _table((*header, f"COST ({report['currency']})"), rows)
    print(f"total {report['gpu_hours']:.1f} GPU-hours, {report['cost']:.2f} {report['currency']}")
    return EXIT_OK


def serve(args: argparse.Namespace) -> int:
    spec = _load(args.file)
    service = client(args).post("/api/v1/services/", spec, idempotency_key=uuid.uuid4().hex)
    if args.json:
        return _print_json(service)
    print(f"Created service {service['id']} ({service['name']}) in {service['queue']}.")
    return EXIT_OK


def services(args: argparse.Namespace) -> int:
    found = list(client(args).pages("/api/v1/services/"))
    if args.json:
        return _print_json(found)
    rows = [
        (s["id"], s["name"] + ("" if s["active"] else " (stopped)"), s["queue"],
         f"{s['gpus_per_replica']} × {s['gpu_model']}", f"{s['replicas']}/{s['desired_replicas']}",
         f"{s['min_replicas']}-{s['max_replicas']}", _short(s["scale_reason"]))
        for s in found
    ]  # fmt: skip
    _table(("ID", "NAME", "QUEUE", "REPLICA", "NOW/WANTED", "BOUNDS", "WHY"), rows)
    return EXIT_OK


def service(args: argparse.Namespace) -> int:
    api = client(args)
    found = api.get(f"/api/v1/services/{args.id}/")
    endpoints = api.get(f"/api/v1/services/{args.id}/endpoints/")
    if args.json:
        return _print_json({**found, "endpoints": endpoints})
    width = max(len(key) for key in found)
    for key, value in found.items():
        if value not in (None, ""):
            print(f"{key:<{width}}  {_when(value) if key.endswith('_at') else value}")
    print()
    rows = [(e["workload"], e["host"], e["port"], e["in_flight"]) for e in endpoints]
    _table(("WORKLOAD", "HOST", "PORT", "IN FLIGHT"), rows)
    return EXIT_OK


def scale(args: argparse.Namespace) -> int:
    change = {"min_replicas": args.min, "max_replicas": args.max, "target_concurrency": args.target}
    change = {k: v for k, v in change.items() if v is not None}
    if not change:
        raise UsageError("say what changes: --min, --max or --target")
    found = client(args).patch(f"/api/v1/services/{args.id}/", change)
    if args.json:
        return _print_json(found)
    print(
        f"Service {found['name']}: {found['min_replicas']} to {found['max_replicas']} replicas "
        f"at {found['target_concurrency']:g} requests in flight each."
    )
    return EXIT_OK


def unserve(args: argparse.Namespace) -> int:
    client(args).delete(f"/api/v1/services/{args.id}/")
    print(f"Stopped service {args.id}; its replicas are stopped.")
    return EXIT_OK


# -- helpers ------------------------------------------------------------------------------------


def _load(name: str) -> Any:
    try:
        text = sys.stdin.read() if name == "-" else Path(name).read_text()
    except OSError as error:
        raise UsageError(f"cannot read {name}: {error.strerror}") from None
    try:
        spec = json.loads(text) if name.endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as error:
        raise UsageError(
            f"{name} is not valid {'JSON' if name.endswith('.json') else 'YAML'}: {error}"
        ) from None
    if not isinstance(spec, dict):
        raise UsageError(f"{name} must hold one workload: a mapping of its fields")
    return spec


def _print_json(value: Any) -> int:
    print(json.dumps(value, indent=2))
    return EXIT_OK


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(c) for c in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )


def _when(value: str | None) -> str:
    """An API time as local time, to the second; now when None."""
    moment = datetime.fromisoformat(value) if value else datetime.now(UTC)
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def _short(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", help="the portal, https://HOST (default: WANKA_URL, or login's)")
    common.add_argument("--token", help="an API token (default: WANKA_TOKEN, or login's)")
    common.add_argument("--ca-file", help="CA bundle to trust for the portal's certificate")
    common.add_argument("--json", action="store_true", help="print the API's JSON")
    parser = argparse.ArgumentParser(
        prog="wanka", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name, run, help_):
        sub = commands.add_parser(name, parents=[common], help=help_, description=help_)
        sub.set_defaults(run=run)
        return sub

    command("login", login, "check an API token and keep it for the next commands")
    command(
        "submit", submit, "submit a workload from a YAML or JSON file ('-': stdin)"
    ).add_argument("file")
    sub = command("ls", ls, "list workloads, newest first")
    sub.add_argument("--state", help="only in this state (pending, running, ...)")
    sub.add_argument("--queue", help="only of this queue")
    sub.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    sub.add_argument("--all", action="store_true", help="every one, page after page")
    command("show", show, "a workload's fields and history").add_argument("id", type=int)
    sub = command("logs", logs, "a workload's output")
    sub.add_argument("id", type=int)
    sub.add_argument("-f", "--follow", action="store_true", help="keep printing while it runs")
    sub.add_argument("--attempt", type=int, help="only this attempt (0 is the first run)")
    sub.add_argument("--node", help="only this node's output")
    command("cancel", cancel, "cancel a workload").add_argument("id", type=int)
    sub = command("wait", wait, "wait for a workload to finish (or to run)")
    sub.add_argument("id", type=int)
    sub.add_argument("--until", choices=["finished", "running"], default="finished")
    sub.add_argument("--timeout", type=float, help="give up after this many seconds (exit 5)")
    command("quota", quota, "your queues' quotas and what is in use")
    sub = command("usage", usage, "GPU-hours per queue and GPU model over a window")
    sub.add_argument("--days", type=float, default=30, help="the last N days (default 30)")
    sub.add_argument("--since", help="window start, ISO 8601 (e.g. 2026-11-01T00:00:00+00:00)")
    sub.add_argument("--until", help="window end, ISO 8601 (default: now)")
    sub.add_argument(
        "--group-by",
        help="comma-separated: tenant, queue, gpu_model, user (default: the first three)",
    )
    command("serve", serve, "create an inference service from a YAML or JSON file").add_argument(
        "file"
    )
    command("services", services, "list your inference services")
    command("service", service, "a service's fields and the replicas serving").add_argument(
        "id", type=int
    )
    sub = command("scale", scale, "change a service's replica bounds or target")
    sub.add_argument("id", type=int)
    sub.add_argument("--min", type=int, help="fewest replicas")
    sub.add_argument("--max", type=int, help="most replicas")
    sub.add_argument("--target", type=float, help="requests in flight per replica")
    command("unserve", unserve, "stop a service").add_argument("id", type=int)
    return parser


if __name__ == "__main__":
    sys.exit(main())
