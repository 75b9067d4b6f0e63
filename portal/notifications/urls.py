from django.urls import path

from portal.notifications import views

urlpatterns = [
    path("", views.notifications, name="notifications"),
    path("webhooks/", views.webhook_add, name="webhook-add"),
    path("webhooks/<int:pk>/test/", views.webhook_test, name="webhook-test"),
    path("webhooks/<int:pk>/remove/", views.webhook_remove, name="webhook-remove"),
]
