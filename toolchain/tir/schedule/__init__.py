"""The interactive schedule: :class:`Schedule`, handles, traces and tensor intrinsics.

``Schedule`` is the user-facing front; the primitives are functions of the
:class:`ScheduleState` it holds (``sch.state``), which owns the function being scheduled.

>>> from toolchain import te
>>> from toolchain.tir.schedule import Schedule
>>> A = te.placeholder((64,), name="A")
>>> B = te.compute((64,), lambda i: A[i] + 1.0, name="B")
>>> sch = Schedule(te.create_prim_func([A, B]))
>>> (i,) = sch.get_loops(sch.get_block("B"))
>>> sch.parallel(i)
"""

from toolchain.errors import ScheduleError
from toolchain.tir.schedule.handles import BlockRV, LoopRV
from toolchain.tir.schedule.schedule import Schedule
from toolchain.tir.schedule.state import ScheduleState
from toolchain.tir.schedule.tensorize import TensorIntrin
from toolchain.tir.schedule.trace import Instruction, Trace

__all__ = ["BlockRV", "Instruction", "LoopRV", "Schedule", "ScheduleError", "ScheduleState",
           "TensorIntrin", "Trace"]
