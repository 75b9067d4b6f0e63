"""Headers every response carries: a Content-Security-Policy that runs only the portal's own
scripts. A response that set its own policy (the what-if report) keeps it."""

from django.conf import settings

# Scripts, frames and connections from this origin only (and its WebSockets); no inline
# script (pages pass data with json_script); inline styles, which Plotly writes, allowed.
POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; connect-src 'self' ws: wss:; "
    "frame-ancestors 'self'; form-action 'self'; base-uri 'self'; object-src 'none'"
)
# A generated report with its scripts inline, run as its own opaque origin: whatever it holds
# can reach neither the portal's cookies nor its pages.
SANDBOXED_REPORT = (
    "sandbox allow-scripts; default-src 'none'; script-src 'unsafe-inline'; "
    "style-src 'unsafe-inline'; img-src data:; frame-ancestors 'self'"
)


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response
        self.policy = getattr(settings, "CONTENT_SECURITY_POLICY", POLICY)

    def __call__(self, request):
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", self.policy)
        return response
