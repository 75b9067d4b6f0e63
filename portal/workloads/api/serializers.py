import json
import math
import re
from datetime import timedelta

from django.db.models import Max
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from portal.cluster.models import GpuModel, Node
from portal.cluster.summary import heartbeats, reported_share
from portal.core.api import FieldsOnce, KnownFields, NameField, QuickRows
from portal.quotas import engine as quota_engine
from portal.quotas.api.serializers import TenantQueueField
from portal.workloads import actions, parallel
from portal.workloads.choices import Kind, PriorityClass, State, Topology
from portal.workloads.desired import MAX_ASSIGNMENT_BYTES
from portal.workloads.models import (
    Checkpoint,
    LogChunk,
    ParallelPlan,
    Recovery,
    Workload,
    WorkloadEvent,
)
from portal.workloads.phrasebook import translate
from portal.workloads.reasons import Reader
from portal.workloads.usage import BY_QUEUE, REPORT_KEYS, gpu_hours
from scheduler import parallelism
from scheduler.engine.model import SLICES
from scheduler.ettr import Phase
from scheduler.mig import profiles
from scheduler.parallelism import SpecError

GPU_MODEL_FIELD = {
    "slug_field": "name",
    "error_messages": {"does_not_exist": gettext_lazy("Unknown GPU model {value}.")},
}


class ReadableField(serializers.CharField):
    """A reason as the caller may read it (`workloads.reasons`), in the request's language
    (`Accept-Language`, English by default: `workloads.phrasebook`)."""

    def __init__(self, **kwargs):
        super().__init__(read_only=True, **kwargs)

    def to_representation(self, value):
        request = self.context.get("request")
        text = super().to_representation(value)
        return translate(text, Reader.for_request(request)) if request else text


class WorkloadEventSerializer(serializers.ModelSerializer):
    reason = ReadableField()

    class Meta:
        model = WorkloadEvent
        fields = ["at", "from_state", "to_state", "reason"]


# Bounds on what one job may ask for, so that what it asks can always reach its agents.
YEAR_S = 366 * 86400
MAX_COMMAND = 64 * 1024  # characters
MAX_ENV = 256  # variables
MAX_ENV_CHARS = 64 * 1024  # names and values together
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# Of an assignment's bound, what a job's command and environment may take; the rest is the
# portal's (launch variables, a parallel plan).
MAX_CARRIED_BYTES = MAX_ASSIGNMENT_BYTES - 32 * 1024


class ModelSpecField(serializers.JSONField):
    """A model from the planner's catalogue by name, or a spec field by field (layers, hidden,
    heads, ffn, vocab, seq; kv_heads, gated, tied, dropout optional); kept resolved."""

    def to_internal_value(self, data):
        try:
            return parallel.spec(super().to_internal_value(data))
        except SpecError as error:
            path = error.field.removeprefix("model").lstrip(".")
            reason = translate(error.reason)  # a sentence of `scheduler.parallelism`
            detail = {path: reason} if path else reason
            raise serializers.ValidationError(detail) from None


def check_gang(gpus: int, model: GpuModel, queue, field: str) -> None:
    """A gang of `gpus` of `model` is whole nodes past one node, and fits what `queue` can
    ever hold; else a ValidationError on `field`."""
    node_size = Node.objects.filter(gpu_model=model).aggregate(n=Max("gpu_count"))["n"] or 8
    if gpus > node_size and gpus % node_size:
        why = _("Jobs larger than one node take whole nodes: ask for a multiple of %(size)s.") % {
            "size": node_size
        }
        raise serializers.ValidationError({field: why})
    ceiling = quota_engine.ceiling(queue, model)
    if gpus > ceiling:
        why = _(
            "Queue %(queue)s can never hold %(gpus)s %(model)s GPUs: its quota and what "
            "its cohort can lend come to %(ceiling)s. Request more quota first."
        ) % {"queue": queue.name, "gpus": gpus, "model": model, "ceiling": ceiling}
        raise serializers.ValidationError({field: why})


def accepted_models(names: list[str]) -> list[tuple[GpuModel, bool]]:
    """GPU models and families (`GpuModel.family`, e.g. "hopper") resolved to models, each
    once, in the order given; a family's models by the planner's peak throughput, fastest
    first. With each, whether it was named (not only in a family). A ValidationError names
    what is neither."""
    found: dict[str, tuple[GpuModel, bool]] = {}
    for name in names:
        model = GpuModel.objects.filter(name=name).first()
        if model is not None:
            found[model.name] = (model, True)
            continue
        members = sorted(GpuModel.objects.filter(family=name), key=_peak)
        if not members:
            raise serializers.ValidationError(
                _("Unknown GPU model or family %(name)s.") % {"name": name}
            )
        for member in members:
            found.setdefault(member.name, (member, False))
    return list(found.values())


def _peak(model: GpuModel) -> tuple[float, str]:
    gpu = parallelism.GPUS.get(model.name)
    return (-gpu.bf16_tflops if gpu else 0.0, model.name)


@extend_schema_field({"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 16})
class AcceptsField(serializers.JSONField):
    """The GPU models and families a job accepts (1 to 16 names); read back as the models it
    keeps, or its one model. (A JSON field, not a ListField: a list field and its child refer
    to each other, and every serializer would be left for the cyclic collector.)"""

    def to_internal_value(self, data):
        names = super().to_internal_value(data)
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise serializers.ValidationError(_("A list of GPU model or family names."))
        if any("\x00" in n for n in names):
            raise serializers.ValidationError(_("A name may not hold a NUL character."))
        if not 1 <= len(names) <= 16:
            raise serializers.ValidationError(
                _("From 1 to 16 names; got %(got)s.") % {"got": len(names)}
            )
        return names

    def get_attribute(self, instance):
        if instance.accepts:
            return instance.accepts
        return [getattr(instance, "gpu_model_name", None) or instance.gpu_model.name]


class GpusField(serializers.FloatField):
    """GPUs: a whole number of them, or a share of one below 1 (0.25); whole ones read back as
    integers, as they always did."""

    def to_representation(self, value):
        return int(value) if float(value).is_integer() else float(value)


def check_memory(model: GpuModel, memory: float | None) -> None:
    """A ValidationError where a GPU of `model` has less memory than `memory` GB asked."""
    if memory is not None and memory > model.memory_gb:
        why = _("A %(model)s GPU has %(memory)s GB; %(asked)g GB asked.") % {
            "model": model,
            "memory": model.memory_gb,
            "asked": memory,
        }
        raise serializers.ValidationError({"gpu_memory_gb": why})


def as_share(attrs) -> None:
    """Turn the `gpus` asked for (`gpu_share`) and `gpu_memory_gb` into what the model stores:
    whole GPUs, or one GPU and a share of it in eighths, the larger of the compute and the
    memory asked, rounded up (a share is a guaranteed minimum of both). ValidationError for a
    fraction above one, an elastic share, or more memory than the GPU model has."""
    asked, memory, model = (
        attrs.pop("gpu_share"),
        attrs.pop("gpu_memory_gb", None),
        attrs["gpu_model"],
    )
    check_memory(model, memory)
    if asked.is_integer():
        attrs["gpus"], attrs["slices"] = int(asked), 0
        return
    if asked > 1:
        why = _(
            "A share of a GPU is below 1, and more than one GPU is a whole number of them "
            "(a gang takes whole GPUs): %(asked)g is neither."
        ) % {"asked": asked}
        raise serializers.ValidationError({"gpus": why})
    if attrs.get("min_gpus") is not None or attrs.get("max_gpus") is not None:
        why = _("A share of a GPU runs on one GPU of one node: it has no min_gpus or max_gpus.")
        raise serializers.ValidationError({"min_gpus": why})
    share = max(asked, (memory or 0) / model.memory_gb)
    slices = math.ceil(share * SLICES - 1e-9)
    attrs["gpus"], attrs["slices"] = 1, 0 if slices >= SLICES else slices


def as_mig(attrs) -> None:
    """One GPU, as a MIG instance of a profile of its model (`scheduler.mig`). ValidationError
    for a profile the model lacks, or with more or less than one GPU, a share's memory or
    elastic bounds."""
    model, name = attrs["gpu_model"], attrs["mig"]
    known = profiles(model.name, model.memory_gb)
    if name not in known:
        why = (
            _("%(model)s GPUs have MIG profiles %(profiles)s; not %(name)s.")
            % {"model": model, "profiles": ", ".join(known), "name": name}
            if known
            else _("%(model)s GPUs have no MIG.") % {"model": model}
        )
        raise serializers.ValidationError({"mig": why})
    if attrs.pop("gpu_share", 1) != 1:
        raise serializers.ValidationError({"gpus": _("A MIG instance is of one GPU: gpus is 1.")})
    if attrs.pop("gpu_memory_gb", None) is not None:
        why = _("A MIG instance has its profile's memory: %(name)s has no gpu_memory_gb.") % {
            "name": name
        }
        raise serializers.ValidationError({"gpu_memory_gb": why})
    if attrs.get("min_gpus") is not None or attrs.get("max_gpus") is not None:
        why = _("A MIG instance runs on one GPU of one node: it has no min_gpus or max_gpus.")
        raise serializers.ValidationError({"min_gpus": why})
    attrs["gpus"], attrs["slices"] = 1, 0


class WorkloadSerializer(KnownFields, QuickRows, FieldsOnce, serializers.ModelSerializer):
    """A job or service of the tenant: what it asks for, where it stands, and, while it
    waits, why and when it is expected to start."""

    queue = TenantQueueField()
    gpu_model = NameField(
        queryset=GpuModel.objects.all(),
        required=False,
        help_text="The GPU model it runs on; required unless gpu_models is given (the first)",
        **GPU_MODEL_FIELD,
    )
    gpu_models = AcceptsField(
        source="accepts",
        required=False,
        help_text="Every GPU model or family (e.g. hopper) it may run on, in order of "
        "preference: it starts on the fastest with room where its speeds are known (it names "
        "its model), else on the first with room",
    )
    gpus = GpusField(source="gpu_share", min_value=0.01, max_value=100_000)
    gpu_memory_gb = serializers.FloatField(
        min_value=0.1, required=False, write_only=True, help_text="GPU memory asked, per GPU"
    )
    mig = serializers.CharField(
        max_length=16,
        required=False,
        allow_blank=True,
        help_text="A MIG profile of one GPU of its model (e.g. 1g.10gb, 3g.40gb), instead of "
        "whole GPUs or a share",
    )
    # Elastic bounds; one below `gpus` or above them says so on min_gpus (`validate`).
    min_gpus = serializers.IntegerField(
        min_value=0, max_value=100_000, required=False, allow_null=True
    )
    max_gpus = serializers.IntegerField(
        min_value=0, max_value=100_000, required=False, allow_null=True
    )
    command = serializers.CharField(max_length=MAX_COMMAND, required=False, allow_blank=True)
    time_limit_s = serializers.IntegerField(
        min_value=1, max_value=YEAR_S, required=False, allow_null=True
    )
    checkpoint_interval_s = serializers.IntegerField(
        min_value=1, max_value=7 * 86400, required=False, allow_null=True
    )
    preemption_grace_s = serializers.IntegerField(
        min_value=0, max_value=3600, required=False, allow_null=True
    )
    simulated_duration_s = serializers.FloatField(
        min_value=0, max_value=YEAR_S, required=False, allow_null=True
    )
    model = ModelSpecField(source="model_spec", required=False, allow_null=True)
    pending_reason = ReadableField()
    version = serializers.SerializerMethodField(
        help_text="Grows with every event of the workload (the `version` of live events)"
    )
    global_batch = serializers.IntegerField(
        min_value=1, max_value=10_000_000, required=False, allow_null=True
    )

    class Meta:
        model = Workload
        fields = [
            "id",
            "name",
            "queue",
            "kind",
            "gpu_model",
            "gpu_models",
            "gpus",
            "gpu_memory_gb",
            "mig",
            "min_gpus",
            "max_gpus",
            "priority",
            "topology",
            "topology_required",
            "checkpoint_policy",
            "checkpoint_interval_s",
            "movable",
            "command",
            "env",
            "time_limit_s",
            "preemption_grace_s",
            "simulated_duration_s",
            "model",
            "global_batch",
            "state",
            "pending_reason",
            "queue_position",
            "estimated_start",
            "estimated_start_p90",
            "submitted_at",
            "admitted_at",
            "started_at",
            "finished_at",
            "exit_code",
            "version",
        ]
        read_only_fields = [
            "state",
            "pending_reason",
            "queue_position",
            "estimated_start",
            "estimated_start_p90",
            "submitted_at",
            "admitted_at",
            "started_at",
            "finished_at",
            "exit_code",
        ]

    def get_version(self, workload) -> int:
        if hasattr(workload, "version"):  # annotated by the lists (`with_version`)
            return workload.version or 0
        return workload.events.order_by("-id").values_list("id", flat=True).first() or 0

    def validate_env(self, env):
        if not isinstance(env, dict) or not all(isinstance(k, str) for k in env):
            raise serializers.ValidationError(_("Must be an object of variable names to values."))
        if len(env) > MAX_ENV:
            raise serializers.ValidationError(
                _("At most %(most)s variables; got %(got)s.") % {"most": MAX_ENV, "got": len(env)}
            )
        for name, value in env.items():
            if not ENV_NAME.fullmatch(name):
                raise serializers.ValidationError(
                    _(
                        "%(name)s is not a variable name (letters, digits and _, not first a "
                        "digit, up to 128)."
                    )
                    % {"name": repr(name[:40])}
                )
            if name.startswith("CUDA_MPS_") or name == "CUDA_VISIBLE_DEVICES":
                raise serializers.ValidationError(
                    _(
                        "%(name)s is set by the node's agent (the GPUs assigned, a share's MPS "
                        "limits), not by a job."
                    )
                    % {"name": name}
                )
            if not isinstance(value, str | int | float | bool):
                raise serializers.ValidationError(
                    _("%(name)s: a value is a string or a number.") % {"name": name}
                )
        size = sum(len(name) + len(str(value)) for name, value in env.items())
        if size > MAX_ENV_CHARS:
            raise serializers.ValidationError(
                _("Names and values take %(size)s characters; at most %(most)s.")
                % {"size": f"{size:,}", "most": f"{MAX_ENV_CHARS:,}"}
            )
        return env

    def validate(self, attrs):
        self._share(attrs)
        gpus, queue = attrs["gpus"], attrs["queue"]
        lo, hi = attrs.get("min_gpus"), attrs.get("max_gpus")
        lo, hi = gpus if lo is None else lo, gpus if hi is None else hi  # 0 is a value, not unset
        if not 1 <= lo <= gpus <= hi:
            why = _("Need min_gpus <= gpus <= max_gpus; got %(lo)s <= %(gpus)s <= %(hi)s.") % {
                "lo": lo,
                "gpus": gpus,
                "hi": hi,
            }
            raise serializers.ValidationError({"min_gpus": why})
        self._validate_models(attrs, lo)
        self._validate_carried(attrs)
        if "topology" not in attrs and queue.spans_datacenters:
            attrs["topology"] = Topology.ANY  # the queue's default: any data center
        return attrs

    def _share(self, attrs) -> None:
        """Whole GPUs, or a share of one of its one GPU model (`as_share`): a share's eighths
        depend on the model's memory, so a job that accepts several takes whole GPUs. A list
        of one model (`gpu_models: ["H800"]`) is that model."""
        names = attrs.get("accepts")
        if names is not None and len(names) == 1 and (one := self._one_model(names[0])):
            if attrs.setdefault("gpu_model", one) != one:
                why = _("Give gpu_model as the first of gpu_models, or leave it out.")
                raise serializers.ValidationError({"gpu_model": why})
            del attrs["accepts"]
        if "accepts" not in attrs:
            if "gpu_model" not in attrs:
                raise serializers.ValidationError({"gpu_model": _("This field is required.")})
            if attrs.get("mig"):
                as_mig(attrs)
            else:
                as_share(attrs)
            return
        if attrs.get("mig"):
            why = _("A MIG instance is of one GPU model: give gpu_model, not gpu_models.")
            raise serializers.ValidationError({"gpu_models": why})
        asked = attrs.pop("gpu_share")
        if not asked.is_integer():
            why = _("A share of a GPU runs on one GPU model: give gpu_model, not gpu_models.")
            raise serializers.ValidationError({"gpu_models": why})
        attrs["gpus"], attrs["slices"] = int(asked), 0  # its memory: `_validate_models`

    @staticmethod
    def _one_model(name: str) -> GpuModel | None:
        """The GPU model of this name, not a family's; else None."""
        return GpuModel.objects.filter(name=name).first()

    def _validate_models(self, attrs, fewest: int) -> None:
        """The GPU models the job accepts, each one it can run on (`_validate_on`) with the
        GPU memory it asks (`gpu_memory_gb`): `gpu_model`, or those of `gpu_models` (the first
        becomes `gpu_model`; a family's models it cannot run on are left out). Kept in
        `accepts` only when there are several."""
        names = attrs.pop("accepts", None)
        if names is None:
            if "gpu_model" not in attrs:
                raise serializers.ValidationError({"gpu_model": _("This field is required.")})
            self._validate_on(attrs, attrs["gpu_model"], fewest)
            return
        try:
            found = accepted_models(names)
        except serializers.ValidationError as error:
            raise serializers.ValidationError({"gpu_models": error.detail}) from None
        models, memory = [], attrs.pop("gpu_memory_gb", None)
        for number, (model, named) in enumerate(found, 1):
            try:
                check_memory(model, memory)
                self._validate_on(attrs, model, fewest)
            except serializers.ValidationError:
                if named or (not models and number == len(found)):
                    raise
                continue
            models.append(model)
        if "gpu_model" in attrs and attrs["gpu_model"] != models[0]:
            why = _("Give gpu_model as the first of gpu_models, or leave it out.")
            raise serializers.ValidationError({"gpu_model": why})
        attrs["gpu_model"] = models[0]
        attrs["accepts"] = [model.name for model in models] if len(models) > 1 else []

    def _validate_on(self, attrs, model: GpuModel, fewest: int) -> None:
        """The job's size suits `model`'s nodes and its queue, and its model fits there."""
        check_gang(attrs["gpus"], model, attrs["queue"], "gpus")
        self._validate_model(attrs, model.name, fewest)

    def _validate_carried(self, attrs) -> None:
        """The command and environment, as the agent protocol writes them, leave room in the
        job's assignment for what the portal adds (launch variables, a parallel plan): a job
        accepted is one its node can always be sent."""
        carried = {"command": attrs.get("command", ""), "env": attrs.get("env", {})}
        size = len(json.dumps(carried, separators=(",", ":")))
        if size > MAX_CARRIED_BYTES:
            why = _(
                "The command and environment take %(size)s bytes as sent to the node (a "
                "character beyond ASCII takes up to six); at most %(most)s."
            ) % {"size": f"{size:,}", "most": f"{MAX_CARRIED_BYTES:,}"}
            raise serializers.ValidationError({"env": why})

    def _validate_model(self, attrs, gpu: str, fewest: int) -> None:
        """A model comes with its global batch, on a training job, and fits its size, its
        fewest and its most GPUs. (A recovery onto fewer nodes may still leave a count between
        them that no layout fits: the job is then told it has no plan.)"""
        spec, batch = attrs.get("model_spec"), attrs.get("global_batch")
        if spec is None and batch is None:
            return
        if spec is None or batch is None:
            missing = "model" if spec is None else "global_batch"
            raise serializers.ValidationError(
                {missing: _("A model and a global batch go together.")}
            )
        if attrs.get("kind", Kind.TRAINING) == Kind.INFERENCE:
            raise serializers.ValidationError(
                {"model": _("Only training jobs get parallel plans.")}
            )
        most = attrs.get("max_gpus") or attrs["gpus"]
        for field, gpus in (("gpus", attrs["gpus"]), ("min_gpus", fewest), ("max_gpus", most)):
            why = parallel.why_not(spec, gpu, gpus, batch)
            if why:
                raise serializers.ValidationError({field: why})


class ParallelPlanSerializer(serializers.ModelSerializer):
    reason = ReadableField()

    class Meta:
        model = ParallelPlan
        fields = ["attempt", "gpus", "reason", "created_at", "plan", "measured_s", "measured_at"]


class PlanQuerySerializer(KnownFields, serializers.Serializer):
    """What would this model do on N GPUs of this type."""

    model = ModelSpecField()
    global_batch = serializers.IntegerField(min_value=1, max_value=10_000_000)
    gpu_model = serializers.ChoiceField(choices=list(parallelism.GPUS))
    gpus = serializers.IntegerField(min_value=1, max_value=100_000)
    datacenters = serializers.IntegerField(min_value=1, max_value=8, default=1)
    alternatives = serializers.IntegerField(min_value=0, max_value=20, default=5)

    def validate(self, attrs):
        node = parallelism.GPUS[attrs["gpu_model"]].per_node
        if attrs["gpus"] > node and attrs["gpus"] % node:
            why = _("Part of one node or whole %(node)s-GPU nodes: %(gpus)s is neither.") % {
                "node": node,
                "gpus": attrs["gpus"],
            }
            raise serializers.ValidationError({"gpus": why})
        return attrs


class PlanAnswerSerializer(serializers.Serializer):
    plan = serializers.JSONField(help_text="The fastest plan that fits (WANKA_PARALLEL_PLAN)")
    alternatives = serializers.ListField(child=serializers.JSONField(), help_text="Next fastest")


class ShareSerializer(serializers.Serializer):
    mode = serializers.ChoiceField(
        ["mps", "time_slicing"], help_text="MPS, or time slicing (which isolates nothing)"
    )
    sm_percent = serializers.IntegerField(help_text="Of the GPU's SMs it may use (MPS only)")
    memory_mb = serializers.IntegerField(help_text="Device memory pinned for it (MPS only)")


class WorkloadDetailSerializer(WorkloadSerializer):
    """A workload with its history: every event, and each parallelism plan it ran with."""

    events = WorkloadEventSerializer(many=True, read_only=True)
    parallel_plans = ParallelPlanSerializer(
        many=True, read_only=True, help_text="Oldest first; the last is the current plan"
    )
    gpu_hours = serializers.SerializerMethodField(help_text="Booked plus used so far")
    share = serializers.SerializerMethodField(
        help_text="A running share of a GPU: how its node holds it to its share, as its agent "
        "last reported (null otherwise)"
    )

    class Meta(WorkloadSerializer.Meta):
        fields = [*WorkloadSerializer.Meta.fields, "gpu_hours", "share", "parallel_plans", "events"]

    def get_gpu_hours(self, workload) -> float:
        return round(gpu_hours(workload.usage, [workload]), 4)

    @extend_schema_field(ShareSerializer(allow_null=True))
    def get_share(self, workload) -> dict | None:
        if not workload.slices or workload.state != State.RUNNING:
            return None
        nodes = workload.allocations.values_list("node_id", flat=True)
        return reported_share(heartbeats(nodes), workload.pk, workload.attempt)


class CheckpointSerializer(serializers.ModelSerializer):
    class Meta:
        model = Checkpoint
        fields = [
            "step",
            "kind",
            "status",
            "location",
            "size_bytes",
            "duration_s",
            "stall_s",
            "created_at",
        ]


class RecoverySerializer(serializers.ModelSerializer):
    fault = serializers.CharField(source="fault.kind", default=None)
    node = serializers.CharField(source="fault.node.name", default=None)
    detail = ReadableField()

    class Meta:
        model = Recovery
        fields = [
            "id",
            "fault",
            "node",
            "step",
            "outcome",
            "detail",
            "resume_step",
            "lost_s",
            "started_at",
            "restart_pushed_at",
            "finished_at",
        ]


class SpanSerializer(serializers.Serializer):
    phase = serializers.ChoiceField(choices=[p.value for p in Phase])
    start = serializers.FloatField(help_text="Seconds since the epoch")
    end = serializers.FloatField()


class PhaseSecondsSerializer(serializers.Serializer):
    """Seconds in each phase."""

    queued = serializers.FloatField()
    starting = serializers.FloatField()
    productive = serializers.FloatField()
    checkpoint_stall = serializers.FloatField()
    lost = serializers.FloatField()
    recovering = serializers.FloatField()


class TimelineSerializer(serializers.Serializer):
    ettr = serializers.FloatField(
        allow_null=True, help_text="Productive / wall time since first admission"
    )
    seconds = PhaseSecondsSerializer()
    spans = SpanSerializer(many=True)
    checkpoints = CheckpointSerializer(many=True)
    recoveries = RecoverySerializer(many=True)


class EttrPointSerializer(serializers.Serializer):
    start = serializers.FloatField()
    ettr = serializers.FloatField(allow_null=True)
    goodput = serializers.FloatField(allow_null=True)
    jobs = serializers.IntegerField()


class EttrReportSerializer(serializers.Serializer):
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    jobs = serializers.IntegerField()
    ettr = serializers.FloatField(allow_null=True)
    goodput = serializers.FloatField(allow_null=True, help_text="Productive GPU-hours / held")
    seconds = PhaseSecondsSerializer()
    series = EttrPointSerializer(many=True)


class EttrQuerySerializer(serializers.Serializer):
    since = serializers.DateTimeField(required=False)
    until = serializers.DateTimeField(required=False)
    buckets = serializers.IntegerField(min_value=1, max_value=500, default=24)

    def validate(self, attrs):
        until = attrs.setdefault("until", timezone.now())
        since = attrs.setdefault("since", until - timedelta(hours=24))
        if since >= until:
            raise serializers.ValidationError({"since": _("Must be before until.")})
        return attrs


class AdviceQuerySerializer(serializers.Serializer):
    gpus = serializers.IntegerField(min_value=1, max_value=1_000_000)


class PolicyAdviceSerializer(serializers.Serializer):
    policy = serializers.CharField()
    interval_s = serializers.FloatField(allow_null=True)
    expected_ettr = serializers.FloatField()
    explanation = serializers.CharField()


class AdviceSerializer(serializers.Serializer):
    gpus = serializers.IntegerField()
    failures_per_gpu_hour = serializers.FloatField()
    source = serializers.CharField(help_text="Where the failure rate comes from")
    policies = PolicyAdviceSerializer(many=True, help_text="Best expected ETTR first")


class LogQuerySerializer(serializers.Serializer):
    attempt = serializers.IntegerField(min_value=0, max_value=2**31 - 1, required=False)
    node = serializers.CharField(max_length=100, required=False, help_text="A node's name")
    since = serializers.IntegerField(
        min_value=0, max_value=2**63 - 1, default=0, help_text="The `next` of the last read"
    )
    follow = serializers.BooleanField(
        default=False, help_text="Wait up to 15 s for new output while the workload runs"
    )


class LogChunkSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="node.name")
    lines = serializers.SerializerMethodField()

    class Meta:
        model = LogChunk
        fields = ["id", "attempt", "node", "offset", "at", "lines"]

    def get_lines(self, chunk) -> list[str]:
        return chunk.text.split("\n")


class LogRunSerializer(serializers.Serializer):
    attempt = serializers.IntegerField()
    node = serializers.CharField()
    lines = serializers.IntegerField()


class LogsSerializer(serializers.Serializer):
    chunks = LogChunkSerializer(many=True)
    next = serializers.IntegerField(help_text="Pass as `since` to read on")
    more = serializers.BooleanField(help_text="More output is there to read at once")
    writing = serializers.BooleanField(help_text="The workload may still write")
    runs = LogRunSerializer(many=True, help_text="Every attempt and node that wrote output")


class GroupByField(serializers.CharField):
    """Comma-separated keys of `usage.REPORT_KEYS`, kept in the order given."""

    def to_internal_value(self, data):
        keys = [key.strip() for key in super().to_internal_value(data).split(",") if key.strip()]
        unknown = [key for key in keys if key not in REPORT_KEYS]
        if unknown or not keys:
            raise serializers.ValidationError(
                _("Group by one or more of %(keys)s, comma-separated.")
                % {"keys": ", ".join(REPORT_KEYS)}
            )
        return tuple(dict.fromkeys(keys))


class UsageQuerySerializer(serializers.Serializer):
    since = serializers.DateTimeField(required=False, help_text="Default: 30 days before until")
    until = serializers.DateTimeField(required=False, help_text="Default: now")
    group_by = GroupByField(
        required=False, default=BY_QUEUE, help_text="Default: tenant,queue,gpu_model"
    )

    def validate(self, attrs):
        until = attrs.setdefault("until", timezone.now())
        since = attrs.setdefault("since", until - timedelta(days=30))
        if since >= until:
            raise serializers.ValidationError({"since": _("Must be before until.")})
        return attrs


MONEY = {"max_digits": 20, "decimal_places": 2, "coerce_to_string": False}


class UsageRowSerializer(serializers.Serializer):
    tenant = serializers.CharField(required=False)
    queue = serializers.CharField(required=False)
    gpu_model = serializers.CharField(required=False)
    user = serializers.CharField(required=False, help_text="Who submitted; empty when gone")
    in_use = GpusField(help_text="GPUs held now, a share or MIG instance as its charge")
    gpu_hours = serializers.FloatField(help_text="GPU-hours used within the window")
    cost = serializers.DecimalField(
        **MONEY, help_text="GPU-hours x the GPU model's price x the priority class's factor"
    )


class UsageSerializer(serializers.Serializer):
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    group_by = serializers.ListField(child=serializers.CharField())
    currency = serializers.CharField()
    rows = UsageRowSerializer(many=True)
    gpu_hours = serializers.FloatField(help_text="All the rows' GPU-hours")
    cost = serializers.DecimalField(**MONEY, help_text="All the rows' cost")


class OperateSerializer(KnownFields, serializers.Serializer):
    """An operator's action on a job: what, why (the tenant reads it in the job's history)
    and, to change its priority, the new priority class."""

    action = serializers.ChoiceField(choices=actions.ACTIONS)
    reason = serializers.CharField(max_length=200)
    priority = serializers.ChoiceField(choices=PriorityClass.choices, required=False)

    def validate(self, data):
        if data["action"] == "priority" and "priority" not in data:
            raise serializers.ValidationError({"priority": _("Give the new priority class.")})
        return data


class ModelStartSerializer(serializers.Serializer):
    gpu_model = serializers.CharField()
    now = serializers.BooleanField(help_text="Whether the next cycle would start it there")
    start = serializers.DateTimeField(
        allow_null=True, help_text="When it would start there; null: later than `until`"
    )
    start_p90 = serializers.DateTimeField(allow_null=True, help_text="By when, 9 times in 10")
    until = serializers.DateTimeField(help_text="How far ahead the estimate looked")


class PreviewSerializer(serializers.Serializer):
    starts = serializers.BooleanField(help_text="Whether the next cycle would start it")
    nodes = serializers.IntegerField(help_text="The nodes it would start on; 0 when it waits")
    reason = serializers.CharField(help_text="Why it would wait; empty when it starts")
    position = serializers.IntegerField(allow_null=True, help_text="Its place in its queue")
    models = ModelStartSerializer(
        many=True,
        help_text="For a job that accepts several GPU models: on each, in its order, when it "
        "would start there were it its only one (estimated as for pending work)",
    )
