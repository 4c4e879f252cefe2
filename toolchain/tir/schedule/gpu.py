"""GPU launch-limit checks: threads per block and shared memory per block.

A *kernel* is one top-level loop nest under the root block that binds a ``blockIdx`` or
``threadIdx`` axis. Its threads per block are the product of its ``threadIdx.*`` extents;
its shared memory is the footprint of every ``shared`` buffer one block holds at once: the
accessed region relaxed over the thread loops and the loops inside the innermost loop
around all of the buffer's accesses (a tile ``compute_at`` a step loop counts one step).
"""

from __future__ import annotations

from typing import Any

from toolchain.errors import ScheduleError
from toolchain.tir import arith, ir
from toolchain.tir.functor import substitute
from toolchain.tir.schedule import state as st

#: what :func:`check_gpu_limits` learns of one top-level statement, by the statement:
#: ``id -> (statement, its thread tags and extents or None where it binds no thread axis,
#: whether a loop asks for dynamic shared memory, its shared footprint or None before it
#: is needed)``. IR nodes are immutable, so the answers are the statement's for good; a
#: primitive rebuilds only the kernel it changed, so the function's other kernels (and
#: those of a schedule copied from it) are answered from here instead of walked and
#: relaxed again at every ``bind`` and ``verify``. The entry keeps its statement alive (an
#: ``id`` is not reused while it is here); cleared past :data:`KERNEL_FACTS_LIMIT`.
_KERNEL_FACTS: dict[int, list[Any]] = {}
KERNEL_FACTS_LIMIT = 1024


def _facts(s: ir.Stmt) -> list[Any]:
    got = _KERNEL_FACTS.get(id(s))
    if got is not None and got[0] is s:
        return got
    tags: dict[str, ir.PrimExpr] = {}
    dynamic = False
    for n, _ in st.walk(s):
        if isinstance(n, ir.For):
            if n.thread_tag:
                tags.setdefault(n.thread_tag, n.extent)
            if n.annotations.get(DYNAMIC_SHARED_MEMORY):
                dynamic = True
    got = [s, tags or None, dynamic, None]
    if len(_KERNEL_FACTS) >= KERNEL_FACTS_LIMIT:
        _KERNEL_FACTS.clear()
    _KERNEL_FACTS[id(s)] = got
    return got


def _name(k: ir.Stmt) -> str:
    return f"loop {k.loop_var.name}" if isinstance(k, ir.For) else type(k).__name__


def thread_extents(kernel: ir.Stmt) -> dict[str, ir.PrimExpr]:
    """Thread tag -> extent for one kernel."""
    out: dict[str, ir.PrimExpr] = {}
    for n, _ in st.walk(kernel):
        if isinstance(n, ir.For) and n.thread_tag:
            out.setdefault(n.thread_tag, n.extent)
    return out


def _common_loops(paths: list[tuple[ir.Stmt, ...]]) -> set[ir.Var]:
    """The variables of the serial loops around every one of ``paths`` (outermost first,
    up to where the paths part)."""
    common: set[ir.Var] = set()
    first = paths[0]
    for d, s in enumerate(first):
        if not all(len(p) > d and p[d] is s for p in paths[1:]):
            break
        if isinstance(s, ir.For) and not s.thread_tag:
            common.add(s.loop_var)
    return common


def shared_footprint(kernel: ir.Stmt) -> dict[ir.Buffer, int]:
    """Bytes of each shared buffer one thread block of ``kernel`` holds at once.

    A buffer's accesses are relaxed over the loops inside the innermost loop around all of
    them and over the thread loops; the serial loops around all of them are fixed (the
    largest tile over their values is taken): a tile fetched by ``cache_read(...,
    "shared")`` + ``compute_at(k_0)`` counts one step of ``k_0``, not the whole ``k``
    range (the allocation lives inside ``k_0`` once lowered)."""
    uses: dict[ir.Buffer, list[tuple[ir.BlockRealize, tuple[ir.Stmt, ...], ir.BufferRegion]]]
    uses = {}
    for r, path in st.blocks_under(kernel):
        for reg in r.block.reads + r.block.writes:
            if reg.buffer.scope.startswith("shared"):
                uses.setdefault(reg.buffer, []).append((r, path + (r,), reg))
    out = {}
    for buf, accs in uses.items():
        # one block alone (a reduction into shared memory) may carry values across its
        # loops: then every loop but blockIdx counts
        blocks = {id(r) for r, _, _ in accs}
        around = _common_loops([p for _, p, _ in accs]) if len(blocks) > 1 else set()
        exts: list[int] | None = None
        # a copy made by cache_read + compute_at writes what its readers read: where its
        # own (div/mod) indices cannot be bounded, the readers' regions say the size
        readers = [a for a in accs if not _is_copy_into(a[0], buf)]
        for r, path, reg in accs:
            cur = _extents(r, path, reg, around)
            if readers and len(readers) < len(accs) and _is_copy_into(r, buf):
                cur = [e if e is not None else 0 for e in cur]
            cur = [e if e is not None else _const_dim(buf, d) for d, e in enumerate(cur)]
            exts = cur if exts is None else [max(a, b) for a, b in zip(exts, cur, strict=True)]
        n = 1
        for e in exts or []:
            n *= e
        out[buf] = n * ir.bits_of(buf.dtype) // 8 * ir.lanes_of(buf.dtype)
    return out


def _extents(r: ir.BlockRealize, path: tuple[ir.Stmt, ...], reg: ir.BufferRegion,
             around: set[ir.Var]) -> list[int | None]:
    """Per dimension, the most elements of ``reg`` one block touches for fixed values of
    the loops in ``around`` (and of the ``blockIdx`` loops); None where not bounded."""
    loops = [n for n in path if isinstance(n, ir.For)]
    fixed_of = {n.loop_var: ir.Range(n.min, n.extent) for n in loops
                if (n.thread_tag or "").startswith("blockIdx") or n.loop_var in around}
    relax = {n.loop_var: ir.Range(n.min, n.extent) for n in loops
             if n.loop_var not in fixed_of}
    vmap = dict(zip((iv.var for iv in r.block.iter_vars), r.iter_values, strict=True))
    exts = []
    for rg in reg.region:
        lo = arith.relax(substitute(rg.min, vmap), relax)
        hi = arith.relax(substitute(rg.min + rg.extent - 1, vmap), relax)
        if lo is None or hi is None:
            exts.append(None)
            continue
        ub = _most(hi[1], lo[0], {**relax, **fixed_of}, fixed_of)
        cap = _const_dim(reg.buffer, len(exts))
        exts.append(min(ub, cap) if ub is not None else None)
    return exts


def _is_copy_into(r: ir.BlockRealize, buf: ir.Buffer) -> bool:
    """Whether block ``r`` only copies another buffer into ``buf`` (a cache_read copy)."""
    body = r.block.body
    return (isinstance(body, ir.BufferStore) and body.buffer is buf
            and isinstance(body.value, ir.BufferLoad) and r.block.init is None)


def _sides(e: ir.PrimExpr, kind: type) -> list[ir.PrimExpr]:
    """``e`` and, where it is ``T.max(a, b) + c`` (``kind`` Max) or ``T.min(a, b) + c``
    (Min), ``a + c`` and ``b + c``: each side bounds ``e`` from below (Max) or above."""
    const = None
    if isinstance(e, ir.Add) and isinstance(e.b, ir.IntImm):
        e, const = e.a, e.b
    elif isinstance(e, ir.Sub) and isinstance(e.b, ir.IntImm):
        e, const = e.a, ir.IntImm(-e.b.value)
    out = [e if const is None else e + const]
    if isinstance(e, kind):
        out += [x if const is None else x + const for x in (e.a, e.b)]
    return out


def _most(hi: ir.PrimExpr, lo: ir.PrimExpr, ranges: dict, fixed: dict) -> int | None:
    """A constant upper bound of ``hi - lo + 1``; a clamped bound (``T.max(y - 1, 0)``, a
    padded window's first row) is bounded by either of its sides."""
    los, his = _sides(lo, ir.Max), _sides(hi, ir.Min)
    best = None
    for h in his:
        for low in los:
            _, ub = arith.const_bound(arith.simplify(h - low + 1, ranges), fixed)
            if ub is not None and (best is None or ub < best):
                best = ub
    return best


def _const_dim(buf: ir.Buffer, d: int) -> int:
    s = buf.shape[d]
    return s.value if isinstance(s, ir.IntImm) else 1


#: a loop annotation (``sch.annotate(bx, DYNAMIC_SHARED_MEMORY, 1)``) by which a schedule
#: asks for the shared memory a block may opt in to (``max_shared_memory_per_block_optin``:
#: the CUDA renderer then carves the kernel's shared buffers out of dynamic shared memory
#: and the launcher raises the kernel's limit) instead of ``max_shared_memory_per_block``
DYNAMIC_SHARED_MEMORY = "dynamic_shared_memory"


#: a loop annotation by which a schedule lets the CUDA renderer make the kernel's aligned
#: 4/8/16-byte vector copies from global to shared memory asynchronous
#: (``__pipeline_memcpy_async``: ``cp.async`` on sm_80+, a plain copy before), each
#: barrier of the kernel then first waiting for them (``__pipeline_commit``,
#: ``__pipeline_wait_prior(0)``). The schedule promises that no thread reads an element
#: copied so before a barrier (the tensor-core GEMM's operand tiles: read by the products
#: after the step's barrier).
ASYNC_COPY = "async_copy"


#: a loop annotation by which a schedule says that the kernel's shared memory is read by
#: the async proxy (``wgmma`` reads its operands through matrix descriptors): the CUDA
#: renderer makes every thread order its own writes to shared memory (plain stores,
#: landed ``cp.async`` copies) before the async proxy's reads at each barrier --
#: ``fence.proxy.async.shared::cta`` just before ``__syncthreads()`` (after the wait for
#: the kernel's asynchronous copies, where it has them). The emulation needs nothing.
ASYNC_PROXY = "async_proxy"


def shared_memory_limit(target: Any, kernel: ir.Stmt | None = None) -> int | None:
    """The shared memory a block of ``kernel`` may use on ``target``: the opt-in amount
    where the kernel has a loop annotated :data:`DYNAMIC_SHARED_MEMORY` and the target
    declares one, else ``max_shared_memory_per_block`` (None: no limit declared)."""
    optin = getattr(target, "max_shared_memory_per_block_optin", None)
    if optin and kernel is not None and _facts(kernel)[2]:
        return int(optin)
    return getattr(target, "max_shared_memory_per_block", None)


def check_gpu_limits(func: ir.PrimFunc, target: Any) -> None:
    """Raise ScheduleError if a kernel exceeds the target's threads or shared memory
    (:func:`shared_memory_limit`)."""
    body = st.root_block(func).body
    for k in list(body.seq) if isinstance(body, ir.SeqStmt) else [body]:
        facts = _facts(k)
        tags = facts[1]
        if tags is None:  # binds no thread axis: not a kernel
            continue
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
        max_smem = shared_memory_limit(target, k)
        if max_smem and any(t.startswith("blockIdx") for t in tags):
            if facts[3] is None:
                facts[3] = shared_footprint(k)
            foot = facts[3]
            doubled = set(func.attrs.get("double_buffer", ()))  # two tiles each (lowering)
            foot = {b: n * 2 if b.name in doubled else n for b, n in foot.items()}
            total = sum(foot.values())
            if total > max_smem:
                parts = ", ".join(f"{b.name} {n} B" for b, n in foot.items())
                raise ScheduleError(
                    f"kernel at {_name(k)} needs {total} bytes of shared memory per block "
                    f"({parts}), more than target {target.name!r} allows ({max_smem} B): "
                    "use smaller tiles under the blockIdx loops, or move the cache_read "
                    "copy (compute_at) to an inner loop")
