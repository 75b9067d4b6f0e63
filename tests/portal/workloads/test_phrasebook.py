"""Wanka's sentences in Chinese: every template translated with its fields, every sentence the
engine, the autoscaler and the checkpoint advisor write read back and rendered, and a tenant
reading them in Chinese told no more of other tenants than in English."""

import re

import pytest
from django.utils import translation
from django.utils.translation import gettext

from portal.workloads.phrasebook import FIELD, _templates, translate
from portal.workloads.reasons import Reader
from scheduler import checkpointing
from scheduler.autoscale import Autoscaler, Settings
from scheduler.engine import plan
from scheduler.engine.explain import defrag_reason, left_reason
from scheduler.engine.gains import Contender
from scheduler.engine.testing import make_snapshot, make_workload
from tests.builders import make_queue
from tests.builders import make_workload as make_job
from tests.scheduler.engine.test_preemption import CV_ON_LEAF, LEAF, NOW, busy, cv, nlp

# Latin words a Chinese sentence keeps: the test's names, units and names of things.
KEPT = {"nlp", "cv", "dc", "H800", "GPU", "GPUs", "MTBF", "Daly", "LowerOrNewerEqualPriority"}
LATIN = re.compile(r"[A-Za-z][A-Za-z0-9]{2,}")


def english_left(text: str) -> set[str]:
    return {w for w in LATIN.findall(text) if w not in KEPT and not re.match(r"[a-z]+\d", w)}


def zh(text: str, reader=None) -> str:
    with translation.override("zh-hans"):
        return translate(text, reader)


def test_every_template_has_a_chinese_translation_with_the_same_fields():
    missing, fields = [], []
    with translation.override("zh-hans"):
        for template, _ in _templates():
            said = gettext(template)
            if said == template:
                missing.append(template)
            elif set(FIELD.findall(said)) != set(FIELD.findall(template)):
                fields.append(template)
    assert not missing, missing
    assert not fields, fields


def test_every_template_reads_back_into_its_own_fields():
    wrong = []
    for template, parts in _templates():
        values = {name: f"v{i}" for i, name in enumerate(parts[1::2])}
        text = template.format(**values)
        with translation.override("zh-hans"):
            if translate(text) != gettext(template).format(**values):
                wrong.append(template)
    assert not wrong, wrong


def test_what_the_engine_says_of_a_reclaim_reads_in_chinese():
    snapshot = make_snapshot(LEAF, [nlp, cv], [*CV_ON_LEAF, make_workload(1, nlp, 16)])
    result = plan(snapshot, now=NOW)
    said = [p.reason for p in result.pending] + [p.reason for p in result.preemptions]
    shrink = plan(
        make_snapshot(
            LEAF, [nlp, cv], [busy(90, cv, *LEAF, min_gpus=16), make_workload(1, nlp, 16)]
        ),
        now=NOW,
    )
    said += [s.reason for s in shrink.shrinks]
    assert len(said) >= 3 and "reclaimed for workload 1" in said[1]
    for text in said:
        assert not english_left(zh(text)), (text, zh(text))
    assert zh(said[0]).startswith("正在抢占 2 个作业（队列 cv: 2），以在叶交换机 dc1/p1/l1")


def test_the_advisor_and_the_autoscaler_read_in_chinese():
    advice = checkpointing.advise(4096, checkpointing.Costs(), job_hours=72)
    scaler = Autoscaler(Settings(target=10, max_replicas=4, scale_to_zero=True))
    decisions = set()
    for t in range(0, 300, 2):  # a burst, then nothing
        scaler.observe(float(t), 80.0 if t < 60 else 0.0)
        decisions.add(scaler.decide(float(t), ready=1).reason)
    assert len(decisions) >= 3, decisions
    for text in [a.explanation for a in advice] + sorted(decisions):
        assert not english_left(zh(text)), (text, zh(text))


def test_unknown_text_stays_as_it_is():
    assert zh("the cluster is on fire, says Bob") == "the cluster is on fire, says Bob"
    assert zh("") == ""


@pytest.mark.django_db
def test_a_tenant_reads_other_tenants_work_hidden_in_chinese(cluster, acme, globex):
    mine = make_job(make_queue(acme, "llm", h800=32), "mine", gpus=8)
    theirs = make_job(make_queue(globex, "train", h800=32), "theirs", gpus=8)
    shrunk = (
        f"shrunk from 64 to 48 GPUs (its minimum is 32) to make room for workload {theirs.pk}: "
        "queue globex/train is under its H800 nominal quota (271/400 in use, job needs 16)"
    )
    claim = (
        "preempting 3 workloads (queue acme/llm: 1, globex/train: 2) to make room (queue "
        "acme/llm is under its H800 nominal quota (0/32 in use, job needs 16)); it starts once "
        "they have stopped"
    )
    behind = f"waits behind workload {mine.pk}, the head of strict-FIFO queue acme/llm"
    reader = Reader(acme)
    for text in (shrunk, claim, behind):
        read = zh(text, reader)
        assert "globex" not in read and "271/400" not in read, read
        assert not english_left(read.replace("llm", "")), read
    assert f"作业 {theirs.pk}" not in zh(shrunk, reader) and "（其他租户的）" in zh(shrunk, reader)
    assert "llm: 1" in zh(claim, reader) and "3 个" not in zh(claim, reader)
    assert f"作业 {mine.pk}" in zh(behind, reader) and "队列 llm" in zh(behind, reader)
    # An operator reads it whole, and English stays the Reader's.
    assert "globex/train" in zh(shrunk, Reader(None)) and "271/400" in zh(shrunk)
    with translation.override("en"):
        assert translate(shrunk, reader) == reader.read(shrunk)


def test_the_work_a_job_moves_or_gives_way_for_is_hidden_when_another_tenants(
    cluster, acme, globex
):
    """Defragmentation moves Acme's job for Globex's gang, and Acme's job leaves the faster
    model to Globex's: in English and in Chinese, Acme reads neither id nor figure of Globex's
    work."""
    theirs = make_job(make_queue(globex, "train", h800=32), "theirs", gpus=8)
    moved = defrag_reason("dc1-p1-l1-n2", "p1", make_workload(theirs.pk, nlp, 8))
    left = left_reason(Contender(make_workload(theirs.pk, nlp, 1), "H800", "H20", 1.1), "H20")
    reader = Reader(acme)
    for text in (moved, left):
        assert f"workload {theirs.pk}," in text  # the operator's
        for read in (reader.read(text), zh(text, reader)):
            assert f"workload {theirs.pk}" not in read and f"作业 {theirs.pk}" not in read, read
            assert "GPUs)" not in read and "GPU）" not in read, read
    assert "a workload of another tenant, which waits" in reader.read(moved)
    assert "left to a workload of another tenant, which gains more" in reader.read(left)
    assert "（其他租户的）" in zh(left, reader) and english_left(zh(left, reader)) <= {"H20"}


@pytest.mark.django_db
def test_the_api_says_a_reason_in_the_language_asked_for(client, cluster, acme, bob):
    job = make_job(make_queue(acme, "llm", h800=32), "wide", gpus=4096)
    reason = "needs 512 whole H800 nodes; the cluster has 4 free"
    type(job).objects.filter(pk=job.pk).update(pending_reason=reason)
    client.force_login(bob)
    url = f"/api/v1/workloads/{job.pk}/"
    assert client.get(url).json()["pending_reason"] == reason
    chinese = client.get(url, HTTP_ACCEPT_LANGUAGE="zh-Hans").json()["pending_reason"]
    assert chinese == "需要 512 个完整的 H800 节点；集群只有 4 个空闲"
