"""/metrics, for Prometheus: answered to a bearer WANKA_METRICS_TOKEN, or else to a connection
from an address in WANKA_METRICS_NETWORKS; anyone else gets a 403. The address is the
connection's own, never a forwarded header, and behind a reverse proxy (WANKA_PROXIES) no
address opens it (every client would come from the proxy's): only the token does.

/metrics is the default scrape. /metrics/gpus relays every GPU's latest heartbeat under the
DCGM exporter's names (DCGM_FI_DEV_GPU_UTIL, ...): about 100,000 series a family at 12,500
nodes, so scrape it as a job of its own, less often, only where it is wanted."""

import hmac
import ipaddress

from django.conf import settings
from django.http import HttpResponse, HttpResponseForbidden
from django.views.decorators.gzip import gzip_page
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from portal.metrics.collector import FleetCollector, dcgm_exposition

FLEET = CollectorRegistry()
FLEET.register(FleetCollector())


@require_GET
@gzip_page
def metrics(request):
    if not allowed(request):
        return refused()
    return HttpResponse(generate_latest(FLEET), content_type=CONTENT_TYPE_LATEST)


@require_GET
@gzip_page
def gpus(request):
    if not allowed(request):
        return refused()
    return HttpResponse(dcgm_exposition(), content_type=CONTENT_TYPE_LATEST)


def refused() -> HttpResponse:
    return HttpResponseForbidden(
        "metrics: a metrics token or an allowed address is needed\n", content_type="text/plain"
    )


def allowed(request) -> bool:
    """A request with a bearer token is judged by it alone; one without, by its connection's
    address, unless a proxy stands in front."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        expected = settings.WANKA_METRICS_TOKEN
        return bool(expected) and hmac.compare_digest(token.strip().encode(), expected.encode())
    if settings.REST_FRAMEWORK["NUM_PROXIES"]:
        return False
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    address = getattr(address, "ipv4_mapped", None) or address  # ::ffff:127.0.0.1 is 127.0.0.1
    return any(
        address in ipaddress.ip_network(network, strict=False)
        for network in settings.WANKA_METRICS_NETWORKS
    )
