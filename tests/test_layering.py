"""The layout's rules, read from the sources: pattern names stay inside traffic/patterns, no
module grows past 400 lines, and the top level of the package is the front door and shared
vocabulary only.

Outside traffic/patterns, code asks a pattern's spec (`role`, `point_facts`) instead of its
name, so a new pattern needs no edit in the runner, the report or the planner.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from commbench.traffic.patterns import PATTERNS

from conftest import REPO

PACKAGE = REPO / "commbench"
PATTERN_DIR = PACKAGE / "traffic" / "patterns"
# Pattern names that are not also axis names: no code outside patterns has a reason to spell them.
AXES = {"tp", "cp", "ep", "dp", "pp", "edp"}
PATTERN_ONLY = set(PATTERNS) - AXES
# Variables and attributes that hold a pattern's name where they are compared.
PATTERN_HOLDERS = {"pattern", "pat", "pattern_name"}
LOOKUPS = {"build", "get", "make_options"}
MAX_LINES = 400
TOP_LEVEL = {
    "__init__.py",
    "__main__.py",
    "cli.py",
    "errors.py",
    "sizes.py",
    "dtypes.py",
    "tables.py",
    "limits.py",  # the one parser and bounds of user numbers
    "textfile.py",  # the one reader of user text files
    "keys.py",  # a key given twice is refused (YAML, JSON, KEY=VALUE flags)
    "nccl_names.py",  # NCCL's algorithm/protocol names: importers, traces and fits share them
}


def sources(exclude: Path | None = None) -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if exclude is None or exclude not in p.parents)


def _holder(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _strings(node: ast.AST) -> list[str]:
    """String constants of `node`, or of the tuple/list/set it is."""
    items = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
    return [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]


def pattern_names_in(path: Path) -> list[str]:
    """Places in `path` that decide by a pattern's name: a pattern holder compared with a
    pattern name, a pattern-only name in a comparison or as a key (`t["zero"]`,
    `t.get("zero")`), or a registry lookup by a literal name (`patterns.build("pp", ...)`)."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        where = f"{path.relative_to(REPO)}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            names = [v for side in sides for v in _strings(side) if v in PATTERNS]
            holders = [h for side in sides if (h := _holder(side)) in PATTERN_HOLDERS]
            only = [v for v in names if v in PATTERN_ONLY]
            if names and (holders or only):
                found.append(f"{where}: compares with {(only or names)[0]!r}")
        elif (
            isinstance(node, ast.Subscript)
            and set(_strings(node.slice)) & PATTERN_ONLY
            and _holder(node.value) != "Literal"  # a type (a record's kind), not a lookup
        ):
            found.append(f"{where}: key {_strings(node.slice)[0]!r}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            first = _strings(node.args[0])
            owner = _holder(node.func.value)
            if node.func.attr == "get" and set(first) & PATTERN_ONLY:
                found.append(f"{where}: .get({first[0]!r})")
            elif owner == "patterns" and node.func.attr in LOOKUPS and set(first) & set(PATTERNS):
                found.append(f"{where}: patterns.{node.func.attr}({first[0]!r})")
    return found


def test_pattern_names_stay_inside_traffic_patterns():
    found = [hit for path in sources(exclude=PATTERN_DIR) for hit in pattern_names_in(path)]
    assert not found, "ask the PatternSpec (role, point_facts) instead:\n" + "\n".join(found)


def test_the_scan_finds_a_pattern_name(tmp_path):
    """The scan above can fail: each kind of naming it looks for is caught."""
    probe = PACKAGE / "_probe_layering.py"
    probe.write_text(
        "def f(r, t, patterns):\n"
        "    if r.pattern == 'pp':\n"
        "        return patterns.build('ep', None, None)\n"
        "    if r.name in ('dp', 'zero'):\n"
        "        return t['zero'] + t.get('collectives')\n"
    )
    try:
        hits = pattern_names_in(probe)
    finally:
        probe.unlink()
    assert len(hits) == 5, hits


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_over_400_lines(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(REPO)} has {lines} lines: split it"


def test_top_level_is_the_front_door_and_shared_vocabulary():
    modules = {p.name for p in PACKAGE.glob("*.py")}
    assert modules <= TOP_LEVEL, sorted(modules - TOP_LEVEL)
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    layout = (REPO / "docs" / "layout.md").read_text()
    missing = sorted(p for p in packages if f"{p}/" not in layout)
    assert not missing, f"docs/layout.md does not list {missing}"
