"""Tensor intrinsics declared in target descriptors, registered for ``sch.tensorize``.

Each entry under ``intrinsics:`` of ``targets/<target>.yaml`` becomes a
:class:`~toolchain.tir.schedule.tensorize.TensorIntrin` named ``"<target>.<name>"``:

* ``desc`` — the behaviour (``C[i, j] += A[i, k] * B[k, j]`` with ``extents`` and
  ``dtypes``) parsed by :mod:`toolchain.intrinsics.behaviour` into a loop nest;
* ``impl`` — a call ``<function>(&A[..], &B[..], &C[..])`` whose operands tensorize
  rebases at the matched tile.

The C body of ``<function>`` is a jinja2 template (``impl``) that sees each operand's
pointer (``{{ A }}``) and element strides per dimension (``{{ A_s0 }}``, ``{{ A_s1 }}``…) as
they are in the *lowered* kernel (``{{ A_t0 }}``, ``{{ A_t1 }}``…: those of the dimensions
the declared tile spans, the buffer's last ones), and the declared loop extents (``{{ ext_g }}`` for
``extents: {g: 16}``: one body can serve several extents); :func:`attach_intrinsics` (a
built-in lowering pass of phase 1, after buffer compaction) renders one ``static inline``
specialisation per stride combination into the kernel's C prelude.
``{{ require(cond, "why") }}`` refuses unsupported strides with a
:class:`~toolchain.errors.ScheduleError`. Buffer compaction counts a call's operand as the
tile it touches (:func:`operand_tiles`), so a staging row or accumulator passed by address
shrinks like any other buffer.

Example::

    >>> from toolchain import te
    >>> from toolchain.tir.schedule import Schedule
    >>> name = load_intrinsics("c-generic")[0]; name
    'c-generic.fma_f32_4x4'
    >>> A = te.placeholder((8, 8), name="A"); B = te.placeholder((8, 8), name="B")
    >>> k = te.reduce_axis((0, 8), name="k")
    >>> C = te.compute((8, 8), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    >>> sch = Schedule(te.create_prim_func([A, B, C]))
    >>> i, j, kk = sch.get_loops(sch.get_block("C"))
    >>> io, ii = sch.split(i, [None, 4]); jo, ji = sch.split(j, [None, 4])
    >>> ko, ki = sch.split(kk, [None, 4])
    >>> sch.reorder(io, jo, ko, ii, ji, ki)
    >>> _ = sch.decompose_reduction(sch.get_block("C"), ko)
    >>> sch.tensorize(ii, name)
    >>> '"kiln_fma_f32_4x4", T.address_of(A[i_0 * 4, k_0 * 4])' in str(sch.mod)
    True
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass, field

import jinja2

from toolchain.codegen.artifact import (
    CDefinition,
    CSupport,
    LLVMDefinition,
    llvm_support_of,
    support_of,
)
from toolchain.errors import ScheduleError, TargetError
from toolchain.intrinsics.behaviour import behaviour_func, parse_behaviour
from toolchain.target import Target, load_target
from toolchain.tir import ir
from toolchain.tir.functor import StmtExprMutator, StmtExprVisitor
from toolchain.tir.schedule.tensorize import TensorIntrin

__all__ = ["COMPILED_FROM", "MMA_SCOPE", "REGISTER_SCOPES", "WGMMA_SCOPE", "IntrinsicSpec",
           "attach_intrinsics", "behaviour_of_call", "get_spec", "intrinsic_flags",
           "intrinsic_of_function", "llvm_definition", "llvm_helper_definition",
           "load_intrinsics", "operand_elements", "operand_tiles", "parse_behaviour",
           "scalar_vars"]


@dataclass(frozen=True)
class IntrinsicSpec:
    """One declared intrinsic: its registered name, C function and template."""

    name: str
    target: str
    function: str
    operands: tuple[str, ...]
    template: str
    headers: tuple[str, ...] = ()
    cflags: tuple[str, ...] = ()
    cpu_flags: tuple[str, ...] = ()
    scopes: dict[str, str] = field(default_factory=dict)
    #: the target's ``c_helpers`` (C placed once before the kernels that use it)
    helpers: str = ""
    #: per operand, the extents of the tile one call touches (the behaviour's buffer shape)
    tiles: tuple[tuple[int, ...], ...] = ()
    #: the behaviour's loop extents (``ext_<var>`` in the template)
    extents: dict[str, int] = field(default_factory=dict)
    #: identity of ``helpers`` (the functions the block defines)
    helpers_key: str = ""
    #: the LLVM IR body template (``llvm_impl``), "" when the intrinsic has none
    llvm_template: str = ""
    #: the accelerator instruction that implements it (``GEMM``, ``ALU.MAX``...), "" for C
    instruction: str = ""
    #: whether a call reads its output operand before writing it (``+=``, or the output
    #: on the right-hand side); ``C[b, o] = 0`` or ``C = A >> imm`` only write it
    reads_output: bool = True
    #: threads that execute one call together (32: a warp-collective operation such as
    #: ``wmma``; the SIMT emulation runs it once, on the first of them)
    lanes: int = 1
    #: what precedes the C definition (``static inline``, or a macro for device code)
    qualifier: str = "static inline"
    #: operand name -> C type of its pointer parameter, where not its dtype's (a fragment)
    types: dict[str, str] = field(default_factory=dict)
    #: whether the body needs the architecture-specific feature set (``sm_90a``: the
    #: ``a`` targets of CUDA, e.g. ``wgmma``): a kernel calling it is compiled for that
    arch_features: bool = False
    #: commit groups a call leaves running (``wgmma``'s ``wait_group N`` at its end: its
    #: products may read their shared operands until a later call or a drain -- the same
    #: function with null operand pointers -- retires them); 0: done when it returns
    in_flight: int = 0


#: the memory scope of ``mma.sync`` accumulators: each lane's own registers, the warp's
#: tile spread over its lanes in the PTX ISA's layout (toolchain.tir.transform.mma_fragments)
MMA_SCOPE = "mma.accumulator"
#: the memory scope of ``wgmma`` accumulators: each thread's own registers, a warpgroup's
#: 64 x N tile spread over its 128 threads in the PTX ISA's layout (the same lowering)
WGMMA_SCOPE = "wgmma.accumulator"
#: register-accumulator scopes -> the threads a tile is spread over
REGISTER_SCOPES = {MMA_SCOPE: 32, WGMMA_SCOPE: 128}

_SPECS: dict[str, IntrinsicSpec] = {}     # registered name -> spec
#: specialised function (``attach_intrinsics``) -> its spec and its operands' tile strides
_SPECIALISED: dict[str, tuple[IntrinsicSpec, dict[str, int]]] = {}
_BY_FUNCTION: dict[str, IntrinsicSpec] = {}


@dataclass(frozen=True)
class _Helpers:
    """A target's ``c_helpers`` block and the headers it needs; ``key`` names the
    functions it defines (its identity: two blocks defining them cannot share a file)."""

    target: str
    text: str
    headers: tuple[str, ...]
    key: str = ""


#: C function (or function-like macro) defined by a loaded target's ``c_helpers`` -> block
_HELPERS: dict[str, _Helpers] = {}
#: C helper function -> (target name, its LLVM definition from the target's ``llvm_helpers``)
_LLVM_HELPERS: dict[str, tuple[str, LLVMDefinition]] = {}
#: (target name, source) -> that descriptor's compiled intrinsics
_LOADED: dict[tuple[str, str], _Loaded] = {}
_HELPER_NAME = re.compile(r"^\s*(?:static\s+inline\s+[\w\s*]*?\b([A-Za-z_]\w*)\s*\(|"
                          r"#\s*define\s+([A-Za-z_]\w*)\()", re.MULTILINE)


def _where(t: Target, name: str, spec: dict) -> str:
    return f"{spec.get('source', t.source)}:{spec.get('line', '?')}: intrinsic {name!r}"


@dataclass(frozen=True)
class _Loaded:
    """One descriptor's intrinsics, compiled once: what :func:`load_intrinsics` registers."""

    target: Target
    intrinsics: tuple[tuple[IntrinsicSpec, ir.PrimFunc, ir.PrimFunc], ...]
    helpers: _Helpers | None
    llvm_helpers: tuple[LLVMDefinition, ...] = ()
    #: the ``on_call_helpers`` definition (placed only where a kernel calls its functions)
    on_call: _Helpers | None = None


def _helpers_block(t: Target, text: str, key: str) -> _Helpers | None:
    """``text`` (C helpers of ``t``) as one definition keyed ``key:<names it defines>``."""
    if not text.strip():
        return None
    headers = t.c_helpers_headers if t.c_helpers_headers is not None else \
        tuple(dict.fromkeys(h for s in t.intrinsics.values() for h in s.get("headers", ())))
    defined = [m.group(1) or m.group(2) for m in _HELPER_NAME.finditer(text)]
    return _Helpers(t.name, _one_block(text), headers, f"{key}:" + ",".join(sorted(defined)))


#: the fields of a ``Target`` that :func:`_compile` reads: a descriptor equal to the one
#: loaded in these (a variant of it with another ``layout``, ``cflags`` ...: the cortex-m4
#: NHWC variants the bundle tests make) registers the compiled intrinsics again instead of
#: compiling the same behaviours anew
COMPILED_FROM = ("name", "source", "intrinsics", "c_helpers", "c_helpers_headers",
                 "on_call_helpers", "llvm_helpers")


def _compile(t: Target) -> _Loaded:
    block = _helpers_block(t, t.c_helpers, "c_helpers")
    out = []
    for name, spec in t.intrinsics.items():
        where = _where(t, name, spec)
        beh = parse_behaviour(spec["behaviour"], where)
        desc = behaviour_func(beh, dict(spec["extents"]), dict(spec["dtypes"]), where)
        ptrs = [ir.Call("handle", "tir.address_of", [b[tuple(0 for _ in b.shape)]])
                for b in desc.buffers]
        if "instruction" in spec:  # an accelerator instruction: a call the backend lowers
            fn = f"{t.name}.{name}"
            ptrs += [scalar_vars(desc)[n] for n in beh.scalars()]
        else:
            fn = spec["function"]
            if not fn.isidentifier():
                raise TargetError(f"{where}: function {fn!r} is not a C identifier")
        impl = ir.PrimFunc(desc.buffers, ir.Evaluate(ir.Call("int32", fn, ptrs)),
                           f"{fn}_impl")
        info = IntrinsicSpec(f"{t.name}.{name}", t.name, fn, tuple(b.name for b in desc.buffers),
                             spec.get("impl", ""), tuple(spec.get("headers", ())),
                             tuple(spec.get("cflags", ())), tuple(spec.get("cpu_flags", ())),
                             dict(spec.get("scopes", {})), block.text if block else "",
                             tuple(tuple(int(d.value) for d in b.shape) for b in desc.buffers),
                             {str(k): int(v) for k, v in dict(spec["extents"]).items()},
                             block.key if block else "", spec.get("llvm_impl", ""),
                             spec.get("instruction", ""),
                             beh.accumulate or beh.output.name in {a.name for a in beh.inputs()},
                             int(spec.get("lanes", 1)), spec.get("qualifier", "static inline"),
                             {str(k): str(v) for k, v in dict(spec.get("types", {})).items()},
                             bool(spec.get("arch_features", False)),
                             int(spec.get("in_flight", 0)))
        out.append((info, desc, impl))
    return _Loaded(t, tuple(out), block,
                   tuple(llvm_helper_definition(n, h) for n, h in t.llvm_helpers.items()),
                   _helpers_block(t, t.on_call_helpers, "on_call_helpers"))


def llvm_helper_definition(name: str, helper: dict) -> LLVMDefinition:
    """The LLVM definition of C helper ``name`` from a target's ``llvm_helpers`` entry
    (``returns``, ``params``, ``body``): ``linkonce_odr`` (one copy however many kernels of
    a bundle use it) and ``alwaysinline`` (it disappears into the loop that calls it, which
    LLVM can then vectorize, as gcc does with the ``static inline`` C helper).

    >>> d = llvm_helper_definition("kiln_twice", {"returns": "i32", "params": ["i32 %x"],
    ...                            "body": "%y = shl i32 %x, 1\\nret i32 %y"})
    >>> print(d.text)
    define linkonce_odr i32 @kiln_twice(i32 %x) alwaysinline nounwind {
      %y = shl i32 %x, 1
      ret i32 %y
    }
    <BLANKLINE>
    """
    lines = "\n".join("  " + ln.strip() if not ln.rstrip().endswith(":") else ln.strip()
                      for ln in helper["body"].splitlines() if ln.strip())
    return LLVMDefinition(name, f"define linkonce_odr {helper['returns']} @{name}("
                                f"{', '.join(helper['params'])}) alwaysinline nounwind "
                                f"{{\n{lines}\n}}\n")


def scalar_vars(desc: ir.PrimFunc) -> dict[str, ir.Var]:
    """The scalar operands (free variables that are no loop variable) of a description.

    >>> beh = parse_behaviour("C[i] = max(A[i], lo)")
    >>> from toolchain.intrinsics.behaviour import behaviour_func
    >>> list(scalar_vars(behaviour_func(beh, {"i": 4}, {"A": "int32", "C": "int32"})))
    ['lo']
    """
    from toolchain.tir.functor import free_vars, post_order_visit

    bound: set[ir.Var] = set()

    def grab(x: object) -> None:
        if isinstance(x, ir.For):
            bound.add(x.loop_var)
        elif isinstance(x, ir.Block):
            bound.update(iv.var for iv in x.iter_vars)

    post_order_visit(desc.body, grab)
    return {v.name: v for v in free_vars(desc.body) if v not in bound}


def load_intrinsics(target: str | Target) -> list[str]:
    """Register every intrinsic of ``target``; returns their names (``"<target>.<name>"``).

    Each descriptor is compiled once (behaviours parsed, specs built); loading it again
    registers the same objects again, so the target loaded last owns the function names
    it shares with another (a renamed ``extends:`` variant, say).
    """
    t = load_target(target) if isinstance(target, str) else target
    done = _LOADED.get((t.name, t.source))
    if done is None or not (done.target is t or all(
            getattr(done.target, f) == getattr(t, f) for f in COMPILED_FROM)):
        done = _LOADED[(t.name, t.source)] = _compile(t)
    for info, desc, impl in done.intrinsics:
        TensorIntrin.register(info.name, desc, impl, override=True)
        _SPECS[info.name] = info
        _BY_FUNCTION[info.function] = info
    for text, block in ((t.c_helpers, done.helpers), (t.on_call_helpers, done.on_call)):
        for m in _HELPER_NAME.finditer(text if block is not None else ""):
            _HELPERS[m.group(1) or m.group(2)] = block
    for d in done.llvm_helpers:
        _LLVM_HELPERS[d.key] = (t.name, d)
    return [info.name for info, _, _ in done.intrinsics]


def operand_tiles(call: ir.Call) -> list[tuple[ir.BufferLoad, ir.BufferLoad, bool, bool]] | None:
    """What a call to a registered intrinsic touches: per operand ``(first, last, read,
    written)`` (its first and last element, from the operand's address and the declared tile
    extents; every input is ``read``, the output is ``written`` and also ``read`` when the
    behaviour reads it, e.g. ``+=``). None for any other call, or an operand that is not
    ``address_of(X[..])`` of a buffer of at least the tile's rank.

    >>> from toolchain.tir import ir
    >>> _ = load_intrinsics("c-generic")
    >>> A, B, C = (ir.Buffer(n, (8, 8)) for n in "ABC")
    >>> i = ir.Var("i", "int32")
    >>> call = ir.Call("int32", "kiln_fma_f32_4x4", [ir.Call("handle", "tir.address_of",
    ...     [X[i, 0]]) for X in (A, B, C)])
    >>> [(str(f), str(la), r, w) for f, la, r, w in operand_tiles(call)]
    ... # doctest: +NORMALIZE_WHITESPACE
    [('A[i, 0]', 'A[i + 3, 3]', True, False), ('B[i, 0]', 'B[i + 3, 3]', True, False),
     ('C[i, 0]', 'C[i + 3, 3]', True, True)]
    """
    from toolchain.tir import arith

    spec = _BY_FUNCTION.get(call.op)
    # an accelerator instruction's scalar operands (immediates) follow its buffers
    if spec is None or len(call.args) != len(spec.tiles) and not (
            spec.instruction and len(call.args) > len(spec.tiles)):
        return None
    out = []
    for k, (arg, tile) in enumerate(zip(call.args[:len(spec.tiles)], spec.tiles, strict=True)):
        if not (isinstance(arg, ir.Call) and arg.op == "tir.address_of" and arg.args
                and isinstance(arg.args[0], ir.BufferLoad)):
            return None
        first = arg.args[0]
        rank = len(first.indices)
        if len(tile) > rank:
            return None
        ext = (1,) * (rank - len(tile)) + tile  # a tile of lower rank: the trailing dims
        last = ir.BufferLoad(first.buffer, tuple(
            i if e == 1 else arith.simplify(i + (e - 1)) for i, e in zip(first.indices, ext,
                                                                         strict=True)))
        written = k == len(spec.tiles) - 1
        out.append((first, last, spec.reads_output or not written, written))
    return out


def operand_elements(call: ir.Call) -> list[tuple[ir.Buffer, ir.PrimExpr,
                                                  tuple[tuple[int, int], ...], bool]] | None:
    """What a call to a specialised intrinsic (after :func:`attach_intrinsics`, on
    flattened buffers) touches: per operand ``(buffer, first element's flat index, ((extent,
    stride) per tile dimension), written)``; None for any other call or operand form.

    >>> _ = load_intrinsics("cuda-sm80")
    >>> from toolchain.tir import ir
    >>> A, B = ir.Buffer("A", (512,), "float16"), ir.Buffer("B", (512,), "float16")
    >>> C = ir.Buffer("C", (256,), "float32", scope="wmma.accumulator")
    >>> ptr = lambda b, i: ir.Call("handle", "tir.address_of", [b[i]])
    >>> f = _Specialise({"float16": "kiln_f16", "float32": "float"}).visit_expr(ir.Call(
    ...     "int32", "kiln_wmma_f16_16x16x16",
    ...     [ptr(b, 0) for b in (ir.Buffer("A", (16, 32), "float16"),
    ...      ir.Buffer("B", (16, 32), "float16"),
    ...      ir.Buffer("C", (16, 16), "float32", scope="wmma.accumulator"))]))
    >>> call = ir.Call("int32", f.op, [ptr(A, 16), ptr(B, 0), ptr(C, 0)])
    >>> [(b.name, str(i), dims, w) for b, i, dims, w in operand_elements(call)]
    ... # doctest: +NORMALIZE_WHITESPACE
    [('A', '16', ((16, 32), (16, 1)), False), ('B', '0', ((16, 32), (16, 1)), False),
     ('C', '0', ((16, 16), (16, 1)), True)]
    """
    found = _SPECIALISED.get(call.op)
    if found is None:
        return None
    spec, strides = found
    if len(call.args) != len(spec.operands):
        return None
    out = []
    for k, (name, arg) in enumerate(zip(spec.operands, call.args, strict=True)):
        if not (isinstance(arg, ir.Call) and arg.op == "tir.address_of" and arg.args
                and isinstance(arg.args[0], ir.BufferLoad) and len(arg.args[0].indices) == 1):
            return None
        tile = spec.tiles[k]
        dims = tuple((ext, strides.get(f"{name}_t{d}", -1)) for d, ext in enumerate(tile))
        if any(st < 0 for _, st in dims):
            return None
        load = arg.args[0]
        out.append((load.buffer, load.indices[0], dims, k == len(spec.operands) - 1))
    return out


def behaviour_of_call(call: ir.Call) -> ir.Stmt | None:
    """The declared behaviour of a specialised intrinsic call (after
    :func:`attach_intrinsics`, on flattened buffers) as plain loops over its operands'
    elements: what the TIR interpreter runs in its place (the race checker sees every
    element it reads and writes). None for any other call.

    >>> _ = load_intrinsics("cuda-sm80")
    >>> from toolchain.tir import ir
    >>> ptr = lambda b, i: ir.Call("handle", "tir.address_of", [b[i]])
    >>> f = _Specialise({"float32": "float"}).visit_expr(ir.Call(
    ...     "int32", "kiln_wmma_fill_16x16",
    ...     [ptr(ir.Buffer("C", (16, 32), "float32", scope="wmma.accumulator"), 0)]))
    >>> C = ir.Buffer("C", (512,), "float32", scope="wmma.accumulator")
    >>> print(behaviour_of_call(ir.Call("int32", f.op, [ptr(C, 16)])))
    ... # doctest: +NORMALIZE_WHITESPACE
    for i, j in T.grid(16, 16):
        C[i * 32 + j + 16] = T.float32(0.0)
    """
    from toolchain.tir.functor import substitute

    ops = operand_elements(call)
    if ops is None:
        return None
    spec, _ = _SPECIALISED[call.op]
    desc = TensorIntrin.get(spec.name).desc
    body = desc.body
    if isinstance(body, ir.BlockRealize) and body.block.name_hint == "root":
        body = body.block.body
    loops = []
    while isinstance(body, ir.For):
        loops.append(body)
        body = body.body
    if not isinstance(body, ir.BlockRealize):
        return None
    fresh = {lp.loop_var: ir.Var(lp.loop_var.name, lp.loop_var.dtype) for lp in loops}
    vmap = {iv.var: substitute(v, fresh) for iv, v in zip(body.block.iter_vars,
                                                          body.iter_values, strict=True)}
    flat = {b.data: op for b, op in zip(desc.buffers, ops, strict=True)}

    class _Flat(StmtExprMutator):
        def _at(self, b: ir.Buffer, idx: tuple[ir.PrimExpr, ...]
                ) -> tuple[ir.Buffer, tuple[ir.PrimExpr, ...]]:
            buf, first, dims, _ = flat[b.data]
            off: ir.PrimExpr = first
            for i, (_, stride) in zip(idx, dims, strict=True):
                off = off + i * stride
            return buf, (off,)

        def visit_BufferLoad(self, e: ir.BufferLoad) -> ir.PrimExpr:  # noqa: N802
            idx = tuple(self.visit_expr(i) for i in e.indices)
            return ir.BufferLoad(*self._at(e.buffer, idx)) if e.buffer.data in flat else e

        def visit_BufferStore(self, st: ir.BufferStore) -> ir.Stmt:  # noqa: N802
            idx = tuple(self.visit_expr(i) for i in st.indices)
            buf, at = self._at(st.buffer, idx)
            return ir.BufferStore(buf, self.visit_expr(st.value), at)

    from toolchain.tir import arith

    class _Simplify(StmtExprMutator):
        def visit_BufferLoad(self, e: ir.BufferLoad) -> ir.PrimExpr:  # noqa: N802
            return ir.BufferLoad(e.buffer, tuple(arith.simplify(i) for i in e.indices))

        def visit_BufferStore(self, st: ir.BufferStore) -> ir.Stmt:  # noqa: N802
            return ir.BufferStore(st.buffer, self.visit_expr(st.value),
                                  tuple(arith.simplify(i) for i in st.indices))

    out: ir.Stmt = _Simplify().visit_stmt(_Flat().visit_stmt(substitute(body.block.body,
                                                                         vmap)))
    for lp in reversed(loops):
        out = ir.For(fresh[lp.loop_var], lp.min, lp.extent, "serial", out)
    return out


def _one_block(text: str) -> str:
    """``text`` without blank lines (the bundle splits preludes into blocks at them)."""
    return "\n".join(ln for ln in text.strip("\n").splitlines() if ln.strip())


def get_spec(name: str) -> IntrinsicSpec:
    """The :class:`IntrinsicSpec` registered as ``name`` (loading its target if needed)."""
    if name not in _SPECS and "." in name:
        load_intrinsics(name.split(".", 1)[0])
    if name not in _SPECS:
        raise ScheduleError(f"no target intrinsic {name!r}; loaded: "
                            f"{', '.join(sorted(_SPECS)) or 'none'}")
    return _SPECS[name]


def _require(cond: bool, why: str = "unsupported operand strides") -> str:
    if not cond:
        raise ScheduleError(why)
    return ""


_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
_ENV.globals["require"] = _require


@functools.lru_cache(maxsize=256)
def _template(text: str) -> jinja2.Template:
    """An intrinsic's ``impl`` (or ``llvm_impl``) template, compiled once per text (jinja2
    compiles ``from_string`` anew every call: some 5 ms, paid by every specialised call
    of a kernel before)."""
    return _ENV.from_string(text)


def _strides(buf: ir.Buffer) -> list[int]:
    """The element strides of ``buf``: its own (a ``storage_align``-padded tile), else
    row-major ones of its constant shape."""
    if buf.strides and all(isinstance(s, ir.IntImm) for s in buf.strides):
        return [int(s.value) for s in buf.strides]
    dims = []
    for d in buf.shape:
        if not isinstance(d, ir.IntImm):
            raise ScheduleError(f"intrinsic operand {buf.name} has a symbolic shape "
                                f"{buf.shape}; tensorized operands need constant shapes")
        dims.append(int(d.value))
    out, acc = [], 1
    for d in reversed(dims):
        out.append(acc)
        acc *= d
    return out[::-1]


class _Specialise(StmtExprMutator):
    def __init__(self, ctype: dict[str, str], targets: tuple[str, ...] | None = None) -> None:
        self.ctype = ctype
        self.targets = targets
        self.defs: dict[str, CDefinition] = {}
        self.headers: list[str] = []
        self.helpers: list[_Helpers] = []
        self.flags: list[str] = []
        self.llvm_defs: dict[str, LLVMDefinition] = {}

    def _use(self, headers: tuple[str, ...], helpers: _Helpers | None) -> None:
        self.headers += [h for h in headers if h not in self.headers]
        if helpers is not None and helpers.text and \
                all(h.key != helpers.key for h in self.helpers):
            self.helpers.append(helpers)

    def visit_Call(self, e: ir.Call) -> ir.PrimExpr:  # noqa: N802 - visitor naming
        helper = _HELPERS.get(e.op)
        if helper is not None and (self.targets is None or helper.target in self.targets):
            self._use(helper.headers, helper)  # a helper called without an intrinsic
        llvm_helper = _LLVM_HELPERS.get(e.op)
        if llvm_helper is not None and (self.targets is None or llvm_helper[0] in self.targets):
            self.llvm_defs[e.op] = llvm_helper[1]
        spec = _BY_FUNCTION.get(e.op)
        if spec is None or (self.targets is not None and spec.target not in self.targets):
            return super().visit_Call(e)
        env: dict[str, object] = {f"ext_{k}": v for k, v in spec.extents.items()}
        params, loads = [], []
        for k, (opname, arg) in enumerate(zip(spec.operands, e.args, strict=True)):
            load = arg.args[0]
            loads.append(load)
            strides = _strides(load.buffer)
            for d, s in enumerate(strides):
                env[f"{opname}_s{d}"] = s
            # the strides of the dimensions the tile spans (its last ones: a buffer may have
            # more, e.g. a batch), ``A_t0`` for the tile's first
            rank = len(spec.tiles[k]) if k < len(spec.tiles) else 0
            if load.buffer.scope in REGISTER_SCOPES:
                # a lane's registers (mma_fragments): the tile is spread over the warp's
                # (warpgroup's) threads, not laid out in the buffer; its elements all
                # stand at the first register (private to the thread: no barrier or race
                # check concerns them)
                strides = [0] * rank
            for d, s in enumerate(strides[len(strides) - rank:] if rank else ()):
                env[f"{opname}_t{d}"] = s
            env[opname] = opname
            ctype = spec.types.get(opname) or self.ctype[load.buffer.dtype]
            # the inputs are only read (const: a kernel's read-only buffer passes as is)
            const = "const " if k < len(spec.operands) - 1 else ""
            params.append(f"{const}{ctype} *{opname}")
        # the name's hash leaves out the tile strides (``A_t0``): they follow from the
        # per-dimension ones, and specialised names stay what they were before them
        key = hashlib.sha1(repr(sorted((k, v) for k, v in env.items() if "_t" not in k
                                       or not k.split("_t")[-1].isdigit())).encode()
                           ).hexdigest()[:8]
        fname = f"{spec.function}_{key}"
        _SPECIALISED[fname] = (spec, {k: v for k, v in env.items() if "_t" in k
                                      and isinstance(v, int)})
        if fname not in self.defs:
            try:
                body = _template(spec.template).render(**env)
            except ScheduleError as err:
                raise ScheduleError(f"intrinsic {spec.name!r}: {err} (strides: "
                                    f"{ {k: v for k, v in env.items() if '_s' in k} })") from None
            lines = "\n".join("  " + ln for ln in body.splitlines() if ln.strip())
            self.defs[fname] = CDefinition(
                fname, f"{spec.qualifier} int32_t {fname}({', '.join(params)}) {{\n"
                       f"{lines}\n  return 0;\n}}")
            self._use(spec.headers, _Helpers(spec.target, spec.helpers, (), spec.helpers_key)
                      if spec.helpers else None)
            self.flags += [f for f in spec.cflags if f not in self.flags]
            if spec.llvm_template:
                self.llvm_defs[fname] = llvm_definition(spec, fname, env)
        return ir.Call(e.dtype, fname, list(e.args))


class _RegisteredFound(Exception):
    """Raised by :class:`_FindRegistered` at the first call it looks for."""


class _FindRegistered(StmtExprVisitor):
    """Walks what :func:`post_order_visit` walks, looking at calls only, and stops at the
    first one to a registered intrinsic, C helper or LLVM helper."""

    def visit_Call(self, e: ir.Call) -> None:
        if e.op in _BY_FUNCTION or e.op in _HELPERS or e.op in _LLVM_HELPERS:
            raise _RegisteredFound
        super().visit_Call(e)


def _calls_registered(body: ir.Stmt) -> bool:
    """Whether ``body`` calls a registered intrinsic, C helper or LLVM helper: the only
    calls :class:`_Specialise` acts on (one read-only walk, where the rewrite would
    rebuild the whole kernel to find none)."""
    try:
        _FindRegistered().visit_stmt(body)
    except _RegisteredFound:
        return True
    return False


def attach_intrinsics(func: ir.PrimFunc, targets: tuple[str, ...] | None = None,
                      target: Target | None = None) -> ir.PrimFunc:
    """Lowering pass (phase 1, built in: see :mod:`toolchain.tir.transform.pipeline`):
    specialise each tensorized call for its operand strides and record what its C needs.

    Before (after ``sch.tensorize(ii, "c-generic.fma_f32_4x4")``), a call with no
    definition::

        kiln_fma_f32_4x4(T.address_of(A[i_0 * 4, k_0 * 4]), T.address_of(B[..]),
                         T.address_of(C_local[0, 0]))

    After, the call names the definition for these strides::

        kiln_fma_f32_4x4_<hash>(T.address_of(A[i_0 * 4, k_0 * 4]), T.address_of(B[..]),
                                T.address_of(C_local[0, 0]))

    and ``func.attrs["c_support"]`` is a typed
    :class:`~toolchain.codegen.artifact.CSupport`: the ``static inline`` definition for
    these operand strides (a :class:`~toolchain.codegen.artifact.CDefinition` keyed by the
    specialised name), the headers it includes and the compiler flags it needs. A kernel
    that calls a function of a loaded target's ``c_helpers`` (e.g. ``kiln_cm_requantize``)
    gets that block once (keyed by the functions it defines), with or without intrinsic
    calls. ``target`` (what :func:`~toolchain.tir.transform.pipeline.lower` passes) has its
    intrinsics registered first; ``targets`` limits the pass to the intrinsics of those
    target names (None: all loaded). Running it again changes nothing; a kernel with
    neither is returned as is.
    """
    from toolchain.codegen.cstyle import CStyleRenderer

    if target is not None and (target.intrinsics or target.c_helpers.strip()):
        load_intrinsics(target)
    if not _calls_registered(func.body):
        return func  # what the rewrite below gives such a kernel, without rebuilding it
    m = _Specialise(CStyleRenderer.type_map, targets)
    body = m.visit_stmt(func.body)
    old = support_of(func)
    helpers = [CDefinition(h.key, h.text) for h in m.helpers if not old.has(h.key)]
    have = {d.key: d for d in llvm_support_of(func)}
    if not m.defs and not helpers and set(m.llvm_defs) <= set(have):
        return func
    new = CSupport(tuple(m.headers), tuple(helpers) + tuple(m.defs[k] for k in sorted(m.defs)),
                   tuple(m.flags))
    attrs = {**func.attrs, "c_support": old.merge(new)}
    if m.llvm_defs:
        attrs["llvm_support"] = tuple({**have, **m.llvm_defs}[k]
                                      for k in sorted({*have, *m.llvm_defs}))
    return ir.PrimFunc(func.params, body, func.name, attrs)


def llvm_definition(spec: IntrinsicSpec, fname: str, env: dict[str, object]
                     ) -> LLVMDefinition:
    """The ``llvm_impl`` of ``spec`` for these strides: a module defining
    ``i32 @fname(ptr %A, ptr %B, ...)`` (operands by name, strides as ``{{ A_s0 }}``,
    extents as ``{{ ext_k }}`` in ``env``), ``linkonce_odr`` and ``alwaysinline`` so it
    disappears into the kernel.

    >>> spec = get_spec(load_intrinsics("x86_64-avx512")[3])  # dot_u8i8_16x4: vpdpbusd
    >>> env = {"A_s0": 1, "B_s0": 4, "B_s1": 1, "C_s0": 1, "ext_j": 16, "ext_k": 4}
    >>> print(llvm_definition(spec, "f", env).text.splitlines()[0][:60])
    define linkonce_odr i32 @f(ptr noalias %A, ptr noalias %B, p
    """
    try:
        body = _template(spec.llvm_template).render(**env)
    except ScheduleError as err:
        raise ScheduleError(f"intrinsic {spec.name!r} (llvm_impl): {err}") from None
    params = ", ".join(f"ptr noalias %{op}" for op in spec.operands)
    lines = "\n".join("  " + ln.strip() if not ln.rstrip().endswith(":") else ln.strip()
                      for ln in body.splitlines() if ln.strip())
    return LLVMDefinition(fname, f"define linkonce_odr i32 @{fname}({params}) alwaysinline "
                                 f"nounwind {{\n{lines}\n}}\n")


def intrinsic_of_function(name: str) -> IntrinsicSpec | None:
    """The loaded intrinsic whose C function ``name`` is (or is a specialisation of:
    ``kiln_fma_f32_4x4_<hash>``), else None.

    >>> _ = load_intrinsics("c-generic")
    >>> intrinsic_of_function("kiln_fma_f32_4x4_0123abcd").name
    'c-generic.fma_f32_4x4'
    """
    spec = _BY_FUNCTION.get(name)
    if spec is None and "_" in name:
        spec = _BY_FUNCTION.get(name.rsplit("_", 1)[0])
    return spec


def intrinsic_flags(func: ir.PrimFunc) -> list[str]:
    """Compiler flags the intrinsics used in ``func`` need (e.g. ``-mavx512vnni``): those
    :func:`attach_intrinsics` recorded for a lowered function, else those of the
    intrinsics its calls name."""
    if "c_support" in func.attrs:
        return list(support_of(func).flags)
    found: list[str] = []

    class _Find(StmtExprMutator):
        def visit_Call(self, e: ir.Call) -> ir.PrimExpr:  # noqa: N802 - visitor naming
            spec = _BY_FUNCTION.get(e.op)
            if spec is not None:
                found.extend(f for f in spec.cflags if f not in found)
            return super().visit_Call(e)

    _Find().visit_stmt(func.body)
    return found
