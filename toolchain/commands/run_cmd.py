"""``kiln run``: run a model on inputs from an ``.npz`` file.

``kiln run MODEL.onnx`` runs the numpy reference executor (Kiln's oracle); ``kiln run DIR``
builds the bundle in ``DIR`` (written by ``kiln compile``) on this host, runs it, and with
``--check`` compares it with the reference executor.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from toolchain.commands._model_args import add_model_arguments, input_shapes
from toolchain.errors import InputError, ModelError, OptionError
from toolchain.frontend.onnx import dynamic_inputs, from_onnx
from toolchain.graph.reference import run_graph

HELP = ("run an ONNX model (numpy reference executor) or a compiled bundle directory on "
        "inputs from an .npz file")

EPILOG = """\
examples:
  python -c "import numpy as np; np.savez('in.npz', input=np.zeros((1, 1, 28, 28), np.float32))"
  kiln run model.onnx --inputs in.npz                  # print a summary of each output
  kiln run model.onnx --inputs in.npz --outputs out.npz
  kiln run model.onnx --inputs in.npz --input-shape input=1,3,96,96

  kiln run build/model --inputs in.npz --check        # a bundle from `kiln compile`
  kiln run build/net_vta --inputs in.npz --device rtl # accelerator layers on the RTL

With a bundle directory, the bundle is built for this host (cached), run once, and with
--check its outputs are compared with the reference executor on the model it was compiled
from: per output the max abs error and the max rel error (max abs / max |reference|).
A bundle compiled for an accelerator target (--target vta) also prints one line per
accelerator layer with the counters of its run: on the C functional simulator (--device
fsim, the default) instructions, GEMM and ALU steps, MACs and DMA bytes; on the Verilog RTL
(--device rtl, built by Verilator once per bundle) cycles, GEMM cycles and utilisation
(GEMM cycles / cycles), engine busy cycles and DRAM bytes, then the driver's counters
(counted from each layer's program: instructions, MACs, DMA bytes).
Exit status 1 when an output is above --tolerance (the bundle disagrees with the oracle:
a Kiln bug), 2 for a user error, 0 otherwise.

The .npz keys are the model's input names (see `kiln inspect MODEL.onnx`); the arrays must
have exactly the dtype and shape the model expects (no implicit conversion).  Dynamic
dimensions (a symbolic batch) take their size from the arrays unless --input-shape gives
one.  --outputs writes the outputs keyed by the model's output names.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    add_model_arguments(parser)
    for action in parser._actions:
        if action.dest == "model":
            action.metavar = "MODEL.onnx|DIR"
            action.help = "the ONNX model file, or a bundle directory written by kiln compile"
    parser.add_argument("--inputs", required=True, metavar="IN.npz",
                        help="input arrays keyed by the model's input names (np.savez)")
    parser.add_argument("--outputs", metavar="OUT.npz",
                        help="write the outputs here, keyed by output name "
                             "(default: print a summary)")
    parser.add_argument("--check", action="store_true",
                        help="bundle only: compare with the reference executor and print "
                             "the max abs / rel error per output")
    parser.add_argument("--tolerance", type=float, default=None, metavar="REL",
                        help="bundle --check: largest accepted max rel error (default 1e-4; "
                             "at least 2e-3 for float16 outputs and --precision fp16 "
                             "bundles)")
    parser.add_argument("--threads", type=int, metavar="N",
                        help="bundle only: run the parallel kernels on N threads (default: "
                             "the target's cores; see kiln compile --cores)")
    parser.add_argument("--device", choices=("fsim", "rtl"), default="fsim",
                        help="accelerator bundles: run the accelerator layers on the C "
                             "functional simulator (fsim, default) or the Verilator RTL (rtl)")
    parser.add_argument("--split", action="store_true",
                        help="accelerator bundles: also time every kernel (a profiling "
                             "build) and print how the model's time splits between host "
                             "work and the accelerator")
    parser.add_argument("--accel-mhz", type=float, default=None, metavar="MHZ",
                        help="--split: the accelerator's clock that turns RTL cycles into "
                             "time (default 100, the clock of VTA's FPGA builds)")
    parser.add_argument("--model-file", metavar="MODEL.onnx",
                        help="bundle --check: the model it was compiled from (default: the "
                             "path recorded in its metadata.json)")


def load_npz(path: str) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` file by key; clear errors for anything else."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"--inputs {path}: no such file")
    with open(p, "rb") as f:
        head = f.read(6)
    if not head.startswith((b"PK", b"\x93NUMPY")):
        # numpy would take it for pickled data and advise allow_pickle: never do that
        raise InputError(f"--inputs {path}: not a numpy .npz file (no zip archive header); "
                         "write one with np.savez(path, NAME=array, ...)")
    try:
        data = np.load(p, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise InputError(f"--inputs {path}: this is a single .npy array, not an .npz "
                             "archive; write one with np.savez(path, NAME=array, ...)")
        with data:
            return {k: data[k] for k in data.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
        raise InputError(f"--inputs {path}: not a numpy .npz file ({exc}); write one with "
                         "np.savez(path, NAME=array, ...)") from None


def write_npz(path: str, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` to ``path`` atomically (a temporary file, then ``os.replace``)."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    try:
        folder.mkdir(parents=True, exist_ok=True)  # like -o: build/out.npz
    except OSError as exc:
        raise OptionError(f"--outputs {path}: cannot create folder {folder} "
                          f"({exc.strerror or exc})") from None
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def summary(name: str, array: np.ndarray, first: int = 6) -> str:
    """One line about an output: shape, dtype, min/max/mean and the first values.

    Example::

        >>> summary("y", np.arange(4, dtype=np.float32))
        'y: float32[4]  min 0 max 3 mean 1.5  first [0, 1, 2, 3]'
    """
    text = f"{name}: {array.dtype}[{', '.join(map(str, array.shape))}]"
    if array.size:
        flat = array.reshape(-1)
        stats = flat.astype(np.float64) if array.dtype != np.bool_ else flat.astype(np.int64)
        text += (f"  min {_num(stats.min())} max {_num(stats.max())}"
                 f" mean {_num(stats.mean())}")
        values = ", ".join(_num(v) if isinstance(v, float) else str(v)
                           for v in flat[:first].tolist())
        text += f"  first [{values}" + (", ...]" if flat.size > first else "]")
    return text


def _num(x: float) -> str:
    return f"{x:.6g}"


def shapes_from_arrays(model: str, feeds: dict[str, np.ndarray],
                       given: dict[str, tuple[int, ...]], npz: str) -> dict[str, tuple[int, ...]]:
    """``given`` plus, for each model input with dynamic dimensions that ``--input-shape``
    does not cover, the shape of its array in the npz (checked against the fixed dims)."""
    shapes = dict(given)
    for name, dims in dynamic_inputs(model).items():
        if name in shapes or name not in feeds:
            continue
        shape = tuple(feeds[name].shape)
        if dims is not None and (len(dims) != len(shape) or any(
                isinstance(d, int) and d != s for d, s in zip(dims, shape, strict=False))):
            shown = "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
            raise InputError(f"--inputs {npz}: input {name!r} has shape {list(shape)}, but "
                             f"the model expects {shown}")
        shapes[name] = shape
    return shapes


def _emit(args: argparse.Namespace, outputs: dict[str, np.ndarray]) -> None:
    if args.outputs:
        write_npz(args.outputs, outputs)
        print(f"wrote {len(outputs)} output(s) to {args.outputs}: {', '.join(outputs)}")
    else:
        for name, array in outputs.items():
            print(summary(name, array))


def bundle_inputs(args: argparse.Namespace) -> dict[str, np.ndarray]:
    """``--inputs`` of ``kiln run DIR`` (host or board bundle), after refusing the options a
    compiled bundle cannot take (``--input-shape``, a non-positive ``--tolerance``)."""
    if args.input_shape:
        raise OptionError("--input-shape applies to .onnx models; a bundle's shapes were "
                          "fixed when it was compiled")
    if args.tolerance <= 0:
        raise OptionError(f"--tolerance {args.tolerance}: must be positive")
    return load_npz(args.inputs)


def check_outputs(args: argparse.Namespace, metadata: dict[str, Any],
                  feeds: dict[str, np.ndarray], outputs: dict[str, np.ndarray]) -> int:
    """``--check``: compare a bundle's outputs with the reference executor and print the
    table; the exit status (0 also when ``--check`` was not given, 1 on a mismatch)."""
    from toolchain.bundle.check import compare, float16_inside, format_rows, reference_outputs

    if not args.check:
        return 0
    reference = reference_outputs(metadata, feeds, args.model_file)
    rows = compare(outputs, reference, args.tolerance, float16=float16_inside(metadata))
    print(format_rows(rows, args.tolerance))
    bad = [r["name"] for r in rows if not r["ok"]]
    if bad:
        print(f"check FAILED: {', '.join(bad)} above tolerance "
              f"{max(r['tolerance'] for r in rows if not r['ok']):g}")
        return 1
    print(f"check passed: {len(rows)} output(s) match the reference executor")
    return 0


def run_bundle(args: argparse.Namespace) -> int:
    """``kiln run DIR``: build the bundle on this host, run it, optionally check it."""
    from toolchain.bundle.host import BundleModule, accelerated, read_metadata

    feeds = bundle_inputs(args)
    if args.split and not accelerated(read_metadata(args.model)):
        raise OptionError(f"--split applies to bundles compiled with --target vta; "
                          f"{args.model} runs no layer on the accelerator")
    if args.accel_mhz is None:
        args.accel_mhz = 100.0  # VTA's FPGA builds
    if not (np.isfinite(args.accel_mhz) and args.accel_mhz > 0):
        raise OptionError(f"--accel-mhz {args.accel_mhz:g}: must be a positive number of MHz")
    module = BundleModule(args.model, device=args.device, profile=args.split)
    if args.threads is not None:
        if args.threads < 1:
            raise OptionError(f"--threads {args.threads}: must be at least 1")
        got = module.set_threads(args.threads)
        if got != args.threads and not any(k.get("threaded")
                                           for k in module.metadata.get("kernels", ())):
            print("note: running on 1 thread: no kernel of this bundle splits across threads "
                  "(kiln compile said none is large enough)")
        elif got != args.threads:
            print(f"note: running on {got} thread(s): the bundle was compiled for at most "
                  f"{module.metadata.get('max_threads', 1)} (kiln compile --cores N)")
    try:
        outputs = module(feeds)
    except InputError as exc:
        raise InputError(f"--inputs {args.inputs}: {exc}") from None
    _emit(args, outputs)
    counters = module.accelerator_counters()
    if counters:
        bus = int(module.metadata["accelerator"].get("config", {}).get("bus_bytes", 16))
        print(accelerator_report(counters, args.device, bus))
    if args.split:
        kernels = module.kernel_times(feeds)
        split = time_split(kernels, module.accelerator_counters(), args.accel_mhz)
        accel = sum("device_ns" in k for k in kernels)
        print(split_report(split, args.device, args.accel_mhz, len(kernels) - accel, accel))
    return check_outputs(args, module.metadata, feeds, outputs)


#: (heading, counter) columns of the accelerator report per device
_FSIM_COLUMNS = (("insns", "instructions"), ("GEMM steps", "gemm_steps"), ("MACs", "macs"),
                 ("ALU steps", "alu_steps"), ("DMA in B", "loaded"), ("DMA out B",
                                                                      "bytes_stored_out"))
_RTL_COLUMNS = (("cycles", "cycles"), ("GEMM cyc", "gemm_cycles"), ("util", "util"),
                ("ALU cyc", "alu_cycles"), ("load busy", "load_busy"),
                ("compute busy", "compute_busy"), ("store busy", "store_busy"),
                ("DRAM rd B", "rd_bytes"), ("DRAM wr B", "wr_bytes"),
                ("insns", "instructions"), ("MACs", "macs"), ("DMA in B", "loaded"),
                ("DMA out B", "bytes_stored_out"))


def layer_rates(macs: int, gemm_cycles: int, cycles: int, macs_per_step: int
                ) -> dict[str, float]:
    """One accelerator layer's two rates on the RTL, named as the reports name them:
    ``util`` = GEMM cycles / cycles (the GEMM core's occupancy, padded lanes included: the
    column of :func:`accelerator_report`) and ``MAC rate`` = the layer's own MACs /
    (``macs_per_step`` x cycles), ``macs_per_step`` being the target's core, batch x
    BLOCK_IN x BLOCK_OUT (:attr:`~toolchain.vta.config.VTAConfig.macs_per_step`).

    Example::

        >>> layer_rates(macs=4096, gemm_cycles=20, cycles=40, macs_per_step=256)
        {'util': 0.5, 'MAC rate': 0.4}
    """
    if cycles <= 0:
        return {"util": 0.0, "MAC rate": 0.0}
    return {"util": gemm_cycles / cycles, "MAC rate": macs / (macs_per_step * cycles)}


def accelerator_report(rows: list[dict[str, int]], device: str, bus_bytes: int = 16) -> str:
    """The per-layer counters of an accelerator bundle's run as a table, with a total row
    (``rows`` from :meth:`~toolchain.bundle.host.BundleModule.accelerator_counters`). On
    ``rtl``, ``util`` is GEMM cycles / cycles and DRAM bytes are beats x ``bus_bytes`` (they
    include the instruction fetch, which the driver's ``DMA in B`` leaves out).

    Example::

        >>> print(accelerator_report([{"layer": "c1", "instructions": 9, "gemm_steps": 36,
        ...     "macs": 9216, "alu_steps": 8, "bytes_loaded_inp": 64, "bytes_loaded_wgt": 512,
        ...     "bytes_stored_out": 128}], "fsim"))
        accelerator layers on fsim
        layer  insns  GEMM steps  MACs  ALU steps  DMA in B  DMA out B
        c1         9          36  9216          8       576        128
        total      9          36  9216          8       576        128
    """
    cols = _RTL_COLUMNS if device == "rtl" else _FSIM_COLUMNS
    table = []
    for r in rows:
        v = dict(r)
        v["loaded"] = sum(x for k, x in r.items() if k.startswith("bytes_loaded_"))
        v["rd_bytes"] = r.get("dram_rd_beats", 0) * bus_bytes
        v["wr_bytes"] = r.get("dram_wr_beats", 0) * bus_bytes
        table.append(v)
    total = {k: sum(int(v.get(k, 0)) for v in table) for _, k in cols if k != "util"}
    lines = [[str(v["layer"]) for v in table] + ["total"]]
    for _, key in cols:
        if key == "util":
            vals = [(v["gemm_cycles"], v["cycles"]) for v in [*table, total]]
            lines.append([f"{g / c:.1%}" if c else "-" for g, c in vals])
        else:
            lines.append([f"{int(v.get(key, 0))}" for v in [*table, total]])
    heads = ["layer", *(h for h, _ in cols)]
    widths = [max(len(h), *(len(c) for c in col)) for h, col in zip(heads, lines, strict=True)]
    out = [f"accelerator layers on {device}",
           "  ".join(h.ljust(w) if i == 0 else h.rjust(w)
                     for i, (h, w) in enumerate(zip(heads, widths, strict=True)))]
    for i in range(len(table) + 1):
        out.append("  ".join(col[i].ljust(w) if j == 0 else col[i].rjust(w)
                             for j, (col, w) in enumerate(zip(lines, widths, strict=True))))
    return "\n".join(out)


def time_split(kernels: list[dict[str, Any]], counters: list[dict[str, int]],
               mhz: float) -> dict[str, float]:
    """Where a run of an accelerator bundle spends its time: ``host_ns``, the kernels the
    partition left on the host; ``glue_ns``, the host work inside the accelerator layers'
    kernels (packing, staging, unpacking: their time less their device runs); ``accel_ns``,
    the accelerator's RTL cycles at ``mhz`` (0 when the run counted none, on the fsim);
    ``host_share`` = (host + glue) / all. ``kernels`` from
    :meth:`~toolchain.bundle.host.BundleModule.kernel_times`, ``counters`` from
    ``accelerator_counters()``.

    Example::

        >>> time_split([{"kernel": "q", "mean_ns": 300.0},
        ...             {"kernel": "c", "mean_ns": 9000.0, "device_ns": 8800.0}],
        ...            [{"cycles": 950}], 100.0)["host_share"]
        0.05
    """
    host = sum(k["mean_ns"] for k in kernels if "device_ns" not in k)
    glue = sum(k["mean_ns"] - k["device_ns"] for k in kernels if "device_ns" in k)
    cycles = sum(int(c.get("cycles", 0)) for c in counters)
    accel = cycles * 1e3 / mhz
    total = host + glue + accel
    return {"host_ns": host, "glue_ns": glue, "accel_ns": accel, "cycles": cycles,
            "host_share": (host + glue) / total if total else 0.0}


def split_report(split: dict[str, float], device: str, mhz: float, host_kernels: int,
                 accel_kernels: int) -> str:
    """:func:`time_split` as the lines ``kiln run --split`` prints."""
    how = f"RTL cycles at {mhz:g} MHz" if device == "rtl" else "not timed on the fsim"
    lines = [f"host/accelerator split (host measured on this CPU; accelerator {how}):",
             f"  host kernels        {split['host_ns'] / 1e3:10.1f} us  ({host_kernels} "
             "kernels on the host)",
             f"  accelerator glue    {split['glue_ns'] / 1e3:10.1f} us  (packing, staging and "
             f"unpacking in {accel_kernels} accelerator kernels)"]
    if device == "rtl":
        lines.append(f"  accelerator         {split['accel_ns'] / 1e3:10.1f} us  "
                     f"({int(split['cycles']):,} cycles)")
        lines.append(f"  host {split['host_share']:.1%}, accelerator "
                     f"{1 - split['host_share']:.1%} of the model's time")
    else:
        lines.append("  the accelerator's share needs its cycles: --device rtl")
    return "\n".join(lines)


def run_board_bundle(args: argparse.Namespace) -> int:
    """``kiln run DIR`` where DIR is a board bundle: build, run on QEMU, compare."""
    from toolchain.boards.qemu import run_on_qemu
    from toolchain.bundle.host import read_metadata

    feeds = bundle_inputs(args)
    meta = read_metadata(args.model)
    try:
        run = run_on_qemu(args.model, feeds, source=Path(args.inputs).name)
    except InputError as exc:
        raise InputError(f"--inputs {args.inputs}: {exc}") from None
    _emit(args, run.outputs)
    board = meta["board"]
    counted = (f"{run.instructions:,} instructions (QEMU -icount)" if run.instructions
               else "no instruction count")
    cycles = (f"{run.cycles:,} cycles" if run.cycles else
              "cycles not modelled by QEMU (DWT CYCCNT reads 0)")
    stack = run.stack_bytes
    used = f"; stack {stack[0]:,} of {stack[1]:,} B used" if stack else ""
    print(f"ran on QEMU {board['qemu']['machine']} ({board['name']}) in {run.seconds:.2f} s: "
          f"{counted}; {cycles}{used}")
    return check_outputs(args, meta, feeds, run.outputs)


def run(args: argparse.Namespace) -> int:
    from toolchain.boards.project import is_board_bundle

    if not args.check and (args.tolerance is not None or args.model_file):
        raise OptionError(f"{'--tolerance' if args.tolerance is not None else '--model-file'}"
                          " applies with --check (the comparison with the reference "
                          "executor)")
    if args.tolerance is None:
        args.tolerance = 1e-4
    if args.accel_mhz is not None and not args.split:
        raise OptionError("--accel-mhz applies with --split (the clock that turns the "
                          "accelerator's RTL cycles into time)")
    if args.outputs and Path(args.outputs).is_dir():  # refused before a build and a run
        raise OptionError(f"--outputs {args.outputs}: is a directory; name the .npz file to "
                          f"write (e.g. {Path(args.outputs) / 'out.npz'})")
    if not Path(args.model).exists():  # before the options that tell a model from a bundle
        raise ModelError(f"{args.model}: no such file or directory (give an ONNX model file "
                         "or a bundle directory written by kiln compile -o DIR)")
    if args.device != "fsim" and not Path(args.model).is_dir():
        raise OptionError(f"--device {args.device} applies to a bundle compiled with "
                          f"--target vta; {args.model} is an ONNX model")
    if args.split and not Path(args.model).is_dir():
        raise OptionError(f"--split applies to a bundle compiled with --target vta; "
                          f"{args.model} is an ONNX model")
    if is_board_bundle(args.model):  # built with --board: cross build, run on QEMU
        if args.device != "fsim":
            raise OptionError(f"--device {args.device} applies to host bundles compiled "
                              "with --target vta, not to a board's firmware")
        if args.threads is not None:
            raise OptionError("--threads applies to host bundles; a board's firmware runs "
                              "on one core")
        if args.split:
            raise OptionError("--split applies to host bundles compiled with --target vta, "
                              "not to a board's firmware")
        return run_board_bundle(args)
    if Path(args.model).is_dir():
        return run_bundle(args)
    if args.threads is not None:
        raise OptionError("--threads applies to a compiled bundle directory; the reference "
                          f"executor runs {args.model} in numpy")
    if args.check or args.model_file:
        raise OptionError("--check and --model-file compare a compiled bundle with the "
                          "reference; give a bundle directory (kiln compile -o DIR), not "
                          f"{args.model}")
    feeds = load_npz(args.inputs)
    shapes = shapes_from_arrays(args.model, feeds, input_shapes(args), args.inputs)
    graph = from_onnx(args.model, input_shapes=shapes)
    try:
        outputs = run_graph(graph, feeds)
    except InputError as exc:
        raise InputError(f"--inputs {args.inputs}: {exc}") from None
    _emit(args, outputs)
    return 0
