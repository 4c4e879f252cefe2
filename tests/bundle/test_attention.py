"""Attention in bundles: the exported scaled-dot-product pattern and the ONNX ``Attention``
op, fused into one ``FusedAttention`` kernel by the ``fuse_attention`` pass, compiled for
the host target (and a two-core target) and compared with onnxruntime; a pattern the pass
must not fuse still compiles and agrees."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
from onnx import helper

from tests.bundle.helpers import assert_matches, compile_run, make_model, run_ort
from toolchain.target import host_target, load_target

F = np.float32
N = helper.make_node


def _rand(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(F)


def sdpa_model(b, h, sq, sk, d, dv, *, kv_heads=None, mask=None, scale_op="Div",
               prescaled=False, opset=17):
    """``softmax(Q·Kᵀ / √d [+ mask | masked_fill]) · V`` as torch.onnx writes it; K comes
    as ``[B, Hk, Sk, D]`` and is transposed in the graph. ``mask``: None, ``"add"`` (a float
    input ``m`` [Sq, Sk]), ``"causal"`` (Where(Trilu(ones) == 0, -inf, s)),
    ``"bool"`` (Where(bool input ``m``, s, -1e9))."""
    hk = kv_heads or h
    inits = {"c": np.array(math.sqrt(d), F), "half": np.array(d ** -0.25, F)}
    nodes = [N("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2])]
    q, kt = "q", "kt"
    if prescaled:  # PyTorch's SDPA export: Q and Kᵀ each scaled by d^-1/4
        nodes += [N("Mul", ["q", "half"], ["qs"]), N("Mul", ["kt", "half"], ["kts"])]
        q, kt = "qs", "kts"
    nodes.append(N("MatMul", [q, kt], ["s0"]))
    s = "s0"
    if not prescaled:
        if scale_op == "Div":
            nodes.append(N("Div", ["s0", "c"], ["s1"]))
        else:
            inits["r"] = np.array(1 / math.sqrt(d), F)
            nodes.append(N("Mul", ["r", "s0"], ["s1"]))
        s = "s1"
    inputs = {"q": (F, [b, h, sq, d]), "k": (F, [b, hk, sk, d]), "v": (F, [b, hk, sk, dv])}
    if mask == "add":
        inputs["m"] = (F, [sq, sk])
        nodes.append(N("Add", [s, "m"], ["s2"]))
        s = "s2"
    elif mask == "causal":
        inits["ones"] = np.ones((sq, sk), F)
        inits["zero"] = np.array(0.0, F)
        inits["ninf"] = np.array(-np.inf, F)
        nodes += [N("Trilu", ["ones"], ["tril"], upper=0), N("Equal", ["tril", "zero"], ["off"]),
                  N("Where", ["off", "ninf", s], ["s2"])]
        s = "s2"
    elif mask == "bool":
        inputs["m"] = (np.bool_, [b, 1, sq, sk])
        inits["big"] = np.array(-1e9, F)
        nodes.append(N("Where", ["m", s, "big"], ["s2"]))
        s = "s2"
    nodes += [N("Softmax", [s], ["p"], axis=-1), N("MatMul", ["p", "v"], ["y"])]
    return make_model(nodes, inputs, {"y": (F, [b, h, sq, dv])}, inits, opset=opset)


def _inputs(model, seed=0):
    out = {}
    for k, i in enumerate(model.graph.input):
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        if i.type.tensor_type.elem_type == 9:
            out[i.name] = np.random.default_rng(seed + k).random(shape) > 0.3
        else:
            out[i.name] = _rand(shape, seed + k)
    return out


def _kernels(path):
    return [k["name"] for k in json.loads((path / "metadata.json").read_text())["kernels"]]


@pytest.mark.parametrize("case", [
    dict(b=2, h=4, sq=32, sk=32, d=16, dv=16),                      # the zoo transformer's
    dict(b=1, h=1, sq=13, sk=13, d=8, dv=8),                        # one head, 13 = 8 + 5 rows
    dict(b=1, h=3, sq=7, sk=19, d=5, dv=11, scale_op="Mul"),        # cross, odd sizes
    dict(b=2, h=2, sq=9, sk=9, d=8, dv=8, mask="add"),
    dict(b=1, h=2, sq=21, sk=21, d=16, dv=16, mask="causal"),
    dict(b=2, h=2, sq=10, sk=10, d=4, dv=4, mask="bool"),
    dict(b=1, h=4, sq=12, sk=12, d=8, dv=8, kv_heads=1, prescaled=True),  # MQA by broadcast
    # one query, value heads of width 1 (the fuzzer's --attention seed 2001): the schedule
    # took the wrong loops for the V product and the build raised
    dict(b=3, h=1, sq=1, sk=1, d=2, dv=1),
    dict(b=1, h=2, sq=1, sk=4, d=2, dv=1, mask="add"),
    # one query and one key (seed 2027): the V product's register tile took the loops
    dict(b=1, h=2, sq=1, sk=1, d=1, dv=2),
])
def test_pattern_fused_and_matches_onnxruntime(tmp_path, case):
    model = sdpa_model(**case)
    inputs = _inputs(model)
    path, got = compile_run(model, tmp_path, inputs, target=host_target())
    assert sum("attention" in k for k in _kernels(path)) == 1, _kernels(path)
    assert_matches(got, run_ort(model, inputs), rtol=1e-5)


def test_unfusable_mask_stays_separate_and_right(tmp_path):
    """A mask of shape [2, B, H, Sq, Sk] broadcasts the scores to rank 5: the kernel's
    [B, H, Sq, Sk] assumption does not hold, so the pattern is left as MatMul/Softmax."""
    b, h, s, d = 1, 2, 6, 4
    nodes = [N("MatMul", ["q", "kt"], ["s0"]), N("Div", ["s0", "c"], ["s1"]),
             N("Add", ["s1", "m"], ["s2"]), N("Softmax", ["s2"], ["p"], axis=-1),
             N("MatMul", ["p", "v"], ["y"])]
    model = make_model(nodes, {"q": (F, [b, h, s, d]), "kt": (F, [b, h, d, s]),
                               "v": (F, [b, h, s, d]), "m": (F, [2, b, h, s, s])},
                       {"y": (F, [2, b, h, s, d])}, {"c": np.array(2.0, F)})
    inputs = _inputs(model, seed=3)
    path, got = compile_run(model, tmp_path, inputs, target=host_target())
    assert not any("attention" in k for k in _kernels(path))
    assert_matches(got, run_ort(model, inputs), rtol=1e-5)


@pytest.mark.parametrize("case", [
    dict(shape="4d", hq=4, hk=2, causal=1, mask=None),
    dict(shape="4d", hq=2, hk=2, causal=0, mask="float_short"),
    dict(shape="3d", hq=4, hk=1, causal=0, mask="bool"),
    dict(shape="3d", hq=2, hk=2, causal=1, mask=None, softcap=5.0),
])
def test_attention_op_matches_onnxruntime(tmp_path, case):
    b, sq, sk, d = 2, 11, 11, 8
    hq, hk = case["hq"], case["hk"]
    if case["shape"] == "4d":
        shapes = {"q": [b, hq, sq, d], "k": [b, hk, sk, d], "v": [b, hk, sk, d]}
        out, attrs = [b, hq, sq, d], {}
    else:
        shapes = {"q": [b, sq, hq * d], "k": [b, sk, hk * d], "v": [b, sk, hk * d]}
        out, attrs = [b, sq, hq * d], {"q_num_heads": hq, "kv_num_heads": hk}
    inputs = {k: (F, s) for k, s in shapes.items()}
    names = ["q", "k", "v"]
    if case["mask"] == "float_short":   # last axis shorter than the keys: padded with -inf
        inputs["m"] = (F, [sq, sk - 3])
        names.append("m")
    elif case["mask"] == "bool":
        inputs["m"] = (np.bool_, [b, 1, sq, sk])
        names.append("m")
    if case.get("softcap"):
        attrs["softcap"] = case["softcap"]
    node = N("Attention", names, ["y"], is_causal=case["causal"], **attrs)
    model = make_model([node], inputs, {"y": (F, out)}, opset=23)
    feeds = _inputs(model, seed=7)
    path, got = compile_run(model, tmp_path, feeds, target=host_target())
    assert sum("attention" in k for k in _kernels(path)) == 1
    ort_model, ort_feeds = model, feeds
    if case["mask"] == "float_short":  # onnxruntime wants the whole key axis: pad it
        inputs["m"] = (F, [sq, sk])
        ort_model = make_model([node], inputs, {"y": (F, out)}, opset=23)
        ort_feeds = {**feeds, "m": np.pad(feeds["m"], [(0, 0), (0, 3)],
                                          constant_values=-np.inf)}
    assert_matches(got, run_ort(ort_model, ort_feeds), rtol=1e-5)


def test_two_core_bundle_splits_the_heads(tmp_path):
    model = sdpa_model(2, 4, 37, 37, 16, 16, mask="add")
    inputs = _inputs(model, seed=5)
    target = replace(load_target("c-generic"), cores=2)
    path, got = compile_run(model, tmp_path, inputs, target=target)
    source = (path / "src" / "kernels.c").read_text()
    body = source[source.index("_attention_"):]
    assert "kiln_claim" in body  # the row blocks are shared out among the threads
    # the scratch holds Kt padded to whole vectors and one row block per thread, not the
    # [B, H, Sq, Sk] scores (and their exponentials) of a materialised softmax
    meta = json.loads((path / "metadata.json").read_text())
    scratch = [k.get("scratch_bytes", 0) for k in meta["kernels"] if "attention" in k["name"]]
    assert scratch and scratch[0] < 2 * 4 * 37 * 37 * 4, scratch
    assert_matches(got, run_ort(model, inputs), rtol=1e-5)


def test_skip_pass_keeps_the_pattern_unfused_and_bad_names_are_refused(tmp_path, capsys):
    import onnx

    from toolchain import cli

    model = sdpa_model(1, 2, 8, 8, 4, 4)
    onnx.save(model, tmp_path / "m.onnx")
    assert cli.main(["compile", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "b"),
                     "--no-progress", "--skip-pass", "fuse_attention"]) == 0
    meta = json.loads((tmp_path / "b" / "metadata.json").read_text())
    assert meta["options"]["skip_passes"] == ["fuse_attention"]
    assert not any("attention" in k["name"] for k in meta["kernels"])
    capsys.readouterr()
    code = cli.main(["compile", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "c"),
                     "--no-progress", "--skip-pass", "fuse_attn"])
    err = capsys.readouterr().err
    assert code == 2 and "--skip-pass fuse_attn: not a graph pass" in err
    assert "fuse_attention" in err and not (tmp_path / "c").exists()
