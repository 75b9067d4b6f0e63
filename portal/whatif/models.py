from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from portal.whatif.choices import ClusterSource, RunState, TraceSource


class WhatIfRun(models.Model):
    """A what-if simulation an operator asked for: its inputs, progress and results."""

    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    trace = models.CharField(max_length=16, choices=TraceSource.choices)
    trace_csv = models.TextField(blank=True)  # uploaded, or this cluster's history, exported
    cluster = models.CharField(
        max_length=16, choices=ClusterSource.choices, default=ClusterSource.TRACE
    )
    cluster_json = models.TextField(blank=True)
    policies = models.JSONField(default=list)
    days = models.FloatField(
        null=True,
        blank=True,
        help_text="Only the trace's first days; of this cluster's history, the last days",
    )
    gpus = models.PositiveIntegerField(null=True, blank=True, help_text="Synthetic site size")
    seed = models.PositiveIntegerField(default=1)
    service_percent = models.FloatField(
        null=True,
        blank=True,
        help_text="Add the Azure conversation service, its peak this % of the cluster's GPUs",
    )
    defrag = models.CharField(
        max_length=32,
        blank=True,
        help_text="Defragment every pod: scattered, a daily HH:MM, or both; blank: never",
    )
    defrag_moves = models.PositiveSmallIntegerField(default=4, help_text="Moves per hour per pod")
    state = models.CharField(max_length=8, choices=RunState.choices, default=RunState.PENDING)
    progress = models.FloatField(default=0)
    message = models.CharField(max_length=300, blank=True)
    results = models.JSONField(null=True, blank=True, editable=False)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name, verbose_name_plural = _("what-if simulation"), _("what-if simulations")

    def __str__(self):
        return f"what-if {self.pk}: {self.get_trace_display()}"
