from dataclasses import dataclass
from datetime import UTC, timedelta

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models, transaction
from django.db.models import Case, F, OuterRef, Q, Subquery, Sum, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.utils.translation import gettext_noop

from portal.cluster.choices import Health
from portal.cluster.models import GpuModel, Node, Region
from portal.core.live import publish_tenant
from portal.core.models import audit
from portal.quotas.choices import (
    BudgetWindow,
    FairSharing,
    ReclaimWithinCohort,
    RequestStatus,
    StragglerPolicy,
    Strategy,
    WithinClusterQueue,
)
from portal.tenancy.models import Tenant, TenantQuerySet
from scheduler.words import phrase

THIS_MONTH = phrase("this month")  # a budget's window, in its reasons
LAST_DAYS = phrase("in the last {days} days")


class Cohort(models.Model):
    """Queues that lend each other their idle quota; cohorts nest under a parent cohort."""

    name = models.CharField(max_length=64, unique=True)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children"
    )

    def __str__(self):
        return self.name

    def clean(self):
        """A cohort never sits under itself, directly or through its parents (the engine would
        cut the loop, and the tree would no longer say who lends to whom)."""
        seen, parent = {self.pk}, self.parent
        while parent is not None:
            if parent.pk in seen:
                raise ValidationError({"parent": _("A cohort cannot sit under itself.")})
            seen.add(parent.pk)
            parent = parent.parent


THRESHOLD_NEEDS_BORROWING = gettext_noop(
    "A maximum priority threshold applies only when borrow_within_cohort is set."
)
# A queue's preemption policy as the dashboard puts it to tenants (`preemption_in_words`).
_RECLAIM_WORDS = {
    ReclaimWithinCohort.NEVER: _("never"),
    ReclaimWithinCohort.LOWER_PRIORITY: _("only from lower-priority jobs"),
    ReclaimWithinCohort.ANY: _("from any borrower"),
}
_WITHIN_QUEUE_WORDS = {
    WithinClusterQueue.NEVER: _("nothing"),
    WithinClusterQueue.LOWER_PRIORITY: _("lower-priority jobs"),
    WithinClusterQueue.LOWER_OR_NEWER_EQUAL_PRIORITY: _(
        "lower-priority jobs, and newer jobs of the same priority"
    ),
}
_FAIR_SHARING_WORDS = {
    FairSharing.OFF: _(", if this queue's share is no larger than theirs"),
    FairSharing.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE: _(
        ", if this queue's share stays no larger than theirs afterwards"
    ),
    FairSharing.LESS_THAN_INITIAL_SHARE: _(", if this queue's share ends below what theirs was"),
    FairSharing.BOTH: _(
        ", if this queue's share stays no larger than theirs afterwards, or else ends below "
        "what theirs was"
    ),
}


class Queue(models.Model):
    """A tenant's virtual queue in one region: quotas per GPU model, a priority, a cohort."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="queues")
    name = models.SlugField(max_length=64)
    region = models.ForeignKey(Region, on_delete=models.PROTECT, related_name="queues")
    cohort = models.ForeignKey(
        Cohort, null=True, blank=True, on_delete=models.SET_NULL, related_name="queues"
    )
    priority = models.IntegerField(default=0)
    weight = models.FloatField(default=1.0, help_text=_("Fair-share weight inside the cohort"))
    strategy = models.CharField(
        max_length=20, choices=Strategy.choices, default=Strategy.BEST_EFFORT_FIFO
    )
    # Preemption policy: what this queue's pending work may evict to start, in Kueue's names
    # (scheduler.engine.PreemptionPolicy).
    reclaim_within_cohort = models.CharField(
        max_length=16,
        choices=ReclaimWithinCohort.choices,
        default=ReclaimWithinCohort.ANY,
        help_text=_(
            "Under its nominal quota, take back what other queues of the cohort borrowed: "
            "never, only from lower-priority work, or from any"
        ),
    )
    within_cluster_queue = models.CharField(
        max_length=32,
        choices=WithinClusterQueue.choices,
        default=WithinClusterQueue.LOWER_PRIORITY,
        help_text=_(
            "Evict this queue's own work to start a job: never, lower-priority work, or also "
            "newer work of the same priority"
        ),
    )
    borrow_within_cohort = models.BooleanField(
        default=False,
        help_text=_(
            "While borrowing, evict lower-priority work other queues of the cohort borrowed"
        ),
    )
    max_priority_threshold = models.IntegerField(
        null=True,
        blank=True,
        help_text=_(
            "With borrow_within_cohort, evict only work of at most this priority "
            "(empty: any of lower priority)"
        ),
    )
    fair_sharing = models.CharField(
        max_length=64,
        choices=FairSharing.choices,
        default=FairSharing.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,
        help_text=_(
            "How borrow_within_cohort weighs the two queues' shares: Off (only that this "
            "queue's share is no larger than the other's before, which keeps the room with "
            "the job), LessThanOrEqualToFinalShare (this queue's share after no larger than "
            "the other's after), LessThanInitialShare (smaller than the other's before), or "
            "the first and, where it finds no room, the second"
        ),
    )
    preempt_by_fair_share = models.BooleanField(
        default=False,
        help_text=_(
            "While borrowing, also evict other queues' borrowed work of this queue's "
            "priority or above, as reclaim_within_cohort allows, when fair_sharing lets the shares "
            "go (Kueue's preemption with fair sharing enabled)"
        ),
    )
    # The preemption policy's fields, in the order the console and the API show them.
    PREEMPTION_FIELDS = (
        "reclaim_within_cohort",
        "within_cluster_queue",
        "borrow_within_cohort",
        "max_priority_threshold",
        "fair_sharing",
        "preempt_by_fair_share",
    )
    preemption_grace_s = models.PositiveIntegerField(
        default=60, help_text=_("How long a preempted job of this queue may take to save first")
    )
    reclaim_deadline_s = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text=_(
            "When this queue's work takes GPUs back, the most its victims get to save "
            "(an inference queue's scale-up should not wait out a training job's grace); empty: "
            "each victim's own grace"
        ),
    )
    straggler_policy = models.CharField(
        max_length=8,
        choices=StragglerPolicy.choices,
        default=StragglerPolicy.ALERT,
        help_text=_("What a straggler in one of this queue's jobs brings: an alert, or a spare"),
    )
    spans_datacenters = models.BooleanField(
        default=False,
        help_text=_(
            "Jobs that name no topology may use any data center of the region (a job with "
            "a model spans them only where its planner says little is lost)"
        ),
    )

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["tenant", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "name"], name="%(app_label)s_%(class)s_unique_name"
            )
        ]

    def __str__(self):
        return f"{self.tenant.slug}/{self.name}"

    def clean(self):
        if self.max_priority_threshold is not None and not self.borrow_within_cohort:
            raise ValidationError({"max_priority_threshold": _(THRESHOLD_NEEDS_BORROWING)})

    def preemption_in_words(self) -> list[str]:
        """The preemption policy as a tenant reads it, a short line per setting."""
        borrowing = _("nothing")
        by_share = self.preempt_by_fair_share and self.fair_sharing != FairSharing.OFF
        if by_share and self.reclaim_within_cohort != ReclaimWithinCohort.NEVER:
            borrowing = _("other queues' jobs on borrowed quota, by fair share")
            borrowing += _FAIR_SHARING_WORDS[self.fair_sharing]
        elif self.borrow_within_cohort:
            borrowing = _("other queues' lower-priority jobs on borrowed quota")
            if self.max_priority_threshold is not None:
                borrowing += _(" (of priority %(threshold)s at most)") % {
                    "threshold": self.max_priority_threshold
                }
            borrowing += _FAIR_SHARING_WORDS[self.fair_sharing]
        return [
            _("Takes back lent quota: %s") % _RECLAIM_WORDS[self.reclaim_within_cohort],
            _("Preempts in this queue: %s") % _WITHIN_QUEUE_WORDS[self.within_cluster_queue],
            _("Preempts while borrowing: %s") % borrowing,
        ]


class Quota(models.Model):
    """Quota and limits for one GPU model. Empty limits mean unlimited."""

    gpu_model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="+")
    guarantee = models.PositiveIntegerField(default=0, help_text=_("Never lent, never reclaimed"))
    nominal = models.PositiveIntegerField(
        default=0, help_text=_("Lendable to the cohort when idle")
    )
    borrowing_limit = models.PositiveIntegerField(null=True, blank=True)
    lending_limit = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        abstract = True

    @staticmethod
    def constraints_for(owner: str) -> list:
        """One quota per owner and GPU model, its guarantee within its nominal quota."""
        return [
            models.UniqueConstraint(
                fields=[owner, "gpu_model"], name="%(app_label)s_%(class)s_unique_model"
            ),
            models.CheckConstraint(
                condition=models.Q(guarantee__lte=models.F("nominal")),
                name="%(app_label)s_%(class)s_guarantee_within_nominal",
                violation_error_message=_("The guarantee cannot be more than the nominal quota."),
            ),
        ]


class QueueQuota(Quota):
    """One queue's quota for one GPU model."""

    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="quotas")

    class Meta:
        constraints = Quota.constraints_for("queue")

    def __str__(self):
        return f"{self.queue} {self.gpu_model}: {self.nominal}"


class FamilyQuota(models.Model):
    """One queue's quota for a family of GPU models (`GpuModel.family`, e.g. hopper), above
    its quotas per model: so many GPUs of the family's models in all, any mix; a model of the
    family with no quota of its own may use all of it. Beyond it the queue borrows, within the
    borrowing limit (empty: unlimited)."""

    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="family_quotas")
    family = models.CharField(_("family"), max_length=32)
    nominal = models.PositiveIntegerField(_("nominal quota"), default=0)
    borrowing_limit = models.PositiveIntegerField(_("borrowing limit"), null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["queue", "family"], name="quotas_family_unique")
        ]
        verbose_name, verbose_name_plural = _("family quota"), _("family quotas")

    def __str__(self):
        return f"{self.queue} {self.family}: {self.nominal}"

    def clean(self):
        if self.family and not GpuModel.objects.filter(family=self.family).exists():
            families = sorted(
                set(GpuModel.objects.exclude(family="").values_list("family", flat=True))
            )
            raise ValidationError(
                {
                    "family": _("No GPU model is of family %(family)s (families: %(known)s).")
                    % {"family": self.family, "known": ", ".join(families) or _("none")}
                }
            )


class CohortQuota(Quota):
    """A cohort's own quota for one GPU model, lent to the queues below it, with its limits
    toward its parent cohort."""

    cohort = models.ForeignKey(Cohort, on_delete=models.CASCADE, related_name="quotas")

    class Meta:
        constraints = Quota.constraints_for("cohort")

    def __str__(self):
        return f"{self.cohort} {self.gpu_model}: {self.nominal}"


def _capacity_nodes(region, gpu_model=None, family=None):
    """Nodes of a model (or of a family's models) in a region that are not down."""
    of = {"gpu_model": gpu_model} if family is None else {"gpu_model__family": family}
    return Node.objects.filter(leaf__pod__datacenter__region=region, **of).exclude(
        health=Health.DOWN
    )


def region_capacity(region_id: int, gpu_model_id: int | None, family: str | None = None) -> int:
    """GPUs of a model (or of a family's models) in a region, on nodes that are not down."""
    nodes = _capacity_nodes(region_id, gpu_model_id, family)
    return nodes.aggregate(n=Sum("gpu_count"))["n"] or 0


def _total(queryset, field):
    """A subquery: the sum of `field` over `queryset`, as one value."""
    return Coalesce(
        Subquery(
            queryset.order_by()
            .annotate(one=Value(1))
            .values("one")
            .annotate(total=Sum(field))
            .values("total")
        ),
        0,
    )


@dataclass(frozen=True)
class CapacityCheck:
    """What an operator needs to see before approving a quota request."""

    capacity: int
    committed: int
    requested: int

    @property
    def fits(self) -> bool:
        return self.committed + self.requested <= self.capacity

    def __str__(self):
        """As an operator reads it, in the operator's language."""
        return _(
            "%(committed)s committed + %(requested)s requested = %(total)s of %(capacity)s GPUs: "
            "%(verdict)s"
        ) % {
            "committed": self.committed,
            "requested": self.requested,
            "total": self.committed + self.requested,
            "capacity": self.capacity,
            "verdict": _("fits") if self.fits else _("does not fit"),
        }


class Request(models.Model):
    """What a tenant admin asks of the operators: why, who asked and when, and their decision."""

    reason = models.TextField()
    status = models.CharField(
        max_length=16, choices=RequestStatus.choices, default=RequestStatus.PENDING
    )
    requested_by = models.ForeignKey(
        "auth.User", null=True, on_delete=models.SET_NULL, related_name="+"
    )
    requested_at = models.DateTimeField(auto_now_add=True)
    decided_by = models.ForeignKey(
        "auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_note = models.TextField(blank=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        abstract = True
        ordering = ["-requested_at", "-id"]


class QuotaRequest(Request):
    """A tenant admin's request for more GPU quota on one queue, of a GPU model or of a GPU
    family (its `FamilyQuota`), decided by an operator."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="quota_requests")
    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="quota_requests")
    gpu_model = models.ForeignKey(
        GpuModel, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    family = models.CharField(max_length=32, blank=True)
    region = models.ForeignKey(Region, on_delete=models.PROTECT, related_name="+")
    count = models.PositiveIntegerField()

    class Meta(Request.Meta):
        constraints = [
            models.CheckConstraint(
                condition=Q(gpu_model__isnull=False, family="")
                | Q(gpu_model__isnull=True) & ~Q(family=""),
                name="quotas_request_model_or_family",
            )
        ]

    def __str__(self):
        return f"{self.count} x {self.asked} for {self.queue}"

    @property
    def asked(self) -> str:
        """What quota it asks for: a GPU model's name, or "hopper family"."""
        if self.gpu_model_id is None:
            return _("%(family)s family") % {"family": self.family}
        return self.gpu_model.name

    @classmethod
    def file(cls, serializer, user) -> "QuotaRequest":
        """Save a validated request from a tenant admin, with its audit event."""
        request = serializer.save(tenant=user.membership.tenant, requested_by=user)
        audit(
            "quota_request.created",
            request,
            actor=user,
            tenant=request.tenant,
            count=request.count,
            gpu_model=request.gpu_model.name if request.gpu_model else None,
            family=request.family or None,
            queue=request.queue.name,
        )
        return request

    @staticmethod
    def with_capacity(queryset):
        """`queryset` annotated with its region's capacity and committed quota for the model
        (or the family: its models' GPUs), in the same query, so a list of requests costs one
        query however long. Quota of a family counts as committed to each of its models, and
        its models' quotas to it: either may be spent all on the other."""
        region, model = OuterRef("region"), OuterRef("gpu_model")
        family = Coalesce(OuterRef("gpu_model__family"), OuterRef("family"))
        in_region = {"queue__region": region}
        of_model = Q(gpu_model__isnull=False)
        families = _total(FamilyQuota.objects.filter(family=family, **in_region), "nominal")
        return queryset.annotate(
            capacity_gpus=Case(
                When(of_model, then=_total(_capacity_nodes(region, model), "gpu_count")),
                default=_total(_capacity_nodes(region, family=family), "gpu_count"),
            ),
            committed_gpus=families
            + Case(
                When(
                    of_model,
                    then=_total(QueueQuota.objects.filter(gpu_model=model, **in_region), "nominal"),
                ),
                default=_total(
                    QueueQuota.objects.filter(gpu_model__family=family, **in_region), "nominal"
                ),
            ),
        )

    def capacity_check(self) -> CapacityCheck:
        """Fresh from the database (annotated rows of `with_capacity` may be stale)."""
        row = (
            self.with_capacity(QuotaRequest.objects.filter(pk=self.pk))
            .values("capacity_gpus", "committed_gpus")
            .get()
        )
        return CapacityCheck(row["capacity_gpus"], row["committed_gpus"], self.count)

    def decide(self, operator, approve: bool, note: str = "") -> bool:
        """Approve (raising the queue's nominal quota) or reject. Returns False when the request
        was already decided or, for an approval, when it no longer fits the region's capacity."""
        with transaction.atomic():
            # One decision per region at a time, so two approvals cannot both see room.
            Region.objects.select_for_update().get(pk=self.region_id)
            if approve and not self.capacity_check().fits:
                return False
            status = RequestStatus.APPROVED if approve else RequestStatus.REJECTED
            claimed = QuotaRequest.objects.filter(pk=self.pk, status=RequestStatus.PENDING).update(
                status=status, decided_by=operator, decided_at=timezone.now(), decision_note=note
            )
            if not claimed:
                return False
            if approve:
                quotas = QueueQuota.objects if self.gpu_model_id else FamilyQuota.objects
                of = {"gpu_model": self.gpu_model} if self.gpu_model_id else {"family": self.family}
                quota, _ = quotas.select_for_update().get_or_create(queue=self.queue, **of)
                quota.nominal += self.count
                quota.save(update_fields=["nominal"])
            self.refresh_from_db()
            audit(
                f"quota_request.{status}",
                self,
                actor=operator,
                tenant=self.tenant,
                count=self.count,
                gpu_model=self.gpu_model.name if self.gpu_model else None,
                family=self.family or None,
                queue=self.queue.name,
            )
        publish_tenant(
            self.tenant_id,
            "quota.decided",
            {
                "id": self.pk,
                "status": self.status,
                "queue": self.queue.name,
                "gpu_model": self.gpu_model.name if self.gpu_model else self.family,
                "count": self.count,
            },
        )
        return True


def _default_thresholds():
    return [80, 100]


class Budget(models.Model):
    """GPU-hours a tenant, or one of its queues, may use over a window, each GPU-hour weighted
    by its GPU model (`GpuRate.weight`). Hard: a job that could overrun what is left does not
    start. Soft: once spent, the queues borrow no more and lose most of their fair-share
    weight. Members are warned as use crosses each threshold."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="budgets")
    queue = models.ForeignKey(
        Queue,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="budgets",
        help_text="Empty: the whole tenant, all its queues together",
    )
    gpu_hours = models.PositiveIntegerField(help_text="Weighted GPU-hours per window")
    window = models.CharField(
        max_length=8, choices=BudgetWindow.choices, default=BudgetWindow.MONTH
    )
    window_days = models.PositiveSmallIntegerField(
        default=30,
        validators=[MinValueValidator(1), MaxValueValidator(366)],
        help_text="The length of a rolling window",
    )
    hard = models.BooleanField(
        default=False,
        help_text="Hard: a job starts only if its GPUs for its whole time limit fit in what is "
        "left (jobs without a time limit wait). Soft: once spent, no more borrowing and a "
        "quarter of the fair-share weight. Running jobs are never stopped.",
    )
    thresholds = models.JSONField(
        default=_default_thresholds,
        blank=True,
        help_text="Percentages of the budget at which members are warned, e.g. [80, 100]",
    )
    updated_at = models.DateTimeField(auto_now=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        # A queue's budgets, then the tenant's own, on every database.
        ordering = ["tenant__name", F("queue__name").asc(nulls_last=True), "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "queue"], name="%(app_label)s_%(class)s_unique_queue"
            ),
            models.UniqueConstraint(
                fields=["tenant"],
                condition=models.Q(queue__isnull=True),
                name="%(app_label)s_%(class)s_unique_tenant",
            ),
        ]

    def __str__(self):
        return f"{self.scope}: {self.gpu_hours} GPU-hours {self.window_words}"

    @property
    def scope(self) -> str:
        """Whose budget, in words."""
        return f"queue {self.queue.name}" if self.queue_id else f"tenant {self.tenant}"

    @property
    def window_words(self) -> str:
        if self.window == BudgetWindow.MONTH:
            return THIS_MONTH
        return LAST_DAYS.format(days=self.window_days)

    def window_at(self, now):
        """The window's start and end around `now`: the calendar month (UTC) it falls in, or
        the rolling days up to it."""
        if self.window == BudgetWindow.ROLLING:
            return now - timedelta(days=self.window_days), now
        start = now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        end = (start + timedelta(days=32)).replace(day=1)
        return start, end

    def record(self, actor, before: dict | None = None, reason: str = "") -> None:
        """Audit the budget just saved: created when `before` is None, else what changed since
        `before` (its `facts` then)."""
        after, why = self.facts(), {"reason": reason} if reason else {}
        if before is None:
            audit("budget.created", self, actor=actor, tenant=self.tenant, **after, **why)
        else:
            changed = {k: [before[k], after[k]] for k in after if before[k] != after[k]}
            audit("budget.changed", self, actor=actor, tenant=self.tenant, changed=changed, **why)

    def facts(self) -> dict:
        """What the budget says, for its audit events."""
        return {
            "owner": f"{self.tenant.slug}/{self.queue.name}" if self.queue_id else self.tenant.slug,
            "gpu_hours": self.gpu_hours,
            "window": self.window,
            "window_days": self.window_days,
            "hard": self.hard,
            "thresholds": self.thresholds,
        }

    def clean(self):
        if self.queue_id and self.queue.tenant_id != self.tenant_id:
            raise ValidationError({"queue": _("The queue belongs to another tenant.")})
        if not isinstance(self.thresholds, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) and 0 < t <= 1000
            for t in self.thresholds
        ):
            raise ValidationError({"thresholds": _(THRESHOLDS_ARE_PERCENTAGES)})
        self.thresholds = sorted(set(self.thresholds))


THRESHOLDS_ARE_PERCENTAGES = gettext_noop(
    "A list of whole percentages between 1 and 1000, e.g. [80, 100]."
)


class BudgetRequest(Request):
    """A tenant admin's request for a larger budget, decided by an operator."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="budget_requests")
    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="requests")
    gpu_hours = models.PositiveIntegerField(help_text="The budget asked for, per window")

    class Meta(Request.Meta):
        verbose_name, verbose_name_plural = _("budget request"), _("budget requests")

    def __str__(self):
        return f"{self.gpu_hours} GPU-hours for {self.budget.scope}"

    def decide(self, operator, approve: bool, note: str = "") -> bool:
        """Approve (the budget becomes what was asked) or reject; False when it was already
        decided."""
        status = RequestStatus.APPROVED if approve else RequestStatus.REJECTED
        with transaction.atomic():
            claimed = BudgetRequest.objects.filter(pk=self.pk, status=RequestStatus.PENDING).update(
                status=status, decided_by=operator, decided_at=timezone.now(), decision_note=note
            )
            if not claimed:
                return False
            before = self.budget.gpu_hours
            if approve:  # never lower: an operator may have raised it since
                Budget.objects.filter(pk=self.budget_id, gpu_hours__lt=self.gpu_hours).update(
                    gpu_hours=self.gpu_hours, updated_at=timezone.now()
                )
            self.refresh_from_db()
            audit(
                f"budget_request.{status}",
                self,
                actor=operator,
                tenant=self.tenant,
                budget=self.budget.facts()["owner"],
                before=before,
                asked=self.gpu_hours,
            )
            publish_tenant(
                self.tenant_id,
                "budget.decided",
                {
                    "id": self.pk,
                    "status": self.status,
                    "budget": self.budget.facts()["owner"],
                    "gpu_hours": self.gpu_hours,
                },
            )
        return True


class BudgetAlert(models.Model):
    """A budget's use crossing one of its thresholds in one window: members are told once."""

    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="alerts")
    threshold = models.PositiveSmallIntegerField()
    window_start = models.DateTimeField()
    used = models.FloatField(help_text="Weighted GPU-hours used when it was crossed")
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self):
        return f"{self.budget}: {self.threshold} % at {self.at:%Y-%m-%d %H:%M}"


class GpuRate(models.Model):
    """What a GPU-hour of one GPU model counts against budgets and costs."""

    gpu_model = models.OneToOneField(GpuModel, on_delete=models.CASCADE, related_name="rate")
    weight = models.FloatField(
        default=1.0,
        validators=[MinValueValidator(0)],
        help_text="What one GPU-hour counts against budgets (e.g. H800 1.0, H20 0.4)",
    )
    price = models.DecimalField(
        max_digits=12,
        decimal_places=4,
        default=0,
        validators=[MinValueValidator(0)],
        help_text="Price of one GPU-hour, in the portal's currency",
    )

    class Meta:
        ordering = ["gpu_model__name"]
        verbose_name, verbose_name_plural = _("GPU rate"), _("GPU rates")

    def __str__(self):
        return f"{self.gpu_model}: weight {self.weight:g}, {self.price} per GPU-hour"


class PriorityFactor(models.Model):
    """What a job's priority class multiplies its price by (e.g. low 0.5, critical 2)."""

    priority = models.IntegerField(
        unique=True, help_text="A priority class: 0 low, 100 normal, 200 high, 300 critical"
    )
    factor = models.FloatField(default=1.0, validators=[MinValueValidator(0)])

    class Meta:
        ordering = ["priority"]

    def __str__(self):
        return f"priority {self.priority}: x{self.factor:g}"
