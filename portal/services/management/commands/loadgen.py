"""Drive an inference service with real arrivals under the daily curve:

    manage.py loadgen --service chat --trace azure-conv --days 1
    manage.py loadgen --service chat --day-s 1440 --days 1     # a day in 24 minutes

Requests go to the replicas the service's endpoint list names (asked again every second), least
busy first. The daily curve and the trace's gaps are `scheduler.inference.replay`'s; the peak
rate, unless given, fills 80 % of the service's most replicas at its target concurrency.
"""

import asyncio
import json

from django.core.management.base import BaseCommand, CommandError

from portal.services import load
from portal.services.models import Service
from scheduler import inference
from scheduler.loadgen import drive


class Command(BaseCommand):
    help = "Send a service the requests of a real trace under a daily curve."

    def add_arguments(self, parser):
        parser.add_argument("--service", required=True, help="the service's name")
        parser.add_argument("--tenant", help="the tenant's name, where two have the service")
        parser.add_argument("--trace", default="azure-conv", choices=sorted(inference.TRACES))
        parser.add_argument("--days", type=float, default=1.0)
        parser.add_argument(
            "--day-s", type=float, default=inference.DAY, help="how long a day lasts (s)"
        )
        parser.add_argument("--start-hour", type=float, default=0.0, help="where in the day")
        parser.add_argument("--peak-rps", type=float, help="requests per second at the peak")

    def handle(self, *args, **options):
        service = self._service(options["service"], options["tenant"])
        requests = inference.read_trace(options["trace"])
        peak = options["peak_rps"] or peak_rps(service, requests)
        day_s = options["day_s"]
        start = options["start_hour"] / 24 * day_s
        replayed = inference.replay(
            requests, seconds=options["days"] * day_s, peak_rps=peak, start_s=start, day_s=day_s
        )
        # Sent from now on: times from the replay's start, not from midnight.
        arrivals = (
            inference.Request(r.at_s - start, r.prompt_tokens, r.output_tokens) for r in replayed
        )
        self.stdout.write(
            f"loadgen: {service.name}, {options['trace']} at up to {peak:.1f} requests/s, "
            f"{options['days']:g} day(s) of {day_s:g} s"
        )

        seconds = iter(range(1 << 62))

        def progress(elapsed, report):  # called about once a second: a line every ten
            if next(seconds) % 10 == 0:
                self.stdout.write(
                    f"  {elapsed:7.0f} s: sent {report.sent}, ok {report.ok}, "
                    f"failed {report.failed}"
                )

        report = asyncio.run(drive(arrivals, lambda: endpoints(service), on_second=progress))
        self.stdout.write(json.dumps(report.figures()))

    def _service(self, name, tenant):
        services = Service.objects.filter(name=name, active=True)
        if tenant:
            services = services.filter(tenant__name=tenant)
        found = list(services[:2])
        if len(found) != 1:
            where = f" of tenant {tenant}" if tenant else ""
            why = "no active service" if not found else "two tenants have a service"
            raise CommandError(f"{why} named {name}{where}; say --tenant")
        return found[0]


def peak_rps(service: Service, requests) -> float:
    """The rate that keeps 80 % of the most replicas at their target (Little's law)."""
    in_flight = 0.8 * service.max_replicas * service.target_concurrency
    return in_flight / inference.mean_service_s(requests, service.gpu_model.name)


def endpoints(service: Service) -> list[tuple[str, int]]:
    return [(e["host"], e["port"]) for e in load.endpoints(service)]
