"""Lowering passes (each ``PrimFunc -> PrimFunc``) and the phased pipeline :func:`lower`.

>>> from toolchain import te
>>> from toolchain.tir.transform import lower
>>> A = te.placeholder((16, 16), name="A")
>>> B = te.compute((16, 16), lambda i, j: A[i, j] * 2.0, name="B")
>>> print(lower(te.create_prim_func([A, B])))  # doctest: +NORMALIZE_WHITESPACE
@T.prim_func
def main(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
    for i, j in T.grid(16, 16):
        B[i * 16 + j] = A[i * 16 + j] * T.float32(2.0)
"""

from toolchain.tir.transform.compact_buffer import compact_buffer_allocation
from toolchain.tir.transform.flatten_buffer import flatten_buffer
from toolchain.tir.transform.inject_barriers import inject_barriers
from toolchain.tir.transform.inject_virtual_thread import inject_virtual_thread
from toolchain.tir.transform.lower_blocks import lower_blocks, lower_init_block
from toolchain.tir.transform.partition_loop import PARTITION, partition_loops
from toolchain.tir.transform.pipeline import PHASES, Pass, lower
from toolchain.tir.transform.remove_noop import remove_noop
from toolchain.tir.transform.simplify import simplify
from toolchain.tir.transform.storage_rewrite import storage_rewrite
from toolchain.tir.transform.unroll_loop import unroll_loop
from toolchain.tir.transform.vectorize_loop import vectorize_loop

__all__ = [
    "PARTITION", "PHASES", "Pass", "compact_buffer_allocation", "flatten_buffer",
    "inject_barriers", "inject_virtual_thread", "lower", "lower_blocks", "lower_init_block",
    "partition_loops", "remove_noop", "simplify", "storage_rewrite", "unroll_loop",
    "vectorize_loop",
]
