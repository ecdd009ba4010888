"""The structure is checked, not hoped for: import-linter's contracts (pyproject.toml),
no import cycle between folders (imports inside functions count too), no protocol
server holding the kernel, and ruff's rules."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "runtime"
BIN = Path(sys.executable).parent


def _tool(name: str) -> Path:
    path = BIN / name
    if not path.exists():
        pytest.fail(f"{name} is not installed in this venv: install .ci/requirements.lock")
    return path


@pytest.mark.skipif(sys.version_info < (3, 11), reason="import-linter's grimp has no wheel for 3.10")
def test_import_contracts_are_kept():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([str(_tool("lint-imports"))], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert " 0 broken" in done.stdout


def _imports(path: Path) -> set[str]:
    """Every runtime module this file imports, at any depth of the file (lazy imports too)."""
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name == "runtime" or name.startswith("runtime.")}


def _folder_of(module: str) -> str:
    """The folder (package) a module lives in: ``runtime.mcp.client.session`` ->
    ``runtime.mcp.client``; a package names itself. The modules at the top of
    ``runtime/`` (errors, log, ports, __main__, ...) are each a room of their own: the
    entry point and the leaves share that folder but not a layer."""
    path = ROOT.joinpath(*module.split("."))
    if path.is_dir() or module.count(".") == 1:
        return module
    return module.rpartition(".")[0]


def test_no_import_cycle_between_folders():
    graph: dict[str, set[str]] = {}
    for path in RUNTIME.rglob("*.py"):
        source = _folder_of(".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"))
        for target in _imports(path):
            while target and not ROOT.joinpath(*target.split(".")).with_suffix(".py").exists() \
                    and not ROOT.joinpath(*target.split(".")).is_dir():
                target = target.rpartition(".")[0]  # `from runtime.x import name`: the module is runtime.x
            folder = _folder_of(target) if target else ""
            if folder and folder != source:
                graph.setdefault(source, set()).add(folder)
    # a folder may import its sub-folders' modules and the reverse only if no cycle results
    cycles = _cycles(graph)
    assert not cycles, "import cycles between folders: " + "; ".join(" -> ".join(c) for c in cycles)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one folder (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in list(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_nothing_holds_the_kernel_as_any():
    """Servers get ports; the composition root knows the Kernel's type."""
    offenders = [f"{path.relative_to(ROOT)}:{n}" for path in RUNTIME.rglob("*.py")
                 for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if "kernel: Any" in line or "self.kernel = kernel" in line]
    assert not offenders, offenders


def test_ruff_is_clean():
    done = subprocess.run([str(_tool("ruff")), "check", "--no-cache", "."], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr
