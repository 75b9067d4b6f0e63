"""Django's SQLite backend with PostgreSQL's integer ranges.

Model fields, forms and serializers take an integer column's bounds from the backend. SQLite's
are 64 bits for every integer column, so on standalone a quota of 2^63 - 1 was accepted where
PostgreSQL refuses it, and overflowed later in a sum or a time. The base backend's ranges,
which PostgreSQL uses, apply on both: the same input is refused on both, with the same reason.
"""

from django.db.backends.base.operations import BaseDatabaseOperations
from django.db.backends.sqlite3 import base, operations


class DatabaseOperations(operations.DatabaseOperations):
    integer_field_range = BaseDatabaseOperations.integer_field_range


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations
