"""Accelerator layers as bundle kernels, and the accelerator's files in a bundle.

A ``VtaConv2d``/``VtaDense`` node of a partitioned graph (:mod:`toolchain.vta.partition`)
becomes a C kernel like any other — same call sequence, same ``int32_t`` return — whose
body stages the layer's DRAM image in its *window*, packs the int8 input into the
accelerator's blocked layout, runs the instruction stream through the C driver and
rebuilds the int32 accumulators from their byte planes (``templates/bundle/
vta_kernel.c.j2``). Its parameters are the input, two constants stored in the bundle's
weights (the DRAM image: packed weights, micro-ops and zeroed data/output regions; the
encoded instructions) and the output; the window is the kernel's arena *scratch*, so the
static memory plan places every layer's DRAM regions. ``src/kiln_vta_bundle.c`` holds the
driver glue with the device chosen at build time (``make DEVICE=fsim``, the default, or
``make DEVICE=rtl``: the Verilog RTL the bundle carries in ``rtl/``, built by Verilator).

Example::

    >>> kernel = accelerator_kernel(node, params, layer, 0, "net_conv2_vta")  # doctest: +SKIP
    >>> kernel.artifact.scratch_bytes == layer.program.insn_addr + 16 * len(...)  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from toolchain.codegen.artifact import CSupport, KernelArtifact
from toolchain.graph.ir import Node, Value

if TYPE_CHECKING:  # the accelerator's modules load when an accelerator bundle is built
    from toolchain.vta.compile import CompiledConv2d, CompiledDense
    from toolchain.vta.config import VTAConfig

#: the ops whose kernels are accelerator programs
ACCELERATOR_OPS = ("VtaConv2d", "VtaDense", "VtaAdd")
#: the glue's header, which accelerator kernels include
GLUE_HEADER = "kiln_vta_bundle.h"
#: runtime files an accelerator bundle carries besides the CPU runtime
RUNTIME_FILES = ("kiln_vta.h", "kiln_vta.c", "kiln_vta_fsim.h", "kiln_vta_fsim.c")


@dataclass
class AcceleratorKernel:
    """One accelerator layer, ready to render: ``artifact`` is its C kernel once named."""

    node: Node
    layer: CompiledConv2d | CompiledDense
    #: the kernel's parameters: input, DRAM image, instructions, output
    params: list[Value]
    #: its place among the bundle's accelerator layers (counters, reports)
    index: int
    rendered: KernelArtifact | None = None

    def artifact(self, name: str, env: Any) -> KernelArtifact:
        """The C kernel ``name`` (``env``: the bundle's jinja2 environment); rendered once,
        later calls return the first rendering."""
        if self.rendered is not None:
            return self.rendered
        ctx = _context(self.layer, self.index, self.node.attrs["graph"].nodes[0].op)
        body = env.get_template("vta_kernel.c.j2").render(ctx).rstrip("\n").split("\n")
        inputs = ["const void *restrict x"] + (
            ["const void *restrict x2"] if ctx["kind"] == "add" else [])
        params = [*inputs, "const uint8_t *restrict image",
                  "const uint8_t *restrict insns", "void *restrict acc",
                  "uint8_t *kiln_scratch"]
        self.rendered = KernelArtifact(name, params, body, scratch_bytes=ctx["window_bytes"],
                                       support=CSupport((GLUE_HEADER,)))
        return self.rendered


def inner_layer(node: Node) -> Node | None:
    """The accelerator node a Fused node wraps alone, or None."""
    inner = node.attrs.get("graph")
    if inner is None or len(inner.nodes) != 1 or inner.nodes[0].op not in ACCELERATOR_OPS:
        return None
    return inner.nodes[0]


def accelerator_kernel(node: Node, layer: CompiledConv2d | CompiledDense,
                       index: int) -> AcceleratorKernel:
    """The kernel of Fused ``node`` (wrapping one VtaConv2d/VtaDense) running ``layer``."""
    inner = node.attrs["graph"]
    vta = inner.nodes[0]
    data = vta.inputs[:2] if vta.op == "VtaAdd" else vta.inputs[:1]
    pos = [next(i for i, v in enumerate(inner.inputs) if v is d) for d in data]
    prog = layer.program
    image = Value.constant(f"{vta.name}_dram_image", np.asarray(prog.dram, np.uint8).copy())
    insns = Value.constant(f"{vta.name}_insns", np.frombuffer(prog.insn_bytes, np.uint8).copy())
    return AcceleratorKernel(node, layer, [*(node.inputs[i] for i in pos), image, insns,
                                           node.outputs[0]], index)


def _context(layer: CompiledConv2d | CompiledDense, index: int, op: str) -> dict[str, Any]:
    from toolchain.vta.compile import CompiledConv2d

    prog = layer.program
    cfg = prog.config
    data, out = prog.regions["data"], prog.regions["out"]
    ctx: dict[str, Any] = {
        "layer": layer.layer, "index": index, "image_bytes": len(prog.dram),
        "insn_addr": prog.insn_addr, "insn_count": len(prog.insns),
        "window_bytes": prog.insn_addr + len(prog.insn_bytes),
        "data": data.offset, "out": out.offset, "plane": out.nbytes // layer.planes,
        "planes": layer.planes, "out_int8": layer.requant is not None,
        "out_ctype": "int8_t" if layer.requant is not None else "int32_t",
        "batch": cfg.batch, "bi": cfg.block_in, "bo": cfg.block_out}
    if isinstance(layer, CompiledConv2d):
        s = layer.shape
        oh, ow = s.out_hw
        ctx.update(kind="conv", ic=s.ic, h=s.h, w=s.w, oc=s.oc, oh=oh, ow=ow,
                   data_layout=f"NCHW{cfg.batch}n{cfg.block_in}c")
    elif op == "VtaAdd":  # a QAdd: both inputs side by side as the GEMM's K, NCHW out
        d = layer.shape
        ctx.update(kind="add", m=d.m, kdim=d.k, c=d.n, oc=d.n, kb=-(-d.k // cfg.block_in),
                   nb=-(-d.n // cfg.block_out),
                   data_layout=f"rows of both inputs' channels (M/{cfg.batch}, K/"
                               f"{cfg.block_in}, {cfg.batch}, {cfg.block_in})")
    elif layer.conv is not None:  # a convolution as an im2col GEMM: rows built while packing
        s, d = layer.conv, layer.shape
        oh, ow = s.out_hw
        (kh, kw), (sh, sw), (pt, pl, _, _) = s.taps, s.strides, s.padding
        ctx.update(kind="im2col", ic=s.ic, h=s.h, w=s.w, oc=s.oc, oh=oh, ow=ow, kh=kh, kw=kw,
                   sh=sh, sw=sw, pt=pt, pl=pl, m=d.m, kdim=d.k, n=d.n, kb=-(-d.k // cfg.block_in),
                   nb=-(-d.n // cfg.block_out),
                   data_layout=f"im2col rows (M/{cfg.batch}, K/{cfg.block_in}, {cfg.batch}, "
                               f"{cfg.block_in})")
    else:
        d = layer.shape
        ctx.update(kind="dense", m=d.m, k=d.k, n=d.n, kb=-(-d.k // cfg.block_in),
                   nb=-(-d.n // cfg.block_out),
                   data_layout=f"(M/{cfg.batch}, K/{cfg.block_in}, {cfg.batch}, {cfg.block_in})")
    return ctx


def rtl_files(cfg: VTAConfig) -> dict[str, str]:
    """The RTL an accelerator bundle carries for ``make DEVICE=rtl``, by bundle path:
    ``rtl/*.sv`` and ``rtl/sim/*.sv`` (``hw/rtl``), ``rtl/vta_params.svh`` generated for
    ``cfg`` and the C++ device ``rtl/sim/kiln_vta_rtl.{h,cpp}``; empty when the RTL cannot
    be built with ``cfg``'s shapes (the bundle then offers the fsim only).

    Example::

        >>> from toolchain.vta.config import VTAConfig
        >>> files = rtl_files(VTAConfig())
        >>> "rtl/vta_params.svh" in files and "rtl/sim/kiln_vta_rtl.cpp" in files
        True
    """
    from toolchain.errors import TargetError
    from toolchain.vta.rtl import RTL_DIR, params_svh, rtl_sources

    try:
        svh = params_svh(cfg)
    except TargetError:
        return {}
    files = {f"rtl/{p.relative_to(RTL_DIR)}": p.read_text() for p in rtl_sources()}
    files["rtl/vta_params.svh"] = svh
    for name in ("kiln_vta_rtl.h", "kiln_vta_rtl.cpp"):
        files[f"rtl/sim/{name}"] = (RTL_DIR / "sim" / name).read_text()
    return files


def glue_context(cfg: VTAConfig, layers: list[str]) -> dict[str, Any]:
    """The values ``vta_bundle.{h,c}.j2`` are rendered with (besides the bundle's)."""
    from toolchain.vta.config import ALU_OP_NAMES

    mask = sum(1 << ALU_OP_NAMES.index(op) for op in cfg.alu_ops)
    return {"cfg": cfg, "alu_mask": mask, "layers": layers}
