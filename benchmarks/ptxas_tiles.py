"""What ptxas makes of each tensor-core tile variant: registers, spills, shared memory.

    python benchmarks/ptxas_tiles.py                      # the fp16 GEMM 4096^3, sm_80 and sm_90
    python benchmarks/ptxas_tiles.py --n 4096 --archs sm_90 \\
        --tiles 4x2w.2x4f.kf2.db.p8.v8.async.mma,4x2w.2x4f.kf2.db.p8.v8.async
    python benchmarks/ptxas_tiles.py --archs sm_90a \
        --tiles 8x2w.1x8f.kf2.db.p0.v8.async.wgmma   # wgmma: sm_90a (sm_90 builds a trap)
    python benchmarks/ptxas_tiles.py --model resnet18  # fp16 ResNet-18's wmma convolutions

No GPU needed (nvcc only): the float16 GEMM ``n``^3 of ``benchmarks/cuda.py`` is compiled
with the default tiles and each label of ``--tiles`` (default: that script's ``SWEEP``,
the variants ``cuda_check.sh`` step 3 times on a GPU), its ``kernels.cu`` built by
``nvcc -c -Xptxas -v`` per architecture, and the GEMM kernel's line of the report printed:
registers a thread, spill stores and loads (bytes), stack frame, static shared memory,
and the dynamic shared memory its launch asks for (``metadata.json``). A variant that
spills or needs more registers than 65536 / its threads can have is one to read before
timing it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

_ENTRY = re.compile(r"Compiling entry function '(\w+)' for '(sm_\d+a?)'")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def _bench() -> object:
    spec = importlib.util.spec_from_file_location("bench_cuda", ROOT / "benchmarks" / "cuda.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def ptxas_report(bundle: Path, arch: str) -> dict[str, dict[str, int]]:
    """Per kernel of ``bundle``'s ``src/kernels.cu``: ``registers``, ``smem`` (static
    bytes), ``stack``, ``spill_stores``, ``spill_loads`` from ``nvcc -Xptxas -v``."""
    res = subprocess.run(["nvcc", "-O3", f"-arch={arch}", "-Xptxas", "-v", "-Iinclude",
                          "-Iruntime", "-Isrc", "-c", "src/kernels.cu", "-o", "kernels.o"],
                         cwd=bundle, capture_output=True, text=True, check=False)
    if res.returncode:
        raise SystemExit(f"nvcc -arch={arch} failed on {bundle}/src/kernels.cu:\n"
                         f"{res.stderr[-2000:]}")
    out: dict[str, dict[str, int]] = {}
    name = None
    for line in res.stderr.splitlines():
        m = _ENTRY.search(line)
        if m:
            name = m.group(1)
            out[name] = {}
            continue
        if name is None:
            continue
        m = _SPILL.search(line)
        if m:
            out[name].update(stack=int(m[1]), spill_stores=int(m[2]), spill_loads=int(m[3]))
        m = _USED.search(line)
        if m:
            out[name]["registers"] = int(m[1])
            sm = _SMEM.search(line)
            out[name]["smem"] = int(sm[1]) if sm else 0
    return out


def model_report(name: str, target: str, archs: list[str]) -> int:
    """``--model``: the zoo model ``name`` in fp16 for ``target``; per architecture, the
    ptxas line of each tensor-core kernel (its ops and output shape from the launch
    table, block threads, registers, spills, stack, static shared memory)."""
    from toolchain.bundle import compile_model
    from toolchain.zoo import ZOO

    spec = ZOO[name]
    print(f"{name} fp16 for {target}: the tensor-core kernels as ptxas builds them")
    print(f"{'ops':>22s} {'output':>16s} {'arch':>6s} {'threads':>7s} {'regs':>5s} "
          f"{'spill st/ld':>12s} {'stack':>6s} {'static smem':>11s}  kernel")
    with tempfile.TemporaryDirectory() as tmp:
        d = compile_model(spec.build(), target, Path(tmp) / name, progress=False,
                          input_shapes=spec.input_shapes, precision="fp16")
        table = json.loads((d / "metadata.json").read_text())["device"]["launch_table"]
        rows = {row["kernel"]: row for row in table if row["kind"] != "simple"
                and row["kind"] != "tiled"}
        for arch in archs:
            for kname, r in ptxas_report(d, arch).items():
                if kname not in rows:
                    continue
                ln = rows[kname]
                threads = 1
                for x in ln["block"]:
                    threads *= int(x)
                print(f"{'+'.join(ln['ops']):>22s} {'x'.join(map(str, ln['shape'][0])):>16s} "
                      f"{arch:>6s} {threads:7d} {r.get('registers', 0):5d} "
                      f"{r.get('spill_stores', 0):5d}/{r.get('spill_loads', 0):<6d} "
                      f"{r.get('stack', 0):6d} {r.get('smem', 0):11d}  {ln['kind']} {kname}",
                      flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    bench = _bench()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--target", default="cuda-sm90")
    ap.add_argument("--archs", default="sm_80,sm_90")
    ap.add_argument("--tiles", default=",".join(bench.SWEEP))
    ap.add_argument("--model", default="",
                    help="instead: this zoo model compiled with --precision fp16, a line per "
                         "tensor-core kernel (its convolutions on wmma: session 24)")
    args = ap.parse_args(argv)
    if shutil.which("nvcc") is None:
        print("nvcc (the CUDA toolkit) is not installed")
        return 1
    if args.model:
        return model_report(args.model, args.target, args.archs.split(","))
    from toolchain.bundle import compile_model
    from toolchain.schedules.gpu.gemm import wmma_tiles

    labels = ["default", *[x for x in args.tiles.split(",") if x]]
    tiles = {x: bench.parse_tiles(x, "--tiles") for x in labels[1:]}  # refused before any build
    print(f"fp16 GEMM {args.n}^3 for {args.target}: the GEMM kernel as ptxas builds it")
    print(f"{'tiles':>38s} {'arch':>6s} {'threads':>7s} {'regs':>5s} {'spill st/ld':>12s} "
          f"{'stack':>6s} {'static smem':>11s} {'dyn smem':>9s}  kernel")
    with tempfile.TemporaryDirectory() as tmp:
        for label in labels:
            ctx = wmma_tiles(tiles[label]) if label in tiles else contextlib.nullcontext()
            with ctx:
                d = compile_model(bench.gemm_model(args.n, "fp16"), args.target,
                                  Path(tmp) / label, progress=False, force=True,
                                  precision="fp16")
            table = json.loads((d / "metadata.json").read_text())["device"]["launch_table"]
            launches = {row["kernel"]: row for row in table}
            launcher = "\n".join(p.read_text() for p in (d / "src").glob("*.cu"))
            kind = "wgmma" if "kiln_wgmma_f16_" in launcher else \
                "mma" if "kiln_mma_f16_" in launcher else "wmma"
            for arch in args.archs.split(","):
                for name, r in ptxas_report(d, arch).items():
                    ln = launches.get(name, {})
                    threads = 1
                    for x in ln.get("block", []):
                        threads *= int(x)
                    dyn = re.search(rf"\b{name}<<<dim3\([^)]*\), dim3\([^)]*\), (\d+)>>>",
                                    launcher)
                    print(f"{label:>38s} {arch:>6s} {threads:7d} {r.get('registers', 0):5d} "
                          f"{r.get('spill_stores', 0):5d}/{r.get('spill_loads', 0):<6d} "
                          f"{r.get('stack', 0):6d} {r.get('smem', 0):11d} "
                          f"{int(dyn[1]) if dyn else 0:9d}  {kind} {name}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
