"""The notifications page: each member's mail topics; the tenant's webhooks, managed by its
admins (add, test, remove) with the log of their deliveries."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from portal.core.models import audit
from portal.notifications import delivery, events
from portal.notifications.choices import Topic
from portal.notifications.models import Delivery, MailPreference, Webhook
from portal.notifications.tasks import deliver
from portal.tenancy.models import membership_allowing


def _membership(request, needs="read"):
    return membership_allowing(request.user, needs)


@login_required
def notifications(request):
    membership = _membership(request)
    preference = MailPreference.objects.get_or_create(membership=membership)[0]
    if request.method == "POST":
        preference.topics = [t for t in request.POST.getlist("topics") if t in Topic.values]
        preference.save(update_fields=["topics"])
        events.forget_listeners()
        messages.success(request, _("Your e-mail choices are saved."))
        return redirect("notifications")
    hooks = membership.tenant.webhooks.all()
    return render(
        request,
        "notifications/notifications.html",
        {
            "topics": Topic.choices,
            "mine": preference.topics,
            "hooks": hooks,
            "deliveries": Delivery.objects.filter(webhook__in=hooks).select_related("webhook")[:50],
        },
    )


@login_required
@require_POST
def webhook_add(request):
    membership = _membership(request, "admin")
    url = request.POST.get("url", "").strip()
    topics = [t for t in request.POST.getlist("topics") if t in Topic.values]
    try:
        delivery.checked_address(url)
        if len(url) > 500:
            raise ValueError(_("a webhook URL is at most 500 characters"))
        if not topics:
            raise ValueError(_("choose at least one topic"))
    except ValueError as error:
        messages.error(request, _("Not added: %(error)s.") % {"error": error})
        return redirect("notifications")
    with transaction.atomic():
        hook = Webhook.objects.create(tenant=membership.tenant, url=url, topics=topics)
        audit(
            "webhook.added",
            hook,
            actor=request.user,
            tenant=membership.tenant,
            url=url,
            topics=topics,
        )
    events.forget_listeners()
    messages.success(
        request, _("Webhook added. Its signing secret: %(secret)s") % {"secret": hook.secret}
    )
    return redirect("notifications")


@login_required
@require_POST
def webhook_test(request, pk):
    membership = _membership(request, "admin")
    hook = get_object_or_404(membership.tenant.webhooks, pk=pk)
    test = delivery.queued(hook, "ping", {})
    transaction.on_commit(lambda: deliver.delay(test.pk))
    messages.success(request, _("A test delivery is on its way: see the log below."))
    return redirect("notifications")


@login_required
@require_POST
def webhook_remove(request, pk):
    membership = _membership(request, "admin")
    hook = get_object_or_404(membership.tenant.webhooks, pk=pk)
    with transaction.atomic():
        audit("webhook.removed", hook, actor=request.user, tenant=membership.tenant, url=hook.url)
        hook.delete()
    events.forget_listeners()
    messages.success(request, _("Webhook %(url)s removed.") % {"url": hook.url})
    return redirect("notifications")
