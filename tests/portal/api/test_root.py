from tests.builders import api_client


def test_the_api_root_links_each_endpoint_to_the_api(bob):
    body = api_client(bob).get("/api/v1/").json()
    assert body["workloads"].endswith("/api/v1/workloads/")
    assert body["queues"].endswith("/api/v1/queues/")
