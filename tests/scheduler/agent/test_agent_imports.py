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


STDLIB_ONLY = [
    "protocol.py",
    "backends.py",
    "simulated.py",
    "processes.py",
    "host.py",
    "enrolment.py",
    "contract.py",
]


@pytest.mark.parametrize("name", STDLIB_ONLY)
def test_all_but_the_client_and_nvml_need_only_the_standard_library(name: str) -> None:
    outside = top_level_imports(PACKAGE / name) - set(sys.stdlib_module_names) - {"scheduler"}
    assert not outside


def test_the_contract_helper_stands_alone_so_a_training_script_can_copy_it() -> None:
    assert top_level_imports(PACKAGE / "contract.py") <= set(sys.stdlib_module_names)


def test_nvml_is_imported_only_when_the_nvml_backend_starts() -> None:
    assert "pynvml" not in top_level_imports(PACKAGE / "nvml.py")
