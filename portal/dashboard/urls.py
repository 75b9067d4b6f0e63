from django.contrib.auth import views as auth_views
from django.urls import path, reverse_lazy

from portal.dashboard import cluster_map, members, services, usage, views
from portal.dashboard.signin import SignInForm

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("login/", auth_views.LoginView.as_view(authentication_form=SignInForm), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("workloads/", views.workload_list, name="workload-list"),
    path("workloads/new/", views.workload_new, name="workload-new"),
    path("workloads/<int:pk>/", views.workload_detail, name="workload-detail"),
    path("workloads/<int:pk>/cancel/", views.workload_cancel, name="workload-cancel"),
    path("workloads/<int:pk>/output.txt", views.workload_log_text, name="workload-log-text"),
    path("services/", services.service_list, name="service-list"),
    path("services/<int:pk>/", services.service_detail, name="service-detail"),
    path("services/<int:pk>/stop/", services.service_stop, name="service-stop"),
    path("quota/", views.quota, name="quota"),
    path("usage/", usage.usage, name="usage-page"),
    path("tokens/", views.tokens, name="tokens"),
    path("members/", members.members, name="members"),
    path("members/<int:pk>/role/", members.member_role, name="member-role"),
    path("members/<int:pk>/remove/", members.member_remove, name="member-remove"),
    path(
        "invite/<uidb64>/<token>/",
        auth_views.PasswordResetConfirmView.as_view(
            template_name="registration/invite_accept.html",
            success_url=reverse_lazy("login"),
        ),
        name="invite-accept",
    ),
    path("tokens/<int:pk>/revoke/", views.token_revoke, name="token-revoke"),
    path("ops/drill/", views.fault_drill, name="fault-drill"),
    path("ops/cluster/", cluster_map.cluster_map_page, name="cluster-map"),
    path("ops/nodes/<int:pk>/", cluster_map.node_page, name="node-page"),
]
