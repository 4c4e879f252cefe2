"""The op registry (see :mod:`toolchain.graph.ops.registry`).

Op modules group ops by family; each lists its op definitions in ``OPS``, and the op table
(:func:`~toolchain.graph.ops.registry.builtin_ops`) registers them all on the registry's
first use — importing a module registers nothing.
"""

from toolchain.graph.ops.registry import (
    REQUIRED,
    Attr,
    OpDef,
    PatternKind,
    all_ops,
    builtin_ops,
    get_op,
    has_op,
    register,
    unregister,
)

__all__ = [
    "REQUIRED", "Attr", "OpDef", "PatternKind", "all_ops", "builtin_ops", "get_op", "has_op",
    "register", "unregister",
]
