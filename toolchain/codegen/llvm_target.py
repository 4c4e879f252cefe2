"""LLVM machines for Kiln targets: triple, CPU and features from the descriptor, the O3 (or
O2) pipeline, object code.

A descriptor says what LLVM should compile for under its ``llvm:`` key (validated by
:mod:`toolchain.target`)::

    llvm: {triple: thumbv7em-unknown-none-eabihf, cpu: cortex-m4, fast_math: [contract]}

Without it, a CPU target compiles for the host's triple with the ``generic`` CPU (portable
code, like ``c-generic``'s C); the target ``"host"`` (``build(..., target="c")``) gets the
host's CPU name and features (``-march=native``). ``fast_math`` lists the LLVM fast-math
flags every floating-point instruction may carry; the default is ``contract`` alone (a
multiply and an add may fuse into an FMA), which is what GCC does for the C backend's GNU C
(``-ffp-contract=fast``). ``reassoc``, ``nnan`` and the others change results and are only
used where the descriptor lists them.

>>> from toolchain.target import load_target
>>> m = machine_for(load_target("cortex-m4"))
>>> m.triple, m.cpu, m.fast_math
('thumbv7em-unknown-none-eabihf', 'cortex-m4', ('contract',))
>>> m.loop_unroll, m.opt_level
('all', 3)
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolchain.errors import BuildError, GeneratedCodeError, TargetError
from toolchain.target import Target

#: LLVM fast-math flags a descriptor may list (llvmlite's spelling)
FAST_MATH_FLAGS = ("contract", "reassoc", "nnan", "ninf", "nsz", "arcp", "afn", "fast")
#: used when the descriptor lists none: GCC's default for GNU C
DEFAULT_FAST_MATH = ("contract",)
#: the optimisation pipeline :func:`optimize` runs: LLVM's default pipeline at the
#: machine's ``opt_level``, with the loop and SLP vectorizers (part of the JIT's object
#: cache key, with the level)
PIPELINE = "default+vectorize"
#: values of a descriptor's ``llvm.opt_level``: 3 (the default, O3 as clang runs it) or 2
#: (O2 with both vectorizers, as clang -O2: less unrolling and fewer passes; the x86
#: descriptors' choice, docs/llvm.md "Build time")
OPT_LEVELS = (2, 3)
#: values of a descriptor's ``llvm.loop_unroll``: LLVM's unrollers on every loop (``all``,
#: the default: O3 as clang runs it), or only on the loops the schedule unrolled
#: (``scheduled``: ``llvm.loop.unroll.full/count`` metadata) and those the vectorizer
#: interleaves; a kernel that links tensor-intrinsic or helper bodies gets ``all``
LOOP_UNROLL = ("all", "scheduled")


@functools.cache
def llvm_binding() -> Any:
    """``llvmlite.binding``, with every target and asm printer registered once (llvmlite
    0.50 refuses the old ``initialize()``)."""
    try:
        import llvmlite.binding as llvm
    except ImportError:  # pragma: no cover - llvmlite is a dependency
        raise BuildError("the LLVM backend needs llvmlite (pip install llvmlite)") from None
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    # inline assembly in an llvm_impl is parsed by the target's assembler when the object
    # is emitted; llvmlite registers only the host's (see optimize)
    llvm.initialize_native_asmparser()
    return llvm


@dataclass(frozen=True)
class LLVMMachine:
    """What LLVM compiles for: ``triple``, ``cpu``, ``features`` (``+avx2,-avx512f``), the
    fast-math flags allowed, and whether code runs in this process (``host``)."""

    triple: str
    cpu: str
    features: str
    fast_math: tuple[str, ...]
    #: vector width in bits the schedules chose (for information; LLVM picks its own)
    vector_bits: int | None = None
    #: which loops LLVM may unroll (:data:`LOOP_UNROLL`)
    loop_unroll: str = "all"
    #: the level of LLVM's optimisation pipeline (:data:`OPT_LEVELS`)
    opt_level: int = 3

    def key(self) -> str:
        """The part of an object cache key that names the machine."""
        llvm = llvm_binding()
        return "|".join((self.triple, self.cpu, self.features, ",".join(self.fast_math),
                         self.loop_unroll, f"O{self.opt_level}",
                         ".".join(map(str, llvm.llvm_version_info))))

    def target_machine(self, jit: bool = False) -> Any:
        """An llvmlite ``TargetMachine`` at O3 (position-independent code)."""
        llvm = llvm_binding()
        try:
            t = llvm.Target.from_triple(self.triple)
        except RuntimeError as e:
            raise TargetError(f"LLVM has no target for triple {self.triple!r}: {e}") from None
        return t.create_target_machine(cpu=self.cpu, features=self.features, opt=3,
                                       reloc="pic", codemodel="jitdefault" if jit else
                                       "default", jit=jit)


def host_machine() -> LLVMMachine:
    """This machine: its triple, CPU name and features (``-march=native``)."""
    llvm = llvm_binding()
    return LLVMMachine(llvm.get_process_triple(), llvm.get_host_cpu_name(),
                       llvm.get_host_cpu_features().flatten(), DEFAULT_FAST_MATH)


def machine_for(target: Target) -> LLVMMachine:
    """The :class:`LLVMMachine` of a CPU target descriptor (see the module docstring);
    the host target (``name == "host"``) is :func:`host_machine`."""
    if target.kind not in ("c", "llvm"):
        raise TargetError(f"the LLVM backend compiles for CPU targets; {target.name!r} has "
                          f"kind {target.kind!r}")
    if target.name == "host":
        return host_machine()
    spec = dict(target.llvm)
    fm = tuple(spec.get("fast_math", DEFAULT_FAST_MATH))
    triple = spec.get("triple") or llvm_binding().get_process_triple()
    return LLVMMachine(triple, spec.get("cpu", "generic"), ",".join(spec.get("features", ())),
                       fm, target.vector_width_bits, spec.get("loop_unroll", "all"),
                       spec.get("opt_level", 3))


@functools.lru_cache(maxsize=16)
def shared_target_machine(machine: LLVMMachine, jit: bool = False) -> Any:
    """One :meth:`LLVMMachine.target_machine` per machine and process, for :func:`optimize`
    and :func:`emit_object`: LLVM sets a target machine's subtarget (instruction, register
    and scheduling tables) up when it is first used, ~0.5 ms a kernel when every kernel
    made its own; the objects are the same bytes (a target machine keeps no state from
    one module to the next). Not for ``create_mcjit_compiler``, which takes ownership of
    the one it is given."""
    return machine.target_machine(jit=jit)


def optimize(module_ir: str, machine: LLVMMachine, jit: bool = False,
             extra: Sequence[str] = ()) -> Any:
    """Parse and verify LLVM IR text (and link in the modules ``extra``: the definitions of
    functions it calls), run the optimisation pipeline for ``machine`` (O3, or O2 where
    its ``opt_level`` says so; both vectorizers either way); returns the llvmlite
    ``ModuleRef`` and its ``TargetMachine`` (:func:`shared_target_machine`)."""
    with quiet_remarks():
        return _optimize(module_ir, machine, jit, extra)


def _optimize(module_ir: str, machine: LLVMMachine, jit: bool,
              extra: Sequence[str]) -> Any:
    """:func:`optimize` without :func:`quiet_remarks` (its caller's)."""
    llvm = llvm_binding()
    tm = shared_target_machine(machine, jit)
    try:
        mod = llvm.parse_assembly(module_ir)
        mod.verify()
    except RuntimeError as e:
        raise GeneratedCodeError(f"LLVM rejected the generated IR (a Kiln bug; please report "
                                 f"it with the IR below):\n{e}\n{module_ir}") from None
    native = machine.triple.split("-")[0] == llvm.get_process_triple().split("-")[0]
    for text in extra:
        try:
            other = llvm.parse_assembly(text)
            other.verify()
        except RuntimeError as e:
            raise BuildError(f"LLVM rejected a tensor intrinsic's llvm_impl (check the "
                             f"target descriptor):\n{e}\n{text}") from None
        # inline assembly is spelt with the keyword ``asm``: a text without it has none
        asm = [] if native or "asm" not in text else uses_inline_asm(other)
        if asm:
            # LLVM would abort the whole process when it emits the object
            raise BuildError(f"the llvm_impl (or llvm_helpers entry) defining "
                             f"{', '.join(asm)} uses inline assembly, which llvmlite cannot "
                             f"assemble for {machine.triple} (it registers the host's "
                             "assembler only); write it with LLVM intrinsics (llvm.arm.smlad, "
                             "llvm.arm.sxtb16, ...) instead")
        mod.link_in(other)
    mod.triple = machine.triple
    mod.data_layout = str(tm.target_data)
    pto = llvm.create_pipeline_tuning_options(speed_level=machine.opt_level)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    # loop_unroll: scheduled runs LLVM's unrollers "only when forced": on the loops whose
    # metadata asks for it (the schedule's unrolled loops, see LLVMCodegen) and the ones
    # the vectorizer interleaves. O3 is then ~1.7x faster on the x86 convolutions, but
    # the Winograd ones and the max pool run 10-25% slower and the Cortex-M bundles
    # execute 10-50% more instructions, so no shipped descriptor asks for it (docs/llvm.md,
    # "Build time"). A kernel that links tensor-intrinsic or helper bodies (``extra``)
    # keeps LLVM's unrolling anyway: their loops are the descriptor's, which no schedule
    # marks (int8 DS-CNN ran 1.4x slower without)
    pto.loop_unrolling = machine.loop_unroll == "all" or bool(extra)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod, tm


def uses_inline_asm(module: Any) -> list[str]:
    """The functions of a parsed llvmlite module that call inline assembly."""
    kind = llvm_binding().ValueKind.inline_asm
    return [fn.name for fn in module.functions
            if any(ins.opcode == "call" and list(ins.operands)[-1].value_kind == kind
                   for block in fn.blocks for ins in block.instructions)]


@contextlib.contextmanager
def quiet_remarks() -> Iterator[None]:
    """LLVM prints its optimisation remarks ("loop not vectorized: ...", about the hints
    Kiln's loop metadata gives) straight to the process's stderr: keep them out of the
    user's terminal, and pass on anything else LLVM prints."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as f:
        os.dup2(f.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            f.seek(0)
            text = f.read().decode(errors="replace")
            rest = [line for line in text.splitlines() if line.strip() and
                    "loop not vectorized" not in line and not line.startswith("remark:")]
            if rest:  # also when the body raised (a parse error names no line LLVM printed)
                sys.stderr.write("\n".join(rest) + "\n")


def emit_object(module_ir: str, machine: LLVMMachine, jit: bool = False,
                extra: Sequence[str] = ()) -> bytes:
    """Object code (ELF for the machine's triple) of LLVM IR text (with the modules
    ``extra`` linked in), optimized at O3."""
    with quiet_remarks():  # once for both: optimisation and emission
        mod, tm = _optimize(module_ir, machine, jit, extra)
        return bytes(tm.emit_object(mod))


def object_key(module_ir: str, machine: LLVMMachine, jit: bool = False,
               extra: Sequence[str] = ()) -> str:
    """The content hash naming :func:`emit_object`'s result: the IR text, the linked
    modules, the machine (:meth:`LLVMMachine.key`: triple, CPU, features, fast-math flags,
    unrolling, level, LLVM version), the pipeline, llvmlite's version and whether the
    object is for the JIT (its code model differs)."""
    import llvmlite

    parts = [module_ir, *extra, machine.key(), PIPELINE, llvmlite.__version__,
             "jit" if jit else "object"]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def cached_object(module_ir: str, machine: LLVMMachine, cache: Path, name: str,
                  extra: Sequence[str] = ()) -> bytes:
    r""":func:`emit_object` (not for the JIT) through the build cache ``cache``: the object
    is kept as ``llvm-<name>-<hash>.o`` (:func:`object_key`), so compiling a kernel again
    (the same model compiled again, into another folder or after an edit elsewhere) parses
    no IR and runs no pass; the bytes are those :func:`emit_object` made.

    >>> import tempfile
    >>> from toolchain.target import load_target
    >>> m = machine_for(load_target("cortex-m4"))
    >>> text = "define i32 @f(i32 %x) {\n  %y = add i32 %x, 1\n  ret i32 %y\n}\n"
    >>> with tempfile.TemporaryDirectory() as d:
    ...     first = cached_object(text, m, Path(d), "f")
    ...     again = cached_object(text, m, Path(d), "f")
    ...     files = [p.name[:7] for p in Path(d).iterdir()]
    >>> first == again == emit_object(text, m), files
    (True, ['llvm-f-'])
    """
    from toolchain.runtime.cache import touch, trim

    path = cache / f"llvm-{name}-{object_key(module_ir, machine, extra=extra)[:24]}.o"
    if path.exists():
        touch(path)
        return path.read_bytes()
    obj = emit_object(module_ir, machine, extra=extra)
    tmp = None
    try:  # a cache that cannot be written (full disk, read-only) only costs the next compile
        fd, tmp = tempfile.mkstemp(suffix=".o", dir=cache)
        with os.fdopen(fd, "wb") as f:
            f.write(obj)
        os.replace(tmp, path)
        trim(path)
    except OSError:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
    return obj


__all__ = ["DEFAULT_FAST_MATH", "FAST_MATH_FLAGS", "LOOP_UNROLL", "OPT_LEVELS", "PIPELINE",
           "LLVMMachine", "cached_object",
           "emit_object", "host_machine", "llvm_binding", "machine_for", "object_key",
           "optimize", "quiet_remarks", "shared_target_machine", "uses_inline_asm"]
