"""The agent package stays installable on a GPU node: no Django, and a standard-library protocol."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[3] / "scheduler" / "agent"
FORBIDDEN = {"django", "channels", "celery", "rest_framework"}


def top_level_imports(path: Path) -> set[str]:
    """First components of every module `path` imports."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("path", sorted(PACKAGE.glob("*.py")), ids=lambda p: p.name)
def test_no_agent_module_imports_the_web_stack(path: Path) -> None:
    assert not top_level_imports(path) & FORBIDDEN


@pytest.mark.parametrize("name", ["protocol.py", "backends.py"])
def test_the_protocol_and_backends_need_only_the_standard_library(name: str) -> None:
    outside = top_level_imports(PACKAGE / name) - set(sys.stdlib_module_names) - {"scheduler"}
    assert not outside
