"""The strategy table and capability dispatch: schedules are chosen by what a target
declares (its keys, intrinsics, vector width, layout), never by its name."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from toolchain.bundle import build_spec, render_files
from toolchain.schedules.registry import lookup, register_schedule, target_keys, unregister_schedule
from toolchain.schedules.strategy import STRATEGIES
from toolchain.target import TARGETS_DIR, load_target
from toolchain.zoo import ZOO

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = {p.stem for p in TARGETS_DIR.glob("*.yaml")}


def _variant(tmp_path: Path, base: str, name: str) -> Path:
    p = tmp_path / f"{name}.yaml"
    p.write_text(f"name: {name}\nkind: c\nextends: {base}\n")
    return p


def _kernels(model, target, **kw) -> dict[str, str]:
    files = render_files(build_spec(model, target, name="m", progress=False, **kw))
    return {f: c for f, c in files.items() if f.startswith("src/")}


@pytest.mark.parametrize("base", ["x86_64-avx512", "cortex-m4"])
def test_a_renamed_variant_gets_exactly_the_same_kernels(tmp_path: Path, base: str) -> None:
    from toolchain.quantize.ptq import quantize_model

    spec = ZOO["ds_cnn"]
    model = spec.build()
    rng = np.random.default_rng(0)
    cal = {v.name: rng.standard_normal((4, *(d.dim_value for d in
                                            v.type.tensor_type.shape.dim))).astype(np.float32)
           for v in model.graph.input}
    qmodel = quantize_model(model, cal)[0]
    variant = load_target(_variant(tmp_path, base, "my-board"))
    assert variant.keys == load_target(base).keys
    for m in (model, qmodel):
        assert _kernels(m, variant) == _kernels(m, base)


def test_lookup_walks_the_keys_most_specific_first() -> None:
    m7 = load_target("cortex-m7")
    assert target_keys(m7) == ["cortex_m", "arm", "cpu", "c"]
    assert lookup("QConv", m7) is STRATEGIES[("QConv", "cortex_m")]
    assert lookup("QConv", load_target("x86_64-avx2")) is STRATEGIES[("QConv", "cpu")]
    assert lookup("NoSuchOp", load_target("c-generic")) is STRATEGIES[("*", "cpu")]
    cuda = load_target("cuda-sm80")  # keys [cuda, gpu]
    assert lookup("Conv", cuda) is STRATEGIES[("Conv", "gpu")]  # the tiled implicit GEMM
    assert lookup("Relu", cuda) is None  # only inside a fused group on a GPU


def test_an_added_schedule_comes_before_the_table_at_its_key() -> None:
    @register_schedule("Conv", "x86")
    def mine(node, target):  # pragma: no cover - never called
        return None

    try:
        assert lookup("Conv", load_target("x86_64-avx512")) is mine
        assert lookup("Conv", load_target("c-generic")) is STRATEGIES[("Conv", "cpu")]
    finally:
        unregister_schedule("Conv", "x86")


def _string_constants(path: Path) -> list[tuple[int, str]]:
    """String constants of a module that are not docstrings."""
    tree = ast.parse(path.read_text())
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docs.add(id(body[0].value))
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_no_target_name_decides_a_schedule_or_a_layout() -> None:
    files = sorted((ROOT / "toolchain" / "schedules").rglob("*.py"))
    files.append(ROOT / "toolchain" / "graph" / "passes" / "layout.py")
    found = [f"{p.relative_to(ROOT)}:{line}: {text!r}" for p in files
             for line, text in _string_constants(p)
             if any(name in text for name in SHIPPED if name != "c-generic") or
             text == "c-generic"]
    assert not found, "target names in schedule/layout code:\n" + "\n".join(found)
