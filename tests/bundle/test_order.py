"""Bundles run their kernels in the order the order search chose (toolchain.graph.order):
the interleaved-branches demo compiles to a smaller arena, still matches onnxruntime, says
so in metadata.json and in ``kiln compile``'s summary, and compiles deterministically."""

from __future__ import annotations

import json
import re

import numpy as np
import onnx

from tests.bundle.helpers import assert_matches, compile_run, run_ort
from toolchain import cli
from toolchain.bundle import compile_model
from toolchain.zoo import DEMOS

SPEC = DEMOS["interleaved_branches"]


def test_interleaved_branches_bundle_runs_in_the_searched_order(tmp_path):
    model = SPEC.build()
    inputs = SPEC.inputs(model)
    path, got = compile_run(model, tmp_path, inputs, name="branches")
    assert_matches(got, run_ort(model, inputs))
    meta = json.loads((path / "metadata.json").read_text())
    plan = meta["memory_plan"]
    assert plan["order_search"]["changed"] and plan["order_search"]["exact"]
    assert meta["arena_bytes"] == plan["arena_bytes"] < plan["file_order"]["arena_bytes"]
    assert plan["lower_bound"] < plan["file_order"]["lower_bound"]
    # the run function calls the kernels in the plan's steps
    assert [k["index"] for k in meta["kernels"]] == list(range(len(plan["steps"])))
    steps = re.findall(r"/\* step (\d+):", (path / "src" / "branches.c").read_text())
    assert [int(s) for s in steps] == list(range(len(plan["steps"])))


def test_the_searched_order_compiles_deterministically(tmp_path):
    model = SPEC.build()
    a = compile_model(model, "c-generic", tmp_path / "a", name="branches")
    b = compile_model(model, "c-generic", tmp_path / "b", name="branches")
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    for f in files:
        assert (a / f).read_bytes() == (b / f).read_bytes(), f


def test_kiln_compile_summary_shows_the_file_order_arena(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(cli.COMMANDS, "compile", "compile_cmd")
    onnx.save(SPEC.build(), tmp_path / "branches.onnx")
    code = cli.main(["compile", str(tmp_path / "branches.onnx"), "-o", str(tmp_path / "out"),
                     "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0, out
    meta = json.loads((tmp_path / "out" / "metadata.json").read_text())
    file_arena = meta["memory_plan"]["file_order"]["arena_bytes"]
    assert f"node order searched: the file order needs {file_arena:,} B" in out


def _exp_before_its_sibling() -> onnx.ModelProto:
    """``a = conv(x)`` read by ``exp`` (then a conv) and by a second conv, the ``exp``
    written first: ``a`` is still read after it, so ``exp`` cannot write over ``a``; the
    other order runs the sibling conv first and ``exp`` in place."""
    from toolchain.zoo.builder import Builder, conv

    b = Builder("exp_first", seed=4)
    x = b.input("x", np.float32, [1, 4, 16, 16])
    a = conv(b, x, 4, 16, 3, name="a")
    p = conv(b, b.op("Exp", [a]), 16, 2, 1, pads=[0, 0, 0, 0], name="p")
    q = conv(b, a, 16, 2, 1, pads=[0, 0, 0, 0], name="q")
    b.output(b.op("Concat", [p, q], axis=1), "y", np.float32, [1, 4, 16, 16])
    return b.build(17)


def test_a_kernel_the_new_order_runs_in_place_is_rendered_for_it(tmp_path):
    model = _exp_before_its_sibling()
    inputs = {"x": np.random.default_rng(0).standard_normal((1, 4, 16, 16), np.float32)}
    path, got = compile_run(model, tmp_path, inputs, name="exp_first")
    assert_matches(got, run_ort(model, inputs))
    meta = json.loads((path / "metadata.json").read_text())
    plan = meta["memory_plan"]
    assert plan["order_search"]["changed"]
    assert meta["arena_bytes"] < plan["file_order"]["arena_bytes"]
    exp = next(k for k in meta["kernels"] if k["ops"] == ["Exp"])
    assert exp["in_place"]  # not in the file's order: its input was still read after it
    code = (path / "src" / "kernels.c").read_text()
    signature = next(line for line in code.splitlines()
                     if line.startswith("int32_t") and exp["name"] + "(" in line)
    assert "restrict" not in signature, signature
