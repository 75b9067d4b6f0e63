from collections import defaultdict

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from rest_framework import serializers

from portal.cluster.models import GpuModel, Region
from portal.core.api import KnownFields, NameField
from portal.quotas.models import (
    THRESHOLD_NEEDS_BORROWING,
    Cohort,
    FamilyQuota,
    Queue,
    QueueQuota,
    QuotaRequest,
    region_capacity,
)


class QueueQuotaSerializer(serializers.ModelSerializer):
    gpu_model = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = QueueQuota
        fields = ["gpu_model", "guarantee", "nominal", "borrowing_limit", "lending_limit"]


class FamilyQuotaSerializer(serializers.ModelSerializer):
    gpu_models = serializers.SerializerMethodField(help_text="The GPU models of the family")

    class Meta:
        model = FamilyQuota
        fields = ["family", "gpu_models", "nominal", "borrowing_limit"]

    def get_gpu_models(self, quota: FamilyQuota) -> list[str]:
        families = self.context.get("families")  # read once for a whole page of queues
        if families is None:
            families = self.context["families"] = defaultdict(list)
            for name, family in (
                GpuModel.objects.exclude(family="").order_by("name").values_list("name", "family")
            ):
                families[family].append(name)
        return families.get(quota.family, [])


# What operators may change, here and on the queue's console page.
QUEUE_CHANGES = [
    "cohort",
    "priority",
    "weight",
    "strategy",
    *Queue.PREEMPTION_FIELDS,
    "preemption_grace_s",
    "reclaim_deadline_s",
    "straggler_policy",
    "spans_datacenters",
]


class QueueSerializer(KnownFields, serializers.ModelSerializer):
    region = serializers.SlugRelatedField(slug_field="name", read_only=True)
    cohort = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    quotas = QueueQuotaSerializer(many=True, read_only=True)
    family_quotas = FamilyQuotaSerializer(many=True, read_only=True)

    class Meta:
        model = Queue
        fields = [
            "id",
            "name",
            "region",
            *QUEUE_CHANGES,
            "quotas",
            "family_quotas",
        ]

    def validate(self, attrs):
        borrow, threshold = (
            self._as_saved(attrs, name)
            for name in ("borrow_within_cohort", "max_priority_threshold")
        )
        if threshold is not None and not borrow:
            raise serializers.ValidationError(
                {"max_priority_threshold": _(THRESHOLD_NEEDS_BORROWING)}
            )
        return attrs

    def _as_saved(self, attrs, name):
        """A field as the queue will have it: a partial update keeps what it does not name."""
        if name in attrs:
            return attrs[name]
        if self.instance is not None:
            return getattr(self.instance, name)
        return Queue._meta.get_field(name).get_default()


class TenantQueueField(NameField):
    """A queue named by its slug, looked up among the caller's tenant's queues only."""

    def __init__(self, **kwargs):
        super().__init__(slug_field="name", **kwargs)

    default_error_messages = {"does_not_exist": gettext_lazy("Your tenant has no queue {value}.")}

    def get_queryset(self):
        return Queue.objects.visible_to(self.context["request"].user)


class ModelOrFamilyField(NameField):
    """A GPU model by its name, or a GPU family by its own (`GpuModel.family`): a family's name
    reads as the name, for `validate` to ask the family's quota."""

    def to_internal_value(self, data):
        models = GpuModel.objects
        plain = isinstance(data, str) and "\x00" not in data  # NUL: NameField refuses it
        if plain and not models.filter(name=data).exists() and models.filter(family=data).exists():
            return data
        return super().to_internal_value(data)


class QuotaRequestSerializer(KnownFields, serializers.ModelSerializer):
    queue = TenantQueueField()
    gpu_model = ModelOrFamilyField(
        slug_field="name",
        queryset=GpuModel.objects.all(),
        error_messages={"does_not_exist": gettext_lazy("Unknown GPU model or family {value}.")},
        help_text="A GPU model, or a GPU family (hopper) for quota on the family's models in all",
    )
    region = NameField(
        slug_field="name",
        queryset=Region.objects.all(),
        error_messages={"does_not_exist": gettext_lazy("Unknown region {value}.")},
    )
    count = serializers.IntegerField(min_value=1)

    class Meta:
        model = QuotaRequest
        fields = [
            "id",
            "queue",
            "gpu_model",
            "family",
            "region",
            "count",
            "reason",
            "status",
            "requested_at",
            "decided_at",
            "decision_note",
        ]
        read_only_fields = ["family", "status", "requested_at", "decided_at", "decision_note"]

    def validate(self, attrs):
        queue, model, region = attrs["queue"], attrs["gpu_model"], attrs["region"]
        if queue.region_id != region.pk:
            why = _("Queue %(queue)s is in region %(region)s, not %(asked)s.") % {
                "queue": queue.name,
                "region": queue.region,
                "asked": region,
            }
            raise serializers.ValidationError({"region": why})
        if isinstance(model, str):  # a family
            attrs["gpu_model"], attrs["family"] = None, model
            capacity = region_capacity(region.pk, None, family=model)
            model = _("%(family)s family") % {"family": model}
        else:
            capacity = region_capacity(region.pk, model.pk)
        if capacity == 0:
            why = _("Region %(region)s has no %(model)s GPUs.") % {"region": region, "model": model}
            raise serializers.ValidationError({"gpu_model": why})
        if attrs["count"] > capacity:
            count = attrs["count"]
            why = _(
                "%(count)s %(model)s GPUs exceeds the %(capacity)s the region %(region)s has."
            ) % {
                "count": count,
                "model": model,
                "capacity": capacity,
                "region": region,
            }
            raise serializers.ValidationError({"count": why})
        return attrs


class DecisionSerializer(KnownFields, serializers.Serializer):
    note = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class QueueChangeSerializer(QueueSerializer):
    """What operators may change of a queue through the API (quotas grow by approved
    requests), checked as a queue is, and why (kept in the audit log)."""

    cohort = NameField(
        slug_field="name", queryset=Cohort.objects.all(), allow_null=True, required=False
    )
    reason = serializers.CharField(
        write_only=True, max_length=300, help_text="Why: kept in the audit log with the change."
    )

    def validate(self, attrs):
        if self.partial and "reason" not in attrs:  # a partial update skips required fields
            raise serializers.ValidationError(
                {"reason": _("Say why: it is kept in the audit log.")}
            )
        return super().validate(attrs)

    class Meta:
        model = Queue
        fields = [*QUEUE_CHANGES, "reason"]
