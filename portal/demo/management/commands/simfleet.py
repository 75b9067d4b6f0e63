import asyncio
import logging
import signal

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from portal.cluster.models import Node
from portal.demo.installation import ensure_nodes
from scheduler.agent.fleet import NodeSpec, run_fleet


class Command(BaseCommand):
    help = (
        "Run a simulated agent for each node of the database (or the first --nodes, adding "
        "simulated nodes when the database has fewer), each over its own WebSocket. Each "
        "node gets a fresh agent token."
    )

    def add_arguments(self, parser):
        parser.add_argument("--url", default="ws://127.0.0.1:8000/ws/agent/")
        parser.add_argument("--nodes", type=int, help="Only the first N nodes")
        parser.add_argument("--heartbeat", type=float, default=settings.WANKA["HEARTBEAT_S"])
        parser.add_argument(
            "--speed", type=float, default=1.0, help="Simulated time runs this many times faster"
        )
        parser.add_argument(
            "--mig", action="store_true", help="GPUs of models with MIG report MIG layouts"
        )

    def handle(self, *args, url, nodes, heartbeat, speed, mig, **options):
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
        if nodes and (added := ensure_nodes(nodes)):
            self.stdout.write(f"Added {added} simulated nodes in data center 'sim'")
        queryset = Node.objects.select_related("gpu_model")[:nodes]
        specs = [
            NodeSpec(
                hostname=node.name,
                token=node.issue_token(),
                gpu_model=node.gpu_model.name,
                gpus=node.gpu_count,
                memory_mb=node.gpu_model.memory_gb * 1024,
                mig=mig,
            )
            for node in queryset
        ]
        if not specs:
            raise CommandError("No nodes in the database: run `manage.py seed_demo` first.")
        self.stdout.write(f"Simulating {len(specs)} nodes against {url}")
        asyncio.run(self._run(url, specs, heartbeat, speed))

    async def _run(self, url, specs, heartbeat, speed):
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await run_fleet(url, specs, heartbeat_s=heartbeat, speed=speed, stop_event=stop)
