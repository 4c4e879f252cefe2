"""Every docstring example in the compiler's packages runs (the per-package doctest tests
cover lowering, codegen, frontend and the accelerator; this one covers the rest)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import toolchain

PACKAGES = ["schedules", "topi", "graph", "bundle", "boards", "quantize", "intrinsics", "zoo",
            "autotune"]


def _modules() -> list[str]:
    names = []
    for pkg in PACKAGES:
        mod = importlib.import_module(f"toolchain.{pkg}")
        names.append(mod.__name__)
        names += [m.name for m in pkgutil.walk_packages(mod.__path__, f"{mod.__name__}.")
                  if not m.name.endswith("__main__")]
    return sorted(names)


def test_the_packages_have_examples() -> None:
    assert len(_modules()) > 40 and toolchain.__name__ == "toolchain"


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples_run(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name),
                             optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    assert result.failed == 0, f"{name}: {result.failed} docstring example(s) failed"
