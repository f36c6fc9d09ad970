""".env.example lists exactly the environment variables the code reads, and there are at most 60 of them.

What counts as a read: a call of an ``sbcommon.env`` helper (``envstr``, ``envint``, ...), ``os.environ.get``,
``os.environ.setdefault``, ``os.environ[...]``, ``os.getenv`` and ``... in os.environ``, with the name
written as a string or as a module-level string constant of the same file, in every Python file of the
repository outside ``tests/``, ``var/`` and hidden folders (the settings package, management commands,
``evaluation/``, ``tools/``). A variable named through another module's constant
(``faults.ENV_VAR`` in ``evaluation/bench_soak.py``) is found where that constant is read.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HELPERS = {"envstr", "envint", "envfloat", "envbool", "envlist", "envjson"}
SKIPPED = {"tests", "var", "__pycache__", "node_modules"}
MAX_VARIABLES = 60
# Read by the libraries, the interpreter or the system, not decided in .env.example.
LIBRARY = {
    "DJANGO_SETTINGS_MODULE": "Django's settings module: manage.py, asgi, wsgi and the Celery app set it",
    "HF_HUB_OFFLINE": "Hugging Face's hub client: the encoder sets it so that nothing is downloaded",
    "TRANSFORMERS_OFFLINE": "transformers: the encoder sets it so that nothing is downloaded",
    "TMPDIR": "the system's temporary folder (tools/vllm_check.py puts its data folder there)",
}
# A variable's line, "NAME=default", or commented when best left unset, "# NAME=default" (a value without
# spaces: "# GENERATOR=transformers answers ..." is a sentence about the variable, not its line).
LISTED = re.compile(r"^([A-Z][A-Z0-9_]*)=|^#\s?([A-Z][A-Z0-9_]*)=\S*\s*$", re.MULTILINE)


def _python_files() -> list[Path]:
    found = []
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = [d for d in subfolders if not d.startswith(".") and d not in SKIPPED]
        found += [Path(folder) / f for f in files if f.endswith(".py")]
    return found


def _is_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name) and node.value.id == "os"


def _names_read(tree: ast.Module) -> set[str]:
    constants = {target.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
                 and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
                 for target in node.targets if isinstance(target, ast.Name)}

    def name(arg: ast.AST) -> str | None:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return arg.value
        return constants.get(arg.id) if isinstance(arg, ast.Name) else None

    names = set()
    for node in ast.walk(tree):
        read = None
        if isinstance(node, ast.Call) and node.args:
            f = node.func
            if (isinstance(f, ast.Name) and f.id in HELPERS) or (isinstance(f, ast.Attribute) and (
                    (f.attr in ("get", "setdefault") and _is_environ(f.value))
                    or (f.attr == "getenv" and isinstance(f.value, ast.Name) and f.value.id == "os"))):
                read = name(node.args[0])
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_environ(node.value):
            read = name(node.slice)
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) and any(
                _is_environ(c) for c in node.comparators):
            read = name(node.left)
        if read:
            names.add(read)
    return names


def variables_read() -> set[str]:
    """Every environment variable our code reads, less those the libraries read (``LIBRARY``)."""
    names: set[str] = set()
    for path in _python_files():
        names |= _names_read(ast.parse(path.read_text(encoding="utf-8"), str(path)))
    return names - set(LIBRARY)


def variables_listed() -> list[str]:
    """The variables of .env.example: its ``NAME=`` lines and its commented ``# NAME=`` ones."""
    return [plain or commented for plain, commented in LISTED.findall((ROOT / ".env.example").read_text(encoding="utf-8"))]


def test_env_example_lists_exactly_the_variables_the_code_reads():
    read, listed = variables_read(), variables_listed()
    missing, stale = sorted(read - set(listed)), sorted(set(listed) - read)
    assert missing == [], f"read by the code but missing from .env.example: {', '.join(missing)}"
    assert stale == [], f"listed in .env.example but read by no code: {', '.join(stale)}"
    assert sorted({n for n in listed if listed.count(n) > 1}) == [], "listed more than once"


def test_there_are_at_most_60_of_them():
    read = sorted(variables_read())
    assert len(read) <= MAX_VARIABLES, f"{len(read)} variables: {', '.join(read)}"


def test_the_scan_finds_each_way_of_reading_a_variable():
    tree = ast.parse(
        "import os\nfrom sbcommon.env import envint\nNAME = 'BY_CONSTANT'\n"
        "a = envint('BY_HELPER', 1)\nb = os.environ.get('BY_GET')\nc = os.environ['BY_INDEX']\nd = os.getenv('BY_GETENV')\n"
        "e = 'BY_IN' in os.environ\nos.environ.setdefault('BY_SETDEFAULT', '1')\nf = os.environ.get(NAME)\nos.environ['WRITTEN'] = '1'\n"
    )
    assert _names_read(tree) == {"BY_HELPER", "BY_GET", "BY_INDEX", "BY_GETENV", "BY_IN", "BY_SETDEFAULT", "BY_CONSTANT"}


def test_a_variables_line_is_told_from_a_sentence_about_it():
    text = "# A comment.\nPLAIN=1\nEMPTY=\n# COMMENTED=/tmp/x\n# UNSET=\n# PROSE=transformers answers in-process\n# Scale out: URL=x\n"
    assert [plain or commented for plain, commented in LISTED.findall(text)] == ["PLAIN", "EMPTY", "COMMENTED", "UNSET"]
