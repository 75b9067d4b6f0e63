"""What an API request made is freed as it ends, by reference counting, not left in reference
cycles for the cyclic collector (`portal.core.cycles`). Requests go through Django's own WSGI
handler, as a server sends them: the test client keeps each response and its request alive in
cycles of its own."""

import gc
import io
import sys
from collections import Counter

import pytest
from django.core.handlers.wsgi import WSGIHandler

from portal.tenancy.models import ApiToken
from tests.builders import make_workload


def garbage_of(app, path, token, times=5):
    """The types of the objects left in reference cycles by `times` GETs of `path`."""
    status = []

    def get():
        environ = {
            "REQUEST_METHOD": "GET",
            "PATH_INFO": path.partition("?")[0],
            "QUERY_STRING": path.partition("?")[2],
            "SERVER_NAME": "testserver",
            "SERVER_PORT": "80",
            "wsgi.input": io.BytesIO(b""),
            "wsgi.url_scheme": "http",
            "wsgi.errors": sys.stderr,
            "HTTP_AUTHORIZATION": f"Bearer {token}",
        }
        b"".join(app(environ, lambda line, headers: status.append(line)))

    get()  # the first request loads what every later one shares
    gc.collect()
    debug, enabled = gc.get_debug(), gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(times):
            get()
        gc.collect()
        left = Counter(type(o).__name__ for o in gc.garbage)
    finally:
        gc.set_debug(debug)
        gc.garbage.clear()
        if enabled:
            gc.enable()
    assert set(status) == {"200 OK"}, status
    return left


def framework_objects(left):
    """Views, serializers, filter sets, DRF requests and responses among `left`."""
    return {
        name
        for name in left
        if name in {"Request", "Response", "BindingDict"}
        or name.endswith(("ViewSet", "Serializer", "FilterSet"))
    }


@pytest.fixture
def token(acme_llm, bob):
    for i in range(20):
        make_workload(acme_llm, f"w{i}", gpus=8)
    return ApiToken.issue(bob, "test")[1]


@pytest.mark.django_db(transaction=True)  # the handler opens and closes its own connections
def test_a_list_leaves_neither_its_rows_nor_its_view_to_the_collector(token):
    left = garbage_of(WSGIHandler(), "/api/v1/workloads/?limit=50&state=pending", token)
    assert not framework_objects(left)
    assert not {"Workload", "Queue", "GpuModel"} & set(left)
    # What is left is Django's and django-filter's own (the request and its user's lazy
    # loader, the filter form's class, made per request): ~140 objects a request where a
    # list of 50 left ~1,200.
    assert left.total() < 5 * 250, left.most_common(10)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["/api/v1/workloads/{id}/", "/api/v1/queues/"])
def test_nested_serializers_are_let_go_too(acme_llm, token, path):
    path = path.format(id=acme_llm.workloads.first().id)
    left = garbage_of(WSGIHandler(), path, token)
    # Prefetched rows and their parent still point at each other (Django's prefetch cache).
    assert not framework_objects(left), left.most_common(10)
