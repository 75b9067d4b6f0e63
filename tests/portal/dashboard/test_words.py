"""Fault titles and meanings for the pages: every kind of the catalogue has its translatable
copy, word for word the catalogue's in English, and Chinese where the reader asks for it."""

from django.utils import translation

from portal.dashboard.templatetags.words import MEANINGS, TITLES, fault_title, word
from scheduler import faults


def test_every_fault_kind_has_its_title_and_meaning_word_for_word():
    assert set(TITLES) == set(MEANINGS) == set(faults.CATALOGUE)
    for code, kind in faults.CATALOGUE.items():
        assert (str(TITLES[code]), str(MEANINGS[code])) == (kind.title, kind.meaning)


def test_titles_and_states_follow_the_language():
    with translation.override("zh-hans"):
        assert str(fault_title("xid-79")) == "GPU 掉卡（脱离总线）"
        assert str(fault_title("xid-9999")) == "XID 9999"  # not in the catalogue: its generic kind
        assert str(word("running")) == "运行中"
    assert str(word("running")) == "running"
