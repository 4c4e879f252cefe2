"""The contributor's conventions (shared/STYLE.md, docs/architecture.md) that a script can
check cheaply, over the whole repository, so a violation does not come back unnoticed."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("toolchain", "tests", "benchmarks", "examples")


# a file with no such line imports no private name (an import spread over lines has one
# of its names, or its module, starting with "_" after "toolchain")
_MAYBE = re.compile(r"^\s*from toolchain[\w.]*\._|^\s*from toolchain\S* import .*\b_|"
                    r"^\s*_\w+,?\s*$", re.M)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _package(path: Path) -> str:
    """The dotted package a repository file lives in (``toolchain.graph.passes``)."""
    return ".".join(path.relative_to(ROOT).parent.parts)


def private_imports(path: Path, text: str) -> list[str]:
    """``from toolchain.x import _y`` lines of ``text`` (a private name taken from another
    module), and imports of a private module from outside its package; a package's own
    private modules (``graph/passes/_util.py``) are its business.

    >>> private_imports(ROOT / "tests" / "t.py", "from toolchain.bundle.render import _helpers")
    ['tests/t.py:1: from toolchain.bundle.render import _helpers']
    >>> private_imports(ROOT / "toolchain" / "a" / "b.py", "from toolchain.a._util import f")
    []
    """
    found = []
    where = _package(path)
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.ImportFrom) or node.level:
            continue
        module = node.module or ""
        if not module.startswith("toolchain"):
            continue
        names = [a.name for a in node.names]
        parts = module.split(".")
        private_parts = [i for i, p in enumerate(parts) if _private(p)]
        if module == where:  # `from toolchain.pkg import _mod` inside pkg: its own module
            bad = False
        else:
            bad = any(_private(n) for n in names) or bool(
                private_parts and ".".join(parts[:private_parts[0]]) != where)
        if bad:
            rel = path.relative_to(ROOT)
            found.append(f"{rel}:{node.lineno}: from {module} import {', '.join(names)}")
    return found


def test_no_private_name_is_imported_across_modules() -> None:
    texts = ((p, p.read_text()) for top in SOURCES for p in sorted((ROOT / top).rglob("*.py")))
    found = [hit for p, text in texts if _MAYBE.search(text)  # (parse only those)
             for hit in private_imports(p, text)]
    assert not found, "private names imported from another module:\n" + "\n".join(found)


def test_the_private_import_check_runs_its_examples() -> None:
    import doctest
    import sys

    result = doctest.testmod(sys.modules[__name__])
    assert result.failed == 0 and result.attempted >= 5


def missing_hints(path: Path, text: str) -> list[str]:
    """The public functions and public classes' public methods of a module ``text`` whose
    parameters or return lack a type hint (``self``/``cls`` and ``__init__``'s return
    aside).

    >>> missing_hints(ROOT / "toolchain" / "m.py", "def f(x: int, **kw) -> int: ...")
    ['toolchain/m.py:1: f (**kw)']
    """
    found = []

    def check(fn: ast.FunctionDef | ast.AsyncFunctionDef, owner: str = "") -> None:
        if _private(fn.name) or (fn.name.startswith("__") and fn.name != "__init__"):
            return
        a = fn.args
        params = a.posonlyargs + a.args + a.kwonlyargs
        if owner and params and params[0].arg in ("self", "cls"):
            params = params[1:]
        bad = [p.arg for p in params if p.annotation is None]
        bad += [f"{star}{v.arg}" for star, v in (("*", a.vararg), ("**", a.kwarg))
                if v is not None and v.annotation is None]
        if fn.returns is None and fn.name != "__init__":
            bad.append("return")
        if bad:
            found.append(f"{path.relative_to(ROOT)}:{fn.lineno}: {owner}{fn.name} "
                         f"({', '.join(bad)})")

    for node in ast.parse(text).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            check(node)
        elif isinstance(node, ast.ClassDef) and not _private(node.name):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    check(item, node.name + ".")
    return found


def test_public_functions_have_type_hints() -> None:
    found = [hit for p in sorted((ROOT / "toolchain").rglob("*.py"))
             if not any(_private(part) for part in p.relative_to(ROOT).with_suffix("").parts)
             for hit in missing_hints(p, p.read_text())]
    assert not found, "public functions without type hints:\n" + "\n".join(found)


def _passes() -> list:
    from toolchain.graph.passes.pipeline import PASSES
    from toolchain.tir.transform.pipeline import PHASES, TARGET_PASSES

    seen: list = []
    for fn in [*PASSES.values(), *(f for fs in PHASES.values() for f in fs), *TARGET_PASSES]:
        if fn not in seen:
            seen.append(fn)
    return seen


def test_every_pass_shows_its_ir_before_and_after() -> None:
    """Each pass of the graph pipeline and of the lowering phases has, in its docstring or
    its module's, an example (a ``::`` block or a doctest) that says before and after."""
    import inspect

    def shows(doc: str | None) -> bool:
        text = (doc or "").lower()
        return ("::" in text or ">>>" in text) and "before" in text and "after" in text

    found = [f"{fn.__module__}.{fn.__name__}" for fn in _passes()
             if not (shows(fn.__doc__) or shows(inspect.getmodule(fn).__doc__))]
    assert len(_passes()) > 20 and not found, "passes without a before/after example: " + \
        ", ".join(found)


def import_time_registrations(path: Path, text: str) -> list[str]:
    """Module-level calls or decorators of a ``register*`` function in ``text``: a
    registration made by importing the module, where a registry should be a table that
    names its entries.

    >>> import_time_registrations(ROOT / "toolchain" / "m.py", "register_all()")
    ['toolchain/m.py:1: register_all()']
    >>> import_time_registrations(ROOT / "toolchain" / "m.py", "def f():\\n    register(x)")
    []
    """
    def name(call: ast.expr) -> str:
        fn = call.func if isinstance(call, ast.Call) else call
        return fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")

    found = []
    for node in ast.parse(text).body:
        calls = [node.value] if isinstance(node, ast.Expr) else []
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            calls = list(node.decorator_list)
        found += [f"{path.relative_to(ROOT)}:{c.lineno}: {name(c)}()" for c in calls
                  if isinstance(c, (ast.Call, ast.Name, ast.Attribute))
                  and name(c).startswith("register")]
    return found


def test_registries_are_tables_not_import_side_effects() -> None:
    found = [hit for p in sorted((ROOT / "toolchain").rglob("*.py"))
             if "register" in (text := p.read_text())
             for hit in import_time_registrations(p, text)]
    assert not found, "registrations made at import time:\n" + "\n".join(found)
