"""The operator console names its models as people write them, in both languages."""

import re

from django.contrib import admin
from django.utils import translation


def _plurals(language: str) -> dict[str, str]:
    with translation.override(language):
        return {m._meta.model_name: str(m._meta.verbose_name_plural) for m in admin.site._registry}


def test_no_model_is_named_as_python_spells_it() -> None:
    for name, plural in _plurals("en").items():
        assert not re.search(r"[^aeiou]ys$", plural), f"{name}: {plural}"  # "recoverys"
        assert not re.search(r"\b(gpu|api)\b", plural), f"{name}: {plural}"  # "gpu models"


def test_the_models_named_in_words_are_named_in_chinese_too() -> None:
    english, chinese = _plurals("en"), _plurals("zh-hans")
    for name in ("apitoken", "gpumodel", "gpurate", "recovery", "whatifrun"):
        assert chinese[name] != english[name], name
