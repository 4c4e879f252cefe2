"""What makes ``kiln compile`` fast, checked for correctness (no times asserted here):

* equal fused groups share one C function (``KernelCache``), still called with their own
  weights, and the results still match onnxruntime;
* the cache is keyed on structure: names do not split it, shapes and baked constants do;
* the vectorised weight writer gives the same text as the line-by-line one;
* compiling twice gives byte-identical bundles;
* a later compile compiles no jinja2 template again.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from tests.bundle.helpers import (
    assert_matches,
    clip_softmax_clip,
    compile_run,
    make_model,
    random_inputs,
    run_ort,
)
from toolchain import te
from toolchain.bundle.compiler import KernelCache
from toolchain.bundle.weights import escaped_lines, format_bytes
from toolchain.tir.structural import structural_key

F = np.float32


def _twin_convs(same_shape: bool = True, p: str = ""):
    """x -> conv+relu -> conv+relu -> y: two groups equal up to their weights (or not);
    ``p`` prefixes every tensor name."""
    rng = np.random.default_rng(1)
    c2 = 4 if same_shape else 6
    inits = {p + "w1": (rng.standard_normal((4, 4, 3, 3)) * 0.3).astype(F),
             p + "b1": rng.standard_normal(4).astype(F),
             p + "w2": (rng.standard_normal((c2, 4, 3, 3)) * 0.3).astype(F),
             p + "b2": rng.standard_normal(c2).astype(F)}
    nodes = [helper.make_node("Conv", [p + "x", p + "w1", p + "b1"], [p + "c1"],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Relu", [p + "c1"], [p + "r1"]),
             helper.make_node("Conv", [p + "r1", p + "w2", p + "b2"], [p + "c2"],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Relu", [p + "c2"], [p + "y"])]
    return make_model(nodes, {p + "x": (F, [1, 4, 8, 8])}, {p + "y": (F, [1, c2, 8, 8])},
                      inits)


def _functions(bundle) -> list[str]:
    text = (bundle / "src" / "kernels.c").read_text()
    return re.findall(r"^int32_t (\w+)\(", text, re.M)


@pytest.mark.parametrize("target", ["c-generic", "x86_64-avx512"])
def test_equal_groups_share_one_function_and_still_match(tmp_path, target) -> None:
    model = _twin_convs()
    inputs = random_inputs(model, seed=2)
    bundle, got = compile_run(model, tmp_path, inputs, target=target)
    assert_matches(got, run_ort(model, inputs))
    meta = json.loads((bundle / "metadata.json").read_text())
    convs = [k for k in meta["kernels"] if "Conv" in " ".join(k["ops"])
             or "LayoutConv" in k["ops"]]
    assert len(convs) == 2
    assert convs[0]["name"] == convs[1]["name"]  # the second calls the first's function
    assert convs[0]["inputs"] != convs[1]["inputs"]  # ... with its own weights
    funcs = _functions(bundle)
    assert len(funcs) == len(set(funcs))
    assert funcs.count(convs[0]["name"]) == 1
    assert len(funcs) == len({k["name"] for k in meta["kernels"] if not k["elided"]})
    calls = (bundle / "src" / f"{meta['options']['name']}.c").read_text()
    assert calls.count(f"if ({convs[0]['name']}(") == 2


def test_groups_of_different_shapes_keep_their_own_functions(tmp_path) -> None:
    model = _twin_convs(same_shape=False)
    inputs = random_inputs(model, seed=2)
    bundle, got = compile_run(model, tmp_path, inputs)
    assert_matches(got, run_ort(model, inputs))
    meta = json.loads((bundle / "metadata.json").read_text())
    names = [k["name"] for k in meta["kernels"] if not k["elided"]]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("hi2", [6.0, 4.0])
def test_baked_constants_are_never_merged(tmp_path, hi2) -> None:
    """Clip's bounds are baked into the C: two Clips on equal shapes share a function only
    when their bounds are equal too, and the results stay exact either way."""
    model, inputs = clip_softmax_clip(hi2)
    bundle, got = compile_run(model, tmp_path, inputs)
    assert_matches(got, run_ort(model, inputs))
    meta = json.loads((bundle / "metadata.json").read_text())
    clips = [k["name"] for k in meta["kernels"] if k["ops"] == ["Clip"]]
    assert len(clips) == 2
    assert (clips[0] == clips[1]) == (hi2 == 6.0)
    text = (bundle / "src" / "kernels.c").read_text()
    assert ("4.0f);" in text) == (hi2 == 4.0)


def _add_const(name: str, c: float, n: int = 8):
    A = te.placeholder((n,), name=name)
    return te.create_prim_func([A, te.compute((n,), lambda i: A[i] + c, name=name + "_out")])


def test_cache_is_keyed_on_structure_not_names() -> None:
    assert structural_key(_add_const("A", 1.0)) == structural_key(_add_const("X", 1.0))
    assert structural_key(_add_const("A", 1.0)) != structural_key(_add_const("A", 2.0))
    assert structural_key(_add_const("A", 1.0)) != structural_key(_add_const("A", 1.0, 16))
    assert structural_key(_add_const("A", 0.0)) != structural_key(_add_const("A", -0.0))
    cache = KernelCache()
    one = cache.lower(_add_const("A", 1.0))
    assert cache.lower(_add_const("B", 1.0)) is one
    assert cache.lower(_add_const("A", 2.0)) is not one
    assert len(cache) == 2
    src = cache.render(one, "k_a", restrict=True)
    assert cache.render(one, "k_b", restrict=True) is src  # first name kept
    assert cache.render(one, "k_c", restrict=False) is not src  # aliasing: its own C
    assert "restrict" in " ".join(src.params)
    assert not cache.rendered(cache.lower(_add_const("A", 2.0)), True)


def test_vars_bound_differently_are_different_functions() -> None:
    """A[i] + A[i] and A[i] + B[i] have the same node types but not the same structure."""
    A = te.placeholder((8,), name="A")
    B = te.placeholder((8,), name="B")
    f1 = te.create_prim_func([A, B, te.compute((8,), lambda i: A[i] + A[i])])
    A2 = te.placeholder((8,), name="A")
    B2 = te.placeholder((8,), name="B")
    f2 = te.create_prim_func([A2, B2, te.compute((8,), lambda i: A2[i] + B2[i])])
    assert structural_key(f1) != structural_key(f2)


@pytest.mark.parametrize("n", [0, 1, 31, 32, 4031, 4032, 4033, 3 * 4032, 3 * 4032 + 100])
@pytest.mark.parametrize("chunk,per_line,indent", [(4032, 32, 2), (64, 16, 0), (100, 32, 4)])
def test_vectorised_weight_text_equals_line_by_line(n, chunk, per_line, indent) -> None:
    data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
    sizes, text = format_bytes(data, chunk, per_line, indent)
    raw = data.tobytes() or b"\0"
    expect = ",\n".join(escaped_lines(raw[s:s + chunk], per_line, indent).rstrip("\n")
                        for s in range(0, len(raw), chunk)) + "\n"
    assert text == expect
    assert sum(sizes) == len(raw)


def test_weight_text_is_the_exact_bytes() -> None:
    a = np.array([1.0, -2.0, np.inf, -0.0], np.float32)
    _, text = format_bytes(a, chunk=8, per_line=4)
    hexes = re.findall(r"\\x([0-9a-f]{2})", text)
    assert bytes(int(h, 16) for h in hexes) == a.tobytes()
    assert text.count('",\n') == 1  # two chunks of 8 bytes


def _bundle_files(out) -> dict:
    return {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_compiling_twice_gives_identical_bundles(tmp_path) -> None:
    from toolchain.bundle import compile_model

    model = _twin_convs()
    files = [_bundle_files(compile_model(model, "x86_64-avx512", tmp_path / f"b{k}",
                                         progress=False)) for k in range(2)]
    assert files[0].keys() == files[1].keys()
    for rel in files[0]:
        assert files[0][rel] == files[1][rel], rel


def test_a_later_compile_takes_the_kernels_lowered_before_and_writes_the_same_bundle(
        tmp_path, monkeypatch) -> None:
    """``LOWERED_IN_PROCESS``: a compile lowers only kernels that no earlier compile in the
    process lowered, names included, for an equal target; what it writes is what a fresh
    process writes, whatever was compiled in between (the same model under other names,
    for another target)."""
    from toolchain.bundle import compile_model
    from toolchain.bundle.compiler import LOWERED_IN_PROCESS
    from toolchain.tir.transform import pipeline

    real, lowered = pipeline.lower, []
    monkeypatch.setattr(pipeline, "lower",
                        lambda func, *a, **k: lowered.append(func) or real(func, *a, **k))

    def compile_(model, target, name):
        lowered.clear()
        return _bundle_files(compile_model(model, target, tmp_path / name, progress=False))

    LOWERED_IN_PROCESS.clear()
    fresh = compile_(_twin_convs(), "x86_64-avx512", "fresh")
    assert len(lowered) == 3  # the layout transforms in and out, the shared conv kernel
    # the same model under other names: the transforms name their buffers after the
    # model's tensors (lowered anew); the conv kernel's names are its own (taken)
    renamed = compile_(_twin_convs(p="other_"), "x86_64-avx512", "renamed")
    assert len(lowered) == 2
    generic = compile_(_twin_convs(), "c-generic", "generic")
    assert len(lowered) > 0  # another target: lowered anew
    again = compile_(_twin_convs(), "x86_64-avx512", "again")
    assert lowered == []
    assert again == fresh
    LOWERED_IN_PROCESS.clear()
    assert compile_(_twin_convs(p="other_"), "x86_64-avx512", "renamed_fresh") == renamed
    assert len(lowered) == 3
    assert renamed != fresh and generic != fresh


@pytest.mark.parametrize("target", ["x86_64-avx512", "cuda-sm80"])
def test_a_later_compile_compiles_no_template_again(tmp_path, monkeypatch, target) -> None:
    """Every template environment is made once per process: a second bundle renders the
    templates the first compiled (a fresh environment per bundle compiled the fast-math
    helpers' template again, ~7 ms of each compile, and a CUDA bundle's five templates,
    ~30 ms). The bundle's text is the same either way."""
    import jinja2

    from toolchain.bundle import compile_model

    model, _ = clip_softmax_clip(6.0)  # a Softmax: the fast-math exp helper
    first = _bundle_files(compile_model(model, target, tmp_path / "a", progress=False))
    if target.startswith("cuda"):
        assert Path("src/kernels.cu") in first  # the CUDA bundle's own templates
    else:
        assert b"kiln_fast_expf" in first[Path("src/kernels.c")]
    real, compiled = jinja2.Environment.compile, []
    monkeypatch.setattr(jinja2.Environment, "compile",
                        lambda env, source, name=None, *a, **k:
                        compiled.append(name) or real(env, source, name, *a, **k))
    again = _bundle_files(compile_model(model, target, tmp_path / "b", progress=False))
    assert compiled == []
    assert again == first
