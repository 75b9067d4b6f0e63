"""The REST API fuzzed from its own OpenAPI schema (schemathesis, in process, through the
server's own ASGI application and HTTP handler): a bounded number of generated requests for
every operation, as each role, with objects for the ids to hit. Checks: no server error, every
answer's status and content type documented, its body as the schema says, a request without
credentials refused."""

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import negative_data_rejection, positive_data_acceptance

from portal.asgi import application
from portal.tenancy.models import ApiToken
from tests.builders import make_queue, make_workload

# The server's threads take their own connections, as in production.
pytestmark = pytest.mark.django_db(transaction=True)

schema = schemathesis.openapi.from_asgi("/api/schema/?format=json", application)
EXAMPLES = 6  # per operation and role: 43 operations, about 1,300 requests in all
# Django reads an empty query parameter as none given, and a well-formed request may still be
# refused for what it asks (quota, state): neither is a fault.
LENIENT = [negative_data_rejection, positive_data_acceptance]


@pytest.fixture
def tokens(cluster, acme, globex, alice, bob, victor, charlie, operator):
    llm = make_queue(acme, "llm", h800=64)
    make_queue(globex, "train", h800=32)
    make_workload(llm, "job", gpus=8)
    return {
        role: ApiToken.issue(user, "fuzz")[1]
        for role, user in (("admin", alice), ("member", bob), ("viewer", victor),
                           ("other", charlie), ("operator", operator))
    }  # fmt: skip


@pytest.mark.parametrize("role", ["admin", "member", "viewer", "other", "operator"])
def test_the_api_keeps_its_schema_and_never_fails(role, tokens, threads_seen):
    headers = {"Authorization": f"Bearer {tokens[role]}"}
    failed = []
    for result in schema.get_all_operations():
        operation = result.ok()

        @given(operation.as_strategy())
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def check(case):
            case.call_and_validate(headers=headers, excluded_checks=LENIENT)

        try:
            check()
        except Exception as error:  # noqa: BLE001 - collected, to report every operation
            failed.append(f"{operation.label}: {error}")
    assert not failed, "\n\n".join(failed)
    assert threads_seen and all(name.startswith("http") for name in threads_seen)  # the server's
