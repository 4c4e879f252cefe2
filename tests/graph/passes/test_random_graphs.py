"""Property test: random CNN-like graphs (convs, BatchNorm, per-channel affine ops,
residual adds far apart, Concat/Slice/Pad/pool/Reshape/Transpose chains, Identity/Dropout,
several outputs) give the same results after the whole pipeline in every layout, and run
correctly from their planned arena."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.graph.passes.helpers import GraphBuilder, assert_same_results, sample_inputs
from tests.graph.passes.test_memory_arena import run_in_arena
from toolchain.graph.memory import plan_memory
from toolchain.graph.passes import run_pipeline
from toolchain.graph.reference import run_graph


def _i64(*v):
    return np.array(v, np.int64)


def random_graph(seed: int):
    rng = np.random.default_rng(seed)
    b = GraphBuilder(seed)
    hw = int(rng.choice([4, 5]))
    pool = [b.input("x", (1, int(rng.choice([3, 4, 8])), hw, hw))]

    def pick():
        return pool[int(rng.integers(len(pool)))]

    def same_shape_pair():
        a = pick()
        mates = [v for v in pool if v.shape == a.shape and v is not a]
        return a, (mates[int(rng.integers(len(mates)))] if mates else None)

    for i in range(int(rng.integers(4, 12))):
        x = pick()
        c = x.shape[1]
        kind = int(rng.integers(11))
        if kind <= 2:  # conv, sometimes depthwise
            dw = kind == 2
            cout = c if dw else int(rng.choice([4, 6, 8, 16]))
            ins = [x, b.weight(f"w{i}", (cout, 1 if dw else c, 3, 3))]
            if rng.random() < 0.5:
                ins.append(b.weight(f"b{i}", (cout,)))
            y = b.op("Conv", ins, {"pads": (1, 1, 1, 1), "group": c if dw else 1})
        elif kind == 3:
            y = b.op("BatchNormalization", [x] + [b.weight(f"bn{i}.{k}", (c,), 0.5, 1.5)
                                                  for k in range(4)])
        elif kind == 4:
            op = str(rng.choice(["Mul", "Add", "Sub", "Div"]))
            shape = [(c, 1, 1), (1, c, 1, 1), (), (1, 1, 1, hw)][int(rng.integers(4))]
            y = b.op(op, [x, b.weight(f"k{i}", shape, 0.5, 1.5)])
        elif kind == 5:
            op = str(rng.choice(["Relu", "Sigmoid", "Identity", "Dropout"]))
            y = b.op(op, [x])
        elif kind == 6:
            a, m = same_shape_pair()
            y = b.op("Add", [a, m]) if m is not None else b.op("Relu", [a])
        elif kind == 7:
            a, m = same_shape_pair()
            y = b.op("Concat", [a, m if m is not None else a], {"axis": 1})
        elif kind == 8:
            y = b.op("Slice", [x, b.const(f"s{i}", _i64(0)), b.const(f"e{i}", _i64(max(c // 2, 1))),
                               b.const(f"a{i}", _i64(1))])
        elif kind == 9:
            p = b.op("Pad", [x, b.const(f"p{i}", _i64(0, 0, 1, 1, 0, 0, 1, 1))])
            y = b.op("MaxPool", [p], {"kernel_shape": (3, 3)})
        else:
            r = b.op("Reshape", [x, b.const(f"r{i}", _i64(1, c, hw * hw))])
            t = b.op("Transpose", [r], {"perm": (0, 2, 1)})
            t = b.op("Transpose", [t], {"perm": (0, 2, 1)})
            y = b.op("Reshape", [t, b.const(f"q{i}", _i64(1, c, hw, hw))])
        pool.append(y)
    outs = [pool[-1]] + [v for v in pool[1:-1] if rng.random() < 0.2]
    return b.graph(outs, name=f"random{seed}")


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10**6), st.sampled_from(["nchw", "nchw4c", "nchw8c", "nhwc"]))
def test_random_graph_survives_the_pipeline_and_its_arena(seed, layout):
    graph = random_graph(seed)
    inputs = sample_inputs(graph, seed)
    fused = run_pipeline(graph, target_layout=layout)
    assert all(n.op == "Fused" for n in fused.nodes)
    assert_same_results(graph, fused, inputs)
    plan = plan_memory(fused, scratch={n.name: 64 for n in fused.nodes[::2]}, alignment=16)
    plan.check()
    expected = run_graph(fused, inputs)
    got = run_in_arena(fused, plan, inputs)
    for name, value in expected.items():
        scale = float(np.max(np.abs(value))) if value.size else 0.0
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6 * scale)
