"""Python's cyclic garbage collector in a long-running server process."""

import gc

# Container objects allocated, net, before a collection of the youngest generation (Python's
# default is 700). A request makes thousands that live until it ends (the API's workload list:
# its rows, their models, its serializer's fields); at 700 the collector walked them, and
# walked them again as they aged, 0.9 ms of that request's CPU; 0.4 ms at 10,000.
YOUNG_GENERATION = 10_000


def freeze_loaded() -> None:
    """Move what the process has loaded so far (Django, the URL conf, every module, compiled
    templates) out of the collector's sight: a full collection then walks only what requests
    and tasks made since, not the 200,000 objects of a loaded portal. At full size, one request
    in three for the operators' queues page paid 125 ms of full collection; 12 ms once frozen.
    Called once a process has loaded: the ASGI application, each Celery worker process."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_GENERATION, *gc.get_threshold()[1:])
