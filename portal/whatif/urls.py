from django.urls import path

from portal.whatif import views

urlpatterns = [
    path("", views.whatif_list, name="whatif-list"),
    path("<int:pk>/", views.whatif_detail, name="whatif-detail"),
    path("<int:pk>/report/", views.whatif_report, name="whatif-report"),
    path("<int:pk>/results.json", views.whatif_results, name="whatif-results"),
    path("<int:pk>/status.json", views.whatif_status, name="whatif-status"),
]
