"""The production topology on one machine, for trying it before spreading it over several:
N ASGI processes sharing one listening socket (the kernel hands each connection to one of
them), a Celery worker per queue, beat; on the PostgreSQL and Redis of DATABASE_URL and
REDIS_URL. A child that dies is started again; Ctrl-C or SIGTERM stops them all.

    manage.py production --port 8000 --web 4 --workers scheduling=2,recovery=2,telemetry=1

The same processes as systemd units, a Procfile, a container image and a reverse proxy that
carries WebSockets: `deploy/`.
"""

import os
import signal
import socket
import sys

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from portal.core import processes

QUEUES = {
    "scheduling": 2,
    "recovery": 2,
    "telemetry": 1,
    "notifications": 1,
    "webhooks": 8,  # threads: they wait on tenants' receivers
    "whatif": 1,
}


def parse_workers(text: str) -> dict[str, int]:
    """`scheduling=2,recovery=1`: the worker processes' concurrency per queue; queues not
    named keep their default, and 0 runs none for that queue."""
    workers = dict(QUEUES)
    for item in filter(None, text.split(",")):
        queue, _, count = item.partition("=")
        if queue not in QUEUES or not count.isdigit():
            raise CommandError(
                f"--workers: {item!r} is not QUEUE=N with a queue of {', '.join(QUEUES)}"
            )
        workers[queue] = int(count)
    return workers


class Command(BaseCommand):
    help = "Run the production topology locally: N ASGI processes, a worker per queue, beat."

    def add_arguments(self, parser):
        parser.add_argument("--bind", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--web", type=int, default=2, help="ASGI processes (default 2)")
        parser.add_argument("--workers", default="", help="QUEUE=N,... (concurrency per queue)")
        parser.add_argument("--no-beat", action="store_true", help="another machine runs beat")
        parser.add_argument("--no-migrate", action="store_true")

    def handle(self, *args, bind, port, web, workers, no_beat, no_migrate, **options):
        if not (os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL")):
            raise CommandError("production runs on PostgreSQL and Redis: set DATABASE_URL and "
                               "REDIS_URL (`manage.py standalone` runs without them)")  # fmt: skip
        if web < 1:
            raise CommandError("--web: at least one ASGI process")
        concurrency = parse_workers(workers)
        signal.signal(signal.SIGTERM, processes.interrupt)
        if not no_migrate:
            call_command("migrate", verbosity=0)
        listener = socket.create_server((bind, port), backlog=1024)
        listener.set_inheritable(True)
        logs = settings.DATA_DIR / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        daphne = [sys.executable, "-m", "daphne", "--fd", str(listener.fileno())]
        children = [
            processes.Process(
                f"web-{i}",
                [*daphne, "portal.asgi:application"],
                logs / f"web-{i}.log",
                pass_fds=(listener.fileno(),),
            )
            for i in range(1, web + 1)
        ]
        children += [
            processes.Process(
                f"worker-{queue}",
                processes.worker(queue, queue, count, threads=queue == "webhooks"),
                logs / f"{queue}.log",
            )
            for queue, count in concurrency.items()
            if count
        ]
        if not no_beat:
            schedule = settings.DATA_DIR / "celerybeat-schedule"
            children.append(processes.Process("beat", processes.beat(schedule), logs / "beat.log"))
        env = os.environ.copy()
        processes.start_all(children, env)
        self.stdout.write(
            f"Wanka at http://{bind}:{port}/ on {web} ASGI processes; workers "
            + ", ".join(f"{q}={n}" for q, n in concurrency.items() if n)
            + ("" if no_beat else "; beat")
            + f". Logs: {logs}"
        )
        try:
            processes.watch(children, env, restart=True)
        except KeyboardInterrupt:
            pass
        except processes.Exited as failed:
            raise CommandError(str(failed)) from None
        finally:
            processes.stop_all(children)
            listener.close()
        self.stdout.write("Wanka stopped: every process it started has ended.")
