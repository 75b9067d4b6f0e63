from django.shortcuts import render


class Conflict(Exception):
    """The request is valid but the object's current state forbids it (HTTP 409)."""


class MethodPageMiddleware:
    """A page's URL opened with a method it does not take (a bookmarked or reloaded action URL,
    GET on what only a form POSTs) answers with the portal's page saying so, not an empty 405
    that browsers show as their own error; the API keeps its JSON."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if response.status_code != 405 or response.content or request.path.startswith("/api/"):
            return response
        page = render(request, "405.html", status=405)
        page["Allow"] = response.get("Allow", "")
        return page
