"""A compile leaves (almost) nothing for Python's cyclic garbage collector.

Kiln's compile makes and drops millions of small IR objects. Those freed by reference
counting go at once; those caught in a reference cycle (a closure that calls itself, a
class made per call, an object pointing back at its owner) wait for a collection, which
walks every young object: a Schedule kept in such a cycle kept all of its IR, some 26,000
objects of a MobileNet v1 compile (about 5 % of its CPU time in the collection after it).
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from toolchain import te
from toolchain.bundle import build_spec, render_files
from toolchain.bundle.compiler import LOWERED_IN_PROCESS
from toolchain.tir.schedule import Schedule


def _conv_model() -> object:
    w = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    m = helper.make_model(helper.make_graph(nodes, "g", [x], [y], [w]),
                          opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    return m


def test_a_schedule_is_freed_by_reference_counting() -> None:
    a = te.placeholder((16, 16), name="A")
    b = te.compute((16, 16), lambda i, j: a[i, j] * 2.0, name="B")
    sch = Schedule(te.create_prim_func([a, b]))
    i, j = sch.get_loops(sch.get_block("B"))
    io, ii = sch.split(i, [4, 4])
    sch.reorder(ii, io)
    sch.fuse(ii, io)
    func = sch.mod
    alive = weakref.ref(sch)
    gc.disable()
    try:
        del sch, i, j, io, ii
        assert alive() is None, "the Schedule is held by a reference cycle"
    finally:
        gc.enable()
    assert func is not None


def test_a_model_compile_leaves_little_for_the_cyclic_collector() -> None:
    model = _conv_model()
    render_files(build_spec(model, "host", name="warm", progress=False))  # imports, caches
    LOWERED_IN_PROCESS.clear()  # the compile below lowers its kernels again
    gc.collect()
    gc.disable()
    try:
        render_files(build_spec(model, "host", name="cycles", progress=False))
        left = gc.collect()
    finally:
        gc.enable()
    assert left < 300, f"a Conv + Relu compile left {left} objects in reference cycles"
