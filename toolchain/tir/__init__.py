"""The loop IR (TensorIR style): nodes in :mod:`.ir`, visitors in :mod:`.functor`,
printing in :mod:`.printer`, integer arithmetic in :mod:`.arith`, the interactive
schedule in :mod:`.schedule` and a reference interpreter in :mod:`.interpreter`.
"""

from toolchain.tir.ir import *  # noqa: F403
from toolchain.tir.ir import __doc__ as _ir_doc  # noqa: F401
