"""`scheduler/` stays pure Python: the engine, simulator and agent never import the portal stack."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SCHEDULER = Path(__file__).resolve().parents[2] / "scheduler"
FORBIDDEN = {"django", "rest_framework", "channels", "celery"}


def imported_packages(source: str) -> set[str]:
    """Top-level names of every absolute import in `source`."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize(
    "path",
    sorted(SCHEDULER.rglob("*.py")),
    ids=lambda path: str(path.relative_to(SCHEDULER.parent)),
)
def test_scheduler_module_imports_no_portal_framework(path: Path) -> None:
    assert not imported_packages(path.read_text()) & FORBIDDEN


@pytest.mark.parametrize(
    ("source", "caught"),
    [
        pytest.param("import django.db", True, id="import django.db"),
        pytest.param("from rest_framework import serializers", True, id="from rest_framework"),
        pytest.param("def f():\n    import celery", True, id="an import inside a function"),
        pytest.param("from channels.layers import get_channel_layer", True, id="from channels"),
        pytest.param(
            "import djangoish\nfrom . import channels",
            False,
            id="look-alike and relative names are fine",
        ),
    ],
)
def test_the_check_sees_every_kind_of_import(source: str, caught: bool) -> None:
    assert bool(imported_packages(source) & FORBIDDEN) is caught
