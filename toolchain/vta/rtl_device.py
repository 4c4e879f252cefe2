"""The RTL model as a C device: ``hw/rtl/sim/kiln_vta_rtl.cpp`` through the C driver.

:func:`run_rtl_device` runs a program on the Verilog RTL the way a bundle built with the RTL
device will: the C driver (``runtime_c/kiln_vta.c``) loads the program into the DRAM window
and calls the device, which clocks the Verilator model of ``vta_sim_top`` in the same process
(no cocotb, no files) while the DRAM model reads and writes the window itself.  The model is
built once per configuration into ``sim_build/rtl-device-<hash>/`` (verilated as a bundle
of that configuration verilates it, :func:`bundle_rtl_objects`, so the two share the build,
then linked with the driver into one shared library loaded with ctypes).

It returns ``(dram, counters)`` like :func:`toolchain.vta.rtl.run_rtl` (the same counter
names), and raises :class:`~toolchain.vta.cfsim.CFsimError` with the driver's error code on a
deadlock (the RTL's stall detector), a timeout or a malformed program.

Example::

    >>> from toolchain.vta.builder import ProgramBuilder
    >>> b = ProgramBuilder(); _ = b.finish()
    >>> run_rtl_device(b.build())[1]["cycles"] < 200        # doctest: +SKIP
    True
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

import numpy as np

from toolchain.errors import BuildError
from toolchain.vta.cfsim import RUNTIME, CFsimError, error_message, error_struct
from toolchain.vta.config import VTAConfig
from toolchain.vta.isa import INSN_BYTES
from toolchain.vta.program import Program, dram_image
from toolchain.vta.rtl import (
    COUNTERS,
    PIC_FLAGS,
    RTL_DIR,
    VERILATOR_MAKEFLAGS,
    build_root,
    params_svh,
    rtl_sources,
    verilator_env,
)

DEVICE_CPP = RTL_DIR / "sim" / "kiln_vta_rtl.cpp"
GLUE = Path(__file__).with_name("rtl_glue.c")

def _run(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> None:
    res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    log.write_text(" ".join(cmd) + "\n" + res.stdout + res.stderr)
    if res.returncode:
        raise BuildError(f"building the RTL device failed ({cmd[0]} exit {res.returncode}); "
                         f"see {log}:\n{(res.stdout + res.stderr)[-3000:]}")


def build_device(config: VTAConfig | None = None) -> Path:
    """Build (once per configuration and source) the shared library of the RTL device."""
    cfg = config or VTAConfig()
    svh = params_svh(cfg)
    files = [*rtl_sources(), DEVICE_CPP, DEVICE_CPP.with_suffix(".h"), GLUE,
             *(RUNTIME / n for n in ("kiln_vta.h", "kiln_vta.c"))]
    h = hashlib.sha256(svh.encode() + " ".join(MAKE_VERILATE).encode())
    for f in files:
        h.update(f.name.encode() + f.read_bytes())
    bdir = build_root() / f"rtl-device-{h.hexdigest()[:16]}"
    lib = bdir / "libkiln_vta_rtl.so"
    if lib.exists():
        return lib
    bdir.mkdir(parents=True, exist_ok=True)
    with open(bdir / ".lock", "w") as lock:  # one builder per directory (parallel pytest)
        fcntl.flock(lock, fcntl.LOCK_EX)
        if lib.exists():
            return lib
        # the model as a bundle carries it, verilated by the bundles' own build (shared
        # with every bundle of this configuration, and through ccache with `make DEVICE=rtl`)
        from toolchain.bundle.accel import rtl_files

        stage = bdir / "model"
        for name, text in {**rtl_files(cfg),
                           "runtime/kiln_vta.h": (RUNTIME / "kiln_vta.h").read_text()}.items():
            (stage / name).parent.mkdir(parents=True, exist_ok=True)
            (stage / name).write_text(text)
        link = bundle_rtl_objects(stage / "rtl")
        env = verilator_env()
        inc = [f"-I{RUNTIME}", f"-I{RTL_DIR / 'sim'}"]
        objs = []
        for src in (RUNTIME / "kiln_vta.c", GLUE):
            obj = bdir / f"{src.stem}.o"
            _run(["gcc", "-std=c99", "-O2", "-fPIC", "-Wall", "-Wextra", "-Werror", *inc, "-c",
                  str(src), "-o", str(obj)], bdir, env, bdir / f"{src.stem}.log")
            objs.append(str(obj))
        tmp = bdir / "lib.tmp.so"
        _run(["g++", "-shared", "-o", str(tmp), *objs, *link], bdir, env, bdir / "link.log")
        tmp.replace(lib)
    return lib


#: how a bundle's ``make DEVICE=rtl`` verilates its ``rtl/`` (``templates/bundle/Makefile.j2``
#: writes the same command; :func:`bundle_rtl_objects` runs it too, so the two compile the
#: same C++ with the same flags, relative to the bundle folder, and ccache shares the objects).
#: Verilator's own optimisation level is its default: ``-O3`` (``--inline-mult -1``, every
#: module instance inlined) made the model a third larger, 1.7 CPU s more to compile at
#: ``-O2`` and its simulation about 12 % slower (docs/testing.md)
MAKE_VERILATE = ("--cc", "--build", "-j", "2", "--x-assign", "0", "--x-initial", "0",
                 "-Wno-fatal", "--top-module", "vta_sim_top", "-Mdir", "build/rtl")


def verilate_command(root: str, sources: list[str], verilator: str = "verilator",
                     makeflags: str = VERILATOR_MAKEFLAGS) -> list[str]:
    """The Verilator command that builds a bundle's RTL device in the bundle folder ``root``
    (``sources``: the ``rtl/*.sv`` files, relative to it), as its Makefile runs it.

    Example::

        >>> cmd = verilate_command("/b", ["rtl/vta_pkg.sv"])
        >>> cmd[-3]
        '-I/b/runtime -I/b/rtl/sim -fPIC -fno-semantic-interposition'
        >>> cmd[-2:]
        ['rtl/vta_pkg.sv', '/b/rtl/sim/kiln_vta_rtl.cpp']
    """
    return [verilator, *MAKE_VERILATE, "-MAKEFLAGS", makeflags, "-Irtl", "-CFLAGS",
            f"-I{root}/runtime -I{root}/rtl/sim {PIC_FLAGS}", *sources,
            f"{root}/rtl/sim/{DEVICE_CPP.name}"]


def bundle_rtl_build_dir(rtl_dir: Path) -> tuple[Path, list[Path], list[str], list[str]]:
    """Where :func:`bundle_rtl_objects` builds the RTL of the bundle whose ``rtl/`` is
    ``rtl_dir`` (a folder keyed by the files' names and content and the Verilator command),
    the files, their paths in the bundle and the RTL sources among them (a clear error if
    one is missing)."""
    pkg = rtl_dir / "vta_pkg.sv"
    svs = [pkg, *sorted(p for p in rtl_dir.glob("*.sv") if p != pkg),
           *sorted((rtl_dir / "sim").glob("*.sv"))]
    cpp = rtl_dir / "sim" / DEVICE_CPP.name
    runtime = rtl_dir.parent / "runtime"
    files = [*svs, rtl_dir / "vta_params.svh", cpp, cpp.with_suffix(".h"),
             runtime / "kiln_vta.h"]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise BuildError(f"the bundle's RTL is incomplete: missing {', '.join(missing)} "
                         "(recompile the bundle with kiln compile --target vta)")
    rel = [f.relative_to(rtl_dir.parent).as_posix() for f in files]
    sources = rel[:len(svs)]
    h = hashlib.sha256(" ".join(verilate_command("", sources)).encode())
    for f, name in zip(files, rel, strict=True):
        h.update(name.encode() + b"\0" + f.read_bytes())
    return build_root() / f"bundle-rtl-{h.hexdigest()[:16]}", files, rel, sources


def bundle_rtl_objects(rtl_dir: Path) -> list[str]:
    """Verilate a bundle's ``rtl/`` (its ``*.sv``, ``vta_params.svh`` and the C++ device
    ``sim/kiln_vta_rtl.cpp``) once per content into position-independent objects; the link
    arguments that add the RTL device to a shared library of the bundle (link with ``g++``).

    The build runs in ``sim_build/bundle-rtl-<hash>/``, keyed by the files and the command,
    so every bundle with the same RTL shares it; there the files are laid out as in the
    bundle and verilated with its Makefile's command (:func:`verilate_command`), with
    ``CCACHE_BASEDIR`` at the folder, so with ccache (``OBJCACHE``) a bundle's ``make
    DEVICE=rtl`` and this build reuse each other's compiled objects.

    Example::

        >>> args = bundle_rtl_objects(Path("bundle/rtl"))      # doctest: +SKIP
        >>> args[0].endswith("kiln_vta_rtl.o")                  # doctest: +SKIP
        True
    """
    bdir, files, rel, sources = bundle_rtl_build_dir(rtl_dir)
    obj = bdir / "build" / "rtl"
    args = [str(obj / f"{DEVICE_CPP.stem}.o"), "-Wl,--whole-archive",
            str(obj / "Vvta_sim_top__ALL.a"), "-Wl,--no-whole-archive",
            str(obj / "libverilated.a"), "-lpthread"]
    done = bdir / "done"
    if done.exists():
        return args
    bdir.mkdir(parents=True, exist_ok=True)
    with open(bdir / ".lock", "w") as lock:  # one builder per directory (parallel pytest)
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            for f, name in zip(files, rel, strict=True):  # the bundle's layout
                (bdir / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(f, bdir / name)
            (bdir / "build").mkdir(exist_ok=True)  # as the Makefile's `| build`
            env = {**verilator_env(), "CCACHE_BASEDIR": str(bdir)}
            _run(verilate_command(str(bdir), sources), bdir, env,
                 bdir / "verilator.log")
            done.write_text("ok\n")
    return args


@lru_cache(maxsize=4)
def _library(config: VTAConfig) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(build_device(config)))
    lib.kiln_vta_rtl_py_run.restype = ctypes.c_int
    lib.kiln_vta_rtl_py_run.argtypes = [
        ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t,
        ctypes.c_size_t, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p]
    return lib


def run_rtl_device(program: Program, dram: np.ndarray | None = None,
                   config: VTAConfig | None = None, *, latency: int | None = None,
                   bandwidth: float | None = None,
                   timeout_cycles: int = 50_000_000) -> tuple[np.ndarray, dict[str, int]]:
    """Run ``program`` on the RTL through the C driver; arguments and result as
    :func:`toolchain.vta.rtl.run_rtl`."""
    cfg = config or program.config
    image = dram_image(program.dram if dram is None else dram)
    insns = program.insn_bytes
    addr = (len(image) + INSN_BYTES - 1) // INSN_BYTES * INSN_BYTES
    window = np.zeros(addr + len(insns) + 64, np.uint8)
    skip = -window.ctypes.data % 64
    window = window[skip:skip + addr + len(insns)]
    window[:len(image)] = image
    window[addr:] = np.frombuffer(insns, np.uint8)
    lat = cfg.latency_cycles if latency is None else int(latency)
    bw16 = round(16 * (cfg.bytes_per_cycle if bandwidth is None else float(bandwidth)))
    hw = np.zeros(len(COUNTERS), np.uint64)
    err = error_struct()
    rc = _library(cfg).kiln_vta_rtl_py_run(lat, bw16, timeout_cycles, window.ctypes.data,
                                           len(window), addr, len(program.insns),
                                           hw.ctypes.data, ctypes.byref(err))
    if rc != 0:
        raise CFsimError(error_message(rc, err, program.insns, len(image), cfg), rc,
                         None if err.insn == 0xFFFFFFFF else int(err.insn))
    c = dict(zip(COUNTERS, (int(v) for v in hw), strict=True))
    bus = cfg.bus_width_bits // 8
    counters = {"cycles": c["cycles"], "gemm_cycles": c["gemm"], "alu_cycles": c["alu"],
                "load_busy": c["load_busy"], "compute_busy": c["compute_busy"],
                "store_busy": c["store_busy"], "load_wait": c["load_wait"],
                "compute_wait": c["compute_wait"], "store_wait": c["store_wait"],
                "dram_rd_bytes": c["rd_beats"] * bus, "dram_wr_bytes": c["wr_beats"] * bus}
    return window[:len(image)].copy(), counters
