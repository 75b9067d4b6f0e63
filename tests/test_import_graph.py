"""The house's shape, held against its code: no import cycle anywhere in `portal/` or
`scheduler/` (imports inside functions count), and every arrow between the portal's apps goes
down the layers (docs/adr/0002-layers.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("portal", "scheduler")
# The portal's apps from the bottom up. An app imports only apps below it; the doors at the
# top (one rank) import none of each other.
LAYERS = {
    "tenancy": 0,
    "core": 1,
    "cluster": 2,
    "quotas": 3,
    "workloads": 4,
    "services": 5,
    "agents": 6,
    "dashboard": 6,
    "whatif": 6,
    "demo": 6,
    "notifications": 6,
    "metrics": 6,
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {
        module_name(path): path
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts
    }


def imports_of(source: str, known: set[str]) -> set[str]:
    """The project modules `source` imports, anywhere in it: `from a import b` is an arrow to
    the module `a.b` when there is one, else to `a`."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in known else node.module)
    return found & known


def graph(sources: dict[str, str]) -> dict[str, set[str]]:
    known = set(sources)
    return {name: imports_of(source, known) - {name} for name, source in sources.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def app_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "portal" and len(parts) > 2 and parts[1] in LAYERS else None


def upward(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Arrows from an app to one at its own rank or above (other than itself)."""
    wrong = []
    for source, targets in edges.items():
        for target in targets:
            a, b = app_of(source), app_of(target)
            if a and b and a != b and LAYERS[a] <= LAYERS[b]:
                wrong.append((source, target))
    return sorted(wrong)


@pytest.fixture(scope="module")
def project() -> dict[str, set[str]]:
    return graph({name: path.read_text() for name, path in modules().items()})


def test_no_module_of_portal_or_scheduler_is_part_of_an_import_cycle(project):
    assert cycles(project) == []


def test_every_arrow_between_the_portal_apps_goes_down(project):
    assert upward(project) == []


def test_every_portal_app_has_a_layer():
    apps = {path.parent.name for path in (ROOT / "portal").glob("*/apps.py")}
    assert apps == set(LAYERS)


@pytest.mark.parametrize(
    ("sources", "found"),
    [
        pytest.param(
            {"a": "import b", "b": "def f():\n    from a import x"},
            [["a", "b"]],
            id="a circle closed by an import inside a function",
        ),
        pytest.param(
            {"a": "from b import c", "b": "", "b.c": "import a"},
            [["a", "b.c"]],
            id="from a package import its submodule",
        ),
        pytest.param({"a": "import b", "b": "import c", "c": ""}, [], id="a line, no circle"),
    ],
)
def test_the_cycle_finder_sees_cycles(sources, found):
    assert cycles(graph(sources)) == found


def test_an_arrow_up_the_layers_is_seen():
    edges = graph(
        {
            "portal.cluster.faults": "from portal.workloads import recovery",
            "portal.workloads.recovery": "from portal.cluster.models import Node",
            "portal.workloads": "",
            "portal.cluster.models": "",
            "portal.agents.x": "from portal.dashboard.views import y",
            "portal.dashboard.views": "",
        }
    )
    assert upward(edges) == [
        ("portal.agents.x", "portal.dashboard.views"),
        ("portal.cluster.faults", "portal.workloads.recovery"),
    ]
