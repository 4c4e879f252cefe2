"""Structural facts that put a bundle on the fast path on an AVX target (no times here):

* the graph stays in the target's blocked layout (no fallback of the whole model to NCHW);
* every conv kernel is scheduled around a ``LayoutConv`` anchor by its registered schedule
  (not the generic fallback), with the conv+bias+activation tail fused into one kernel;
* weights are packed at compile time: no conv/dense kernel takes the unpacked weight as a
  parameter (so none can repack it per call), ``weights.c`` holds no unpacked duplicate,
  and the arena is within 5 % of the memory plan's lower bound;
* depthwise convolutions run the channel-blocked schedule of ``cpu_depthwise``.
"""

from __future__ import annotations

import pytest

from toolchain.bundle.compiler import BundleSpec, build_spec
from toolchain.schedules.generic.fused import anchor_of, bind_constants, registry_anchor_schedule
from toolchain.target import load_target
from toolchain.zoo import ZOO

TARGET = "x86_64-avx512"
WEIGHTED = ("LayoutConv", "Conv", "Gemm", "MatMul")


@pytest.fixture(scope="module")
def specs() -> dict[str, BundleSpec]:
    return {}


def _spec(specs: dict[str, BundleSpec], name: str) -> BundleSpec:
    if name not in specs:
        z = ZOO[name]
        specs[name] = build_spec(z.build(), TARGET, input_shapes=z.input_shapes or None,
                                 name=name, progress=False)
    return specs[name]


def _weighted(spec: BundleSpec):
    for k in spec.kernels:
        a = anchor_of(k.node)
        if a is not None and a.op in WEIGHTED and len(a.inputs) > 1:
            yield k, a


def _check_packed_at_compile_time(spec: BundleSpec) -> None:
    inner_to_outer = {}
    for k, a in _weighted(spec):
        inner = k.node.attrs["graph"]
        for iv, ov in zip(inner.inputs, k.node.inputs, strict=False):
            inner_to_outer[id(iv)] = ov
        w = inner_to_outer.get(id(a.inputs[1]))
        if w is None or w.data is None:
            continue  # a run-time weight: packing it per call is the only way
        params = {id(p) for p in k.params}
        assert id(w) not in params, (
            f"{k.node.name}: the unpacked weight {w.name!r} is a kernel parameter "
            "(packed per call instead of at compile time)")
        assert k.schedule == "default", (k.node.name, k.schedule)


@pytest.mark.slow
def test_resnet8_takes_the_blocked_layoutconv_path(specs) -> None:
    spec = _spec(specs, "resnet8")
    assert spec.layout == "nchw16c", spec.layout
    convs = [(k, a) for k, a in _weighted(spec) if a.op == "LayoutConv"]
    assert len(convs) == 9  # every conv of ResNet-8, as LayoutConv
    for k, _ in convs:
        assert k.schedule == "default", (k.node.name, k.schedule)
    # conv + bias + relu in one kernel (bias folded into the conv, relu fused as its tail)
    tails = [[n.op for n in k.node.attrs["graph"].nodes] for k, _ in convs]
    assert ["LayoutConv", "Relu"] in tails and ["LayoutConv", "Add", "Relu"] in tails
    _check_packed_at_compile_time(spec)
    plan = spec.plan
    assert plan.arena_bytes <= 1.05 * plan.lower_bound, plan.summary()


@pytest.mark.parametrize("name", ["lenet5", "ds_cnn"])
def test_weights_are_packed_once_at_compile_time(specs, name) -> None:
    spec = _spec(specs, name)
    assert spec.layout.startswith("nchw") and spec.layout != "nchw", spec.layout
    _check_packed_at_compile_time(spec)
    assert spec.plan.arena_bytes <= 1.05 * spec.plan.lower_bound, spec.plan.summary()
    # every constant parameter appears once: no packed copy next to its unpacked original
    consts = {p.name for k in spec.kernels for p in k.params if p.data is not None}
    for c in consts:
        for suffix in ("_packed", "_dw_packed", "_matrix"):
            if c.endswith(suffix):
                assert c[: -len(suffix)] not in consts, c


def test_depthwise_convs_use_the_channel_blocked_schedule(specs) -> None:
    spec = _spec(specs, "ds_cnn")
    t = load_target(TARGET)
    dw = [(k, a) for k, a in _weighted(spec) if a.op == "LayoutConv"
          and a.attrs.get("group", 1) > 1]
    assert len(dw) == 4
    for k, a in dw:
        bound, _ = bind_constants(k.node, a)
        s = registry_anchor_schedule(bound, t)
        assert s is not None and s.info["schedule"] == "depthwise_nchwc", k.node.name
        assert any(p.name.endswith("_dw_packed") for p in k.params), k.node.name
        assert k.schedule == "default"
