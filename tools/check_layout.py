"""The layout rules that import-linter cannot express, checked on the real import graph (grimp).

1. No import cycle between modules, except an app's ``services`` <-> ``tasks`` pair (Django's usual
   "the service enqueues the task, the task calls the service").
2. No app folder holds more than ``MAX_SHARE`` of the code (non-test, non-migration Python lines).
3. No module is longer than ``MAX_LINES`` lines, without exception: a longer one does several jobs.

Run by ``make check`` (``python tools/check_layout.py``); exits 1 and lists each violation.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Every first-party package: the apps at the root and the packages inside platform/.
PACKAGES = ("switchboard", "sbcommon", "encoders", "jobs", "clients", "audit", "experts", "knowledge", "labeling", "routing", "serving", "console", "evaluation", "operations")
MAX_SHARE = 0.25
MAX_LINES = 600


@dataclass(frozen=True)
class Violation:
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.detail}"


def package_dir(package: str) -> Path:
    """Where a first-party package lives: platform/<name> or <name> at the root."""
    inside = ROOT / "platform" / package
    return inside if inside.is_dir() else ROOT / package


def source_files(package: str) -> list[Path]:
    """The package's Python files, without migrations."""
    return sorted(p for p in package_dir(package).rglob("*.py") if "migrations" not in p.parts and "__pycache__" not in p.parts)


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


# --- cycles ------------------------------------------------------------------------------------------

def strongly_connected(graph: Mapping[str, Iterable[str]]) -> list[set[str]]:
    """The strongly connected components of more than one node (scipy's ``connected_components``)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    nodes = sorted({*graph, *(child for children in graph.values() for child in children)})
    index = {node: i for i, node in enumerate(nodes)}
    edges = [(index[node], index[child]) for node, children in graph.items() for child in children]
    rows, cols = zip(*edges, strict=True) if edges else ((), ())
    matrix = coo_matrix(([1] * len(edges), (rows, cols)), shape=(len(nodes), len(nodes)))
    _, labels = connected_components(matrix, directed=True, connection="strong")
    components: dict[int, set[str]] = {}
    for node, label in zip(nodes, labels, strict=True):
        components.setdefault(int(label), set()).add(node)
    return [c for c in components.values() if len(c) > 1]


def allowed_cycle(component: set[str]) -> bool:
    """An app's ``services`` and ``tasks`` modules importing each other, and nothing else."""
    if len(component) != 2:
        return False
    first, second = sorted(component)
    app_a, _, leaf_a = first.rpartition(".")
    app_b, _, leaf_b = second.rpartition(".")
    return app_a == app_b and {leaf_a, leaf_b} == {"services", "tasks"}


def import_graph() -> dict[str, set[str]]:
    """Module -> first-party modules it imports (anywhere in the module, function bodies included)."""
    import grimp

    graph = grimp.build_graph(*PACKAGES)
    return {m: {i for i in graph.find_modules_directly_imported_by(m) if i.split(".")[0] in PACKAGES} for m in graph.modules}


def check_cycles(graph: Mapping[str, Iterable[str]]) -> list[Violation]:
    return [
        Violation("import cycle", " <-> ".join(sorted(c)))
        for c in strongly_connected(graph) if not allowed_cycle(c)
    ]


# --- sizes -------------------------------------------------------------------------------------------

def check_shares(lines_by_package: Mapping[str, int], max_share: float = MAX_SHARE) -> list[Violation]:
    total = sum(lines_by_package.values()) or 1
    return [
        Violation("folder too large", f"{name} holds {n / total:.0%} of the code ({n} of {total} lines; at most {max_share:.0%})")
        for name, n in sorted(lines_by_package.items()) if n / total > max_share
    ]


def check_long_modules(files: Iterable[Path], max_lines: int = MAX_LINES) -> list[Violation]:
    return [
        Violation("long module", f"{os.path.relpath(p, ROOT)} has {n} lines (over {max_lines}): split it along its jobs")
        for p in files if (n := line_count(p)) > max_lines
    ]


def main() -> int:
    files = {pkg: source_files(pkg) for pkg in PACKAGES}
    lines = {pkg: sum(line_count(p) for p in fs) for pkg, fs in files.items()}
    violations = [
        *check_cycles(import_graph()),
        *check_shares(lines),
        *check_long_modules(p for fs in files.values() for p in fs),
    ]
    total = sum(lines.values())
    print("layout: " + ", ".join(f"{pkg} {n / total:.0%}" for pkg, n in sorted(lines.items(), key=lambda kv: -kv[1])))
    for v in violations:
        print(f"layout: {v}")
    if violations:
        print(f"layout: {len(violations)} violation(s)")
        return 1
    print("layout: no import cycle outside services<->tasks, no folder over 25%, no module over 600 lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
