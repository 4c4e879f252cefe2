"""Flatten multi-dimensional buffers to 1-D: ``flatten_buffer``."""

from __future__ import annotations

from toolchain.tir import arith, ir
from toolchain.tir.dtype import bits_of
from toolchain.tir.functor import StmtExprMutator


def swizzled_column(row: ir.PrimExpr, col: ir.PrimExpr, width: int) -> ir.PrimExpr:
    """The stored column of element ``(row, col)`` of a row of ``width`` elements (128
    bytes) under the 128-byte swizzle: its 16-byte chunk ``col // (width / 8)`` XORed
    with ``row % 8``, the position within the chunk kept. TIR has no bitwise operators,
    so the 3-bit XOR is written with ``//``, ``%``, ``+`` and ``*`` (bit by bit, the sum
    of the two bits mod 2), which every pass, the interpreter and both renderers handle.

    >>> [swizzled_column(ir.IntImm(3), ir.IntImm(8 * k + 1), 64).value for k in range(8)]
    [25, 17, 9, 1, 57, 49, 41, 33]
    """
    per = width // 8  # elements of a 16-byte chunk
    chunk, rr = col // per, row % 8
    xor: ir.PrimExpr = ir.IntImm(0, col.dtype)
    for bit in (1, 2, 4):
        xor = xor + (chunk // bit + rr // bit) % 2 * bit
    return arith.simplify(xor * per + col % per)


def buffer_strides(buf: ir.Buffer) -> tuple[ir.PrimExpr, ...]:
    """The buffer's strides: its own, or compact row-major ones."""
    if buf.strides:
        return buf.strides
    out: list[ir.PrimExpr] = []
    stride: ir.PrimExpr = ir.IntImm(1)
    for dim in reversed(buf.shape):
        out.append(stride)
        stride = arith.simplify(stride * dim)
    return tuple(reversed(out))


def flat_size(buf: ir.Buffer) -> ir.PrimExpr:
    """Number of elements the flattened buffer spans (padding of strides included; a
    ``storage_align``-padded buffer keeps its last row's padding too, so copies of it laid
    end to end -- a double buffer's halves -- start as aligned as its rows do)."""
    if not buf.shape:
        return ir.IntImm(1)
    if buf.dim_align and buf.strides:
        return arith.simplify(buf.shape[0] * buf.strides[0])
    size: ir.PrimExpr = ir.IntImm(1)
    for dim, stride in zip(buf.shape, buffer_strides(buf), strict=True):
        size = size + (dim - 1) * stride
    return arith.simplify(size)


class _Flatten(StmtExprMutator):
    def __init__(self) -> None:
        self.flat: dict[ir.Buffer, ir.Buffer] = {}
        #: each N-d buffer's strides, worked out once (not once per access)
        self.strides: dict[ir.Buffer, tuple[ir.PrimExpr, ...]] = {}

    def flat_buffer(self, b: ir.Buffer) -> ir.Buffer:
        if b.ndim == 1 and not b.strides:
            return b
        if b not in self.flat:
            self.flat[b] = ir.Buffer(b.name, (flat_size(b),), b.dtype, b.scope, (), b.align,
                                     None, b.data)
        return self.flat[b]

    def flat_index(self, b: ir.Buffer, indices: tuple[ir.PrimExpr, ...]) -> tuple:
        if b.ndim == 1 and not b.strides:
            return indices
        if not indices:
            return (ir.IntImm(0),)
        if b.swizzle:
            indices = (*indices[:-1], swizzled_column(indices[-2], indices[-1],
                                                      b.swizzle * 8 // bits_of(b.dtype)))
        idx: ir.PrimExpr | None = None
        strides = self.strides.get(b)
        if strides is None:
            strides = self.strides[b] = buffer_strides(b)
        for i, s in zip(indices, strides, strict=True):
            term = i if ir.is_const_int(s, 1) else i * s
            idx = term if idx is None else idx + term
        return (arith.simplify(idx),)

    def visit_BufferLoad(self, e: ir.BufferLoad) -> ir.PrimExpr:
        idx = tuple([self.visit_expr(i) for i in e.indices])
        return ir.BufferLoad(self.flat_buffer(e.buffer), self.flat_index(e.buffer, idx))

    def visit_BufferStore(self, s: ir.BufferStore) -> ir.Stmt:
        idx = tuple([self.visit_expr(i) for i in s.indices])
        return ir.BufferStore(self.flat_buffer(s.buffer), self.visit_expr(s.value),
                              self.flat_index(s.buffer, idx))

    def visit_Allocate(self, s: ir.Allocate) -> ir.Stmt:
        return ir.Allocate(self.flat_buffer(s.buffer), self.visit_stmt(s.body))


def flatten_buffer(func: ir.PrimFunc) -> ir.PrimFunc:
    """Turn every N-d buffer access into a 1-D access using the buffer's strides.

    Parameters become 1-D buffers too (same ``data`` pointer); :func:`toolchain.build`
    checks arguments against the function before lowering. Run after block lowering.

    Before::

        C = T.allocate((16, 16), "float32", scope="local")
        for i, j in T.grid(16, 16):
            C[i, j] = A[i, j] * T.float32(2.0)

    After (``A`` is now ``T.Buffer((256,), "float32")``)::

        C = T.allocate((256,), "float32", scope="local")
        for i, j in T.grid(16, 16):
            C[i * 16 + j] = A[i * 16 + j] * T.float32(2.0)
    """
    fl = _Flatten()
    body = fl.visit_stmt(func.body)
    params = tuple(fl.flat_buffer(p) if isinstance(p, ir.Buffer) else p for p in func.params)
    return ir.PrimFunc(params, body, func.name, func.attrs)
