"""The throwaway database a benchmark of the whole stack runs on."""

import os
from contextlib import contextmanager


@contextmanager
def throwaway():
    """Django set up on a fresh test copy of DATABASE_URL's database, dropped afterwards
    (its server processes must be stopped by then)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    from django.db import connection

    name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        yield
    finally:
        connection.close()
        connection.creation.destroy_test_db(name, verbosity=0)
