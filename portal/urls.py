from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.utils.translation import gettext_lazy as _
from django.views.generic import RedirectView
from django.views.i18n import JavaScriptCatalog
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import DefaultRouter

from portal.cluster.api.views import EnrolView, FaultViewSet, NodeViewSet
from portal.dashboard.signin import AdminSignInForm
from portal.metrics import views as metrics
from portal.quotas.api.views import QueueViewSet, QuotaRequestViewSet
from portal.services.api.views import ServiceViewSet
from portal.tenancy.api import MeView
from portal.workloads.api.budgets import BudgetViewSet
from portal.workloads.api.views import (
    CheckpointAdviceView,
    EttrView,
    ParallelPlansView,
    UsageView,
    WorkloadViewSet,
)

router = DefaultRouter()
router.register("queues", QueueViewSet)
router.register("quota-requests", QuotaRequestViewSet)
router.register("budgets", BudgetViewSet)
router.register("workloads", WorkloadViewSet)
router.register("services", ServiceViewSet)
router.register("nodes", NodeViewSet)
router.register("faults", FaultViewSet)

admin.site.site_header = _("Wanka operator console")
admin.site.site_title = "Wanka"
admin.site.login_form = AdminSignInForm

urlpatterns = [
    path("api/v1/enrol/", EnrolView.as_view(), name="enrol"),
    path("api/v1/ettr/", EttrView.as_view(), name="ettr"),
    path("api/v1/usage/", UsageView.as_view(), name="usage"),
    path("api/v1/me/", MeView.as_view(), name="me"),
    path("api/v1/checkpoint-advice/", CheckpointAdviceView.as_view(), name="checkpoint-advice"),
    path("api/v1/parallelism/plans/", ParallelPlansView.as_view(), name="parallel-plans"),
    # Namespaced: the router's names ("workload-list") are also the pages'.
    path("api/v1/", include((router.urls, "api"))),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves its script from a URL of its own, which the CSP allows.
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
    path("admin/", admin.site.urls),
    # The language switch (a cookie), and the page scripts' strings in the reader's language,
    # as a script of its own: the CSP runs no inline script.
    path("i18n/", include("django.conf.urls.i18n")),
    path("jsi18n/", JavaScriptCatalog.as_view(), name="javascript-catalog"),
    # Browsers ask for /favicon.ico whatever the page says.
    path("favicon.ico", RedirectView.as_view(url=static("favicon.svg"), permanent=True)),
    path("ops/whatif/", include("portal.whatif.urls")),
    path("notifications/", include("portal.notifications.urls")),
    path("metrics", metrics.metrics, name="metrics"),
    path("metrics/gpus", metrics.gpus, name="metrics-gpus"),
    path("", include("portal.dashboard.urls")),
]

handler404 = "portal.core.api.not_found"
