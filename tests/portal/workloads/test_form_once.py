"""Filter sets whose form class is made once per class (`FormOnce`): each class its own, the
same fields django-filter would make, and each request's form with fields of its own."""

from django.http import QueryDict
from django_filters import FilterSet

from portal.dashboard.operations import OperatorWorkloadFilterSet
from portal.workloads.choices import State
from portal.workloads.filtersets import SortedWorkloadFilterSet, WorkloadFilterSet
from portal.workloads.models import Workload
from tests.builders import make_workload


def test_each_filter_set_class_has_its_own_form_class_made_once(db):
    made = {
        cls: cls(QueryDict()).get_form_class()
        for cls in (WorkloadFilterSet, SortedWorkloadFilterSet, OperatorWorkloadFilterSet)
    }
    assert len(set(made.values())) == 3
    for cls, form_class in made.items():
        assert cls(QueryDict("state=running")).get_form_class() is form_class
        plain = FilterSet.get_form_class(cls(QueryDict()))  # django-filter's, made anew
        assert {n: repr(f.__class__) for n, f in form_class.base_fields.items()} == {
            n: repr(f.__class__) for n, f in plain.base_fields.items()
        }
    assert "tenant" in made[OperatorWorkloadFilterSet].base_fields
    assert "ordering" in made[SortedWorkloadFilterSet].base_fields
    assert "tenant" not in made[WorkloadFilterSet].base_fields


def test_requests_filter_with_forms_of_their_own(acme_llm):
    make_workload(acme_llm, "waits", gpus=8)
    make_workload(acme_llm, "runs", gpus=8, state=State.RUNNING)
    first = WorkloadFilterSet(QueryDict("state=running"), queryset=Workload.objects.all())
    second = WorkloadFilterSet(QueryDict("state=pending&name=wai"), queryset=Workload.objects.all())
    assert [w.name for w in first.qs] == ["runs"]
    assert [w.name for w in second.qs] == ["waits"]
    assert first.form.fields["state"] is not second.form.fields["state"]
    assert first.form.cleaned_data["state"] == ["running"]
    assert not WorkloadFilterSet(
        QueryDict("state=nonsense"), queryset=Workload.objects.all()
    ).is_valid()
