"""Graph op → compute: build the tensor expressions of one :class:`~toolchain.graph.ir.Node`.

:func:`compute_for_node` returns ``(inputs, outputs)``: ``inputs`` are placeholders for
the node's run-time operands (in node-input order), ``outputs`` the tensors of the node's
outputs — together the argument list of ``te.create_prim_func``. :func:`node_compute`
also returns ``input_values``, the graph values the placeholders stand for.

Conventions:

* Shapes and attributes come from the node; operands that decide shapes or act as
  attributes (Reshape ``shape``, Slice ``starts``…, Reduce ``axes``, Pad ``pads``, Resize
  ``scales``/``sizes``, Clip ``min``/``max`` and Pad ``constant_value`` when constant)
  are read from ``Value.data`` at compile time and are not kernel inputs.
* Weights are kernel inputs like any other operand (their packing is a schedule matter).
* A rank-0 value is a ``(1,)`` buffer (same memory; the caller reshapes).
* Only direct algorithms are chosen here (e.g. Conv is ``conv2d_nchw``); Winograd and
  blocked layouts are picked by the default schedules, which call :mod:`toolchain.topi`.

A configuration without a compute (Conv in 3-D, Resize cubic, …) raises an
:class:`~toolchain.errors.UnsupportedError` that names the node.

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ir import Node, Value
    >>> x = Value("x", (2, 3), "float32"); y = Value("y", (2, 3), "float32")
    >>> ins, outs = compute_for_node(Node("Relu", "r0", [x], [y]))
    >>> [t.name for t in ins], [t.name for t in outs]
    (['x'], ['T_relu'])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from toolchain import te
from toolchain.codegen.names import TE_NAMES, sanitize
from toolchain.errors import InputError, UnsupportedError
from toolchain.graph.ir import Node, Value
from toolchain.graph.ops.nn_common import attrs_of
from toolchain.graph.ops.registry import const_input

ComputeFn = Callable[["Ctx"], list[te.Tensor]]
_COMPUTES: dict[str, ComputeFn] = {}


#: a compile-time transform of a constant operand (e.g. Winograd or NCHW[x]c packing)
PackFn = Callable[[np.ndarray], np.ndarray]


@dataclass
class NodeCompute:
    """The compute of one node: kernel inputs, outputs, the values behind the inputs, and
    for inputs that are packed at compile time, the numpy function that packs the value's
    data (``packs[k]`` applies to ``inputs[k]`` / ``input_values[k]``)."""

    inputs: list[te.Tensor]
    outputs: list[te.Tensor]
    input_values: list[Value]
    packs: dict[int, PackFn] = field(default_factory=dict)

    def feeds(self, arrays: Mapping[str, np.ndarray] | None = None) -> list[np.ndarray]:
        """The kernel's input arrays: each value's data (or ``arrays[value.name]``), packed
        where ``packs`` says so. A key of ``arrays`` that names no kernel input, or an
        array whose shape is not its value's, raises :class:`~toolchain.errors.InputError`
        (a misspelt name would otherwise leave the value's own data in its place)."""
        arrays = {} if arrays is None else arrays
        known = [v.name for v in self.input_values]
        unknown = sorted(set(arrays) - set(known))
        if unknown:
            raise InputError(f"feeds: no kernel input named {', '.join(map(repr, unknown))} "
                             f"(kernel inputs: {', '.join(known) or 'none'})")
        out = []
        for k, v in enumerate(self.input_values):
            data = arrays.get(v.name, v.data)
            if data is None:
                raise UnsupportedError(f"no data for kernel input {v.name!r}; pass it in "
                                       "arrays")
            data = np.asarray(data)
            if v.name in arrays and data.shape != tuple(v.shape) and not (
                    v.shape == () and data.shape == (1,)):
                raise InputError(f"feeds: kernel input {v.name!r} has shape {data.shape}, "
                                 f"expected {tuple(v.shape)}")
            out.append(self.packs[k](data) if k in self.packs else data)
        return out


@dataclass
class Ctx:
    """What a compute function sees: the node, its normalised attributes, and helpers
    that turn node inputs into placeholders or compile-time constants."""

    node: Node
    attrs: dict[str, Any]
    options: dict[str, Any] = field(default_factory=dict)
    _tensors: dict[int, te.Tensor] = field(default_factory=dict)
    _packs: dict[int, PackFn] = field(default_factory=dict)
    _derived: list[tuple[te.Tensor, Value]] = field(default_factory=list)

    def packed_tensor(self, i: int, pack: PackFn, what: str, dtype: str | None = None
                      ) -> te.Tensor:
        """Placeholder for constant input ``i`` packed at compile time by ``pack`` (into
        ``dtype`` where the packing widens it, e.g. int8 weights to int16)."""
        v = self.node.input(i)
        if v is None or v.data is None:
            raise self.unsupported(f"{what} needs input {i} to be a constant (it is packed at "
                                   "compile time)")
        packed = pack(np.asarray(v.data))
        self._tensors[i] = te.placeholder(packed.shape, dtype or v.dtype,
                                          sanitize(v.name, **TE_NAMES))
        self._packs[i] = pack
        return self._tensors[i]

    def derived_constant(self, suffix: str, data: np.ndarray) -> te.Tensor:
        """Placeholder for a constant the compute derives at compile time from the node's
        attributes (no node input holds it: e.g. a lookup table), named after the node
        (``<node>_<suffix>``); a kernel input after the node's own."""
        v = Value.constant(f"{self.node.name}_{suffix}", np.ascontiguousarray(data))
        t = te.placeholder(v.shape, v.dtype, sanitize(v.name, **TE_NAMES))
        self._derived.append((t, v))
        return t

    def tensor(self, i: int) -> te.Tensor:
        """Placeholder for node input ``i`` (a kernel input)."""
        if i not in self._tensors:
            v = self.node.input(i)
            if v is None:
                raise self.unsupported(f"input {i} is missing")
            self._tensors[i] = te.placeholder(v.shape or (1,), v.dtype,
                                              sanitize(v.name, **TE_NAMES))
        return self._tensors[i]

    def opt_tensor(self, i: int) -> te.Tensor | None:
        """Placeholder for optional input ``i``, or ``None`` when it is absent."""
        return None if self.node.input(i) is None else self.tensor(i)

    def const(self, i: int, what: str) -> np.ndarray | None:
        """Compile-time data of input ``i`` (``None`` when absent; raises when not constant)."""
        return const_input(self.node, i, what)

    def ints(self, i: int, what: str) -> list[int] | None:
        data = self.const(i, what)
        return None if data is None else [int(v) for v in np.asarray(data).reshape(-1)]

    def scalar_or_tensor(self, i: int) -> Any:
        """A scalar operand: its Python value when constant, else a (1,)-tensor input."""
        v = self.node.input(i)
        if v is None:
            return None
        if v.data is not None:
            return np.asarray(v.data).reshape(-1)[0].item()
        return self.tensor(i)

    def shape(self, i: int) -> tuple[int, ...]:
        v = self.node.input(i)
        assert v is not None
        return tuple(v.shape)

    def unsupported(self, msg: str) -> UnsupportedError:
        return UnsupportedError(f"{self.node.describe()}: {msg}")

    def ordered_inputs(self) -> tuple[list[te.Tensor], list[Value], dict[int, PackFn]]:
        idx = sorted(self._tensors)
        values = [self.node.inputs[i] for i in idx]
        packs = {k: self._packs[i] for k, i in enumerate(idx) if i in self._packs}
        return ([self._tensors[i] for i in idx] + [t for t, _ in self._derived],
                [v for v in values if v is not None] + [v for _, v in self._derived], packs)


def register(*ops: str) -> Callable[[ComputeFn], ComputeFn]:
    """Decorator for a compute defined outside the built-in tables (a plug-in, a test):
    ``@register("MyOp")`` makes ``fn(ctx) -> [outputs]`` the op's compute."""
    def deco(fn: ComputeFn) -> ComputeFn:
        _load()
        for op in ops:
            _COMPUTES[op] = fn
        return fn
    return deco


def unregister(op: str) -> ComputeFn | None:
    """Remove ``op``'s compute (an op added at run time, e.g. by a test); returns it."""
    _load()
    return _COMPUTES.pop(op, None)


def supported_ops() -> list[str]:
    """Every graph op with a compute definition."""
    _load()
    return sorted(_COMPUTES)


def computes() -> dict[str, ComputeFn]:
    """The built-in table: graph op -> compute, merged from the ``COMPUTES`` tables of the
    modules that define them (an op in two tables is an error, not an override).

    >>> computes()["Relu"].__name__, computes()["QConv"].__name__
    ('_unary', '_qconv')
    """
    from toolchain.topi import int8, layout, registry_nn, registry_ops

    table: dict[str, ComputeFn] = {}
    for module in (registry_nn, registry_ops, int8, layout):
        for op, fn in module.COMPUTES.items():
            if op in table:
                raise RuntimeError(f"op {op!r} has a compute in two tables "
                                   f"({table[op].__module__} and {module.__name__})")
            table[op] = fn
    return table


def _load() -> None:
    if not _COMPUTES:
        _COMPUTES.update(computes())


def node_compute(node: Node, **options: Any) -> NodeCompute:
    """The compute of ``node`` with the graph values behind its inputs.

    ``options`` pick among algorithms where an op has several (so far Conv:
    ``algorithm="direct"`` (default), ``"winograd2"`` / ``"winograd4"`` (3×3, stride 1,
    constant weights, transformed at compile time) or ``"nchwc"`` with
    ``block=(cb, ob)`` (data blocked in the compute, weights packed at compile time), or
    ``"im2col"`` (group 1: an explicit im2col GEMM over the flat output pixels, the
    tensor-core convolution's form, :mod:`toolchain.topi.nn.conv2d_gemm`; with
    ``pixel_multiple=16`` the pixels padded to a multiple of 16, ``window_multiple`` and
    ``channel_multiple`` the window and the output channels)).
    """
    _load()
    fn = _COMPUTES.get(node.op)
    if fn is None:
        raise UnsupportedError(f"{node.describe()}: op {node.op!r} has no compute definition "
                               f"in toolchain.topi (supported: {', '.join(sorted(_COMPUTES))})")
    attrs = attrs_of(node)
    ctx = Ctx(node, attrs, dict(options))
    outs = fn(ctx)
    ins, values, packs = ctx.ordered_inputs()
    if len(outs) != len(node.outputs):
        raise ctx.unsupported(f"the compute gives {len(outs)} outputs but the node has "
                              f"{len(node.outputs)}")
    fixed = []
    for t, v in zip(outs, node.outputs, strict=True):
        if isinstance(t.op, te.PlaceholderOp):  # identity-like: the kernel must copy
            src = t
            t = te.compute(src.shape, lambda *i, s=src: s[i], name="copy", tag="injective")
        want = tuple(v.shape) or (1,)
        got = tuple(int(d.value) for d in t.shape)
        if got != want or t.dtype != v.dtype:
            raise RuntimeError(f"{node.describe()}: compute output {t.name} is {t.dtype}"
                               f"{list(got)} but value {v.name!r} is {v.dtype}{list(want)} "
                               "(a bug in toolchain.topi)")
        fixed.append(t)
    return NodeCompute(ins, fixed, values, packs)


def compute_for_node(node: Node, **options: Any) -> tuple[list[te.Tensor], list[te.Tensor]]:
    """``(inputs, outputs)`` tensors of ``node``'s compute (see the module docstring;
    ``options`` as in :func:`node_compute`)."""
    nc = node_compute(node, **options)
    return nc.inputs, nc.outputs
