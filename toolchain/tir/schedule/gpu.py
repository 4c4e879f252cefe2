"""GPU launch-limit checks: threads per block and shared memory per block.

A *kernel* is one top-level loop nest under the root block that binds a ``blockIdx`` or
``threadIdx`` axis. Its threads per block are the product of its ``threadIdx.*`` extents;
its shared memory is the footprint of every ``shared`` buffer touched in one block, i.e.
the accessed region relaxed over every loop except the ``blockIdx`` ones.
"""

from __future__ import annotations

from typing import Any

from toolchain.errors import ScheduleError
from toolchain.tir import arith, ir
from toolchain.tir.functor import substitute
from toolchain.tir.schedule import state as st


def _kernels(func: ir.PrimFunc) -> list[ir.Stmt]:
    body = st.root_block(func).body
    items = list(body.seq) if isinstance(body, ir.SeqStmt) else [body]
    return [s for s in items
            if any(isinstance(n, ir.For) and n.thread_tag for n, _ in st.walk(s))]


def _name(k: ir.Stmt) -> str:
    return f"loop {k.loop_var.name}" if isinstance(k, ir.For) else type(k).__name__


def thread_extents(kernel: ir.Stmt) -> dict[str, ir.PrimExpr]:
    """Thread tag -> extent for one kernel."""
    out: dict[str, ir.PrimExpr] = {}
    for n, _ in st.walk(kernel):
        if isinstance(n, ir.For) and n.thread_tag:
            out.setdefault(n.thread_tag, n.extent)
    return out


def shared_footprint(kernel: ir.Stmt) -> dict[ir.Buffer, int]:
    """Bytes of each shared buffer one thread block of ``kernel`` touches."""
    sizes: dict[ir.Buffer, list[int]] = {}
    for r, path in st.blocks_under(kernel):
        path = path + (r,)
        relax = {n.loop_var: ir.Range(n.min, n.extent) for n in path
                 if isinstance(n, ir.For) and not (n.thread_tag or "").startswith("blockIdx")}
        fixed = {n.loop_var: ir.Range(n.min, n.extent) for n in path
                 if isinstance(n, ir.For) and (n.thread_tag or "").startswith("blockIdx")}
        vmap = dict(zip((iv.var for iv in r.block.iter_vars), r.iter_values, strict=True))
        for reg in r.block.reads + r.block.writes:
            if not reg.buffer.scope.startswith("shared"):
                continue
            exts = []
            for rg in reg.region:
                lo = arith.relax(substitute(rg.min, vmap), relax)
                hi = arith.relax(substitute(rg.min + rg.extent - 1, vmap), relax)
                if lo is None or hi is None:
                    exts.append(_const_dim(reg.buffer, len(exts)))
                    continue
                ext = arith.simplify(hi[1] - lo[0] + 1, {**relax, **fixed})
                _, ub = arith.const_bound(ext, fixed)
                exts.append(ub if ub is not None else _const_dim(reg.buffer, len(exts)))
            old = sizes.get(reg.buffer)
            sizes[reg.buffer] = exts if old is None else [max(a, b) for a, b in
                                                          zip(old, exts, strict=True)]
    out = {}
    for buf, exts in sizes.items():
        n = 1
        for e in exts:
            n *= e
        out[buf] = n * ir.bits_of(buf.dtype) // 8 * ir.lanes_of(buf.dtype)
    return out


def _const_dim(buf: ir.Buffer, d: int) -> int:
    s = buf.shape[d]
    return s.value if isinstance(s, ir.IntImm) else 1


def check_gpu_limits(func: ir.PrimFunc, target: Any) -> None:
    """Raise ScheduleError if a kernel exceeds the target's threads or shared memory."""
    for k in _kernels(func):
        tags = thread_extents(k)
        max_threads = getattr(target, "max_threads_per_block", None)
        if max_threads:
            total, parts = 1, []
            for tag in ("threadIdx.x", "threadIdx.y", "threadIdx.z"):
                if tag in tags and isinstance(tags[tag], ir.IntImm):
                    total *= tags[tag].value
                    parts.append(f"{tag}={tags[tag].value}")
            if total > max_threads:
                raise ScheduleError(
                    f"kernel at {_name(k)} uses {total} threads per block "
                    f"({' x '.join(parts)}), more than target {target.name!r} allows "
                    f"({max_threads}): split the thread-bound loop and bind the outer part to "
                    "blockIdx (or leave it serial)")
        max_smem = getattr(target, "max_shared_memory_per_block", None)
        if max_smem and any(t.startswith("blockIdx") for t in tags):
            foot = shared_footprint(k)
            total = sum(foot.values())
            if total > max_smem:
                parts = ", ".join(f"{b.name} {n} B" for b, n in foot.items())
                raise ScheduleError(
                    f"kernel at {_name(k)} needs {total} bytes of shared memory per block "
                    f"({parts}), more than target {target.name!r} allows ({max_smem} B): "
                    "use smaller tiles under the blockIdx loops, or move the cache_read "
                    "copy (compute_at) to an inner loop")
