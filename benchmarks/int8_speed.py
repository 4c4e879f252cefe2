"""int8 vs fp32 bundle latency of the same zoo models, measured in one run.

    python benchmarks/int8_speed.py                        # the four MLPerf-Tiny models
    python benchmarks/int8_speed.py resnet8 --runs 500 --profile

Each model of ``toolchain/zoo/models.py`` is compiled twice for the host's widest CPU target
(``x86_64-avx512`` here, ``--target`` to change): as it is (fp32) and quantized by Kiln's
post-training quantization (:func:`toolchain.quantize.ptq.quantize_model`, 8 seeded
standard-normal calibration samples, :func:`toolchain.zoo.quantized.calibration`; float I/O, so
both bundles take the same inputs). Both are timed from C with the bundle's demo ``main``
(``--repeat N``, minimum over the runs, see ``benchmarks/models.py``) and the ratio
``int8 / fp32`` printed; below 1 the int8 bundle is faster. The same QDQ model also runs in
onnxruntime (one thread, all graph optimisations: its int8 kernels, ``time_ort`` of
``benchmarks/models.py``, the minimum of ``--runs`` calls less the per-call overhead of a
one-element Identity model) and ``int8 / ort int8`` is printed; below 1 Kiln's int8 bundle is
faster (``--no-ort`` leaves it out). ``--profile`` prints the int8 bundle's per-kernel times.
The machine is shared: only ratios from one run mean anything.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.models import ort_overhead, profile, time_kiln, time_ort  # noqa: E402
from toolchain.bundle import compile_model  # noqa: E402
from toolchain.zoo import ZOO  # noqa: E402
from toolchain.zoo.quantized import calibration  # noqa: E402

MODELS = ("ds_cnn", "resnet8", "mobilenet_v1", "autoencoder")


def bench(name: str, target: str, runs: int, root: Path, show: bool, ort: bool
          ) -> tuple[float, float, float]:
    """(fp32 seconds, int8 seconds, onnxruntime int8 seconds or nan) per call of ``name``'s
    bundles on ``target`` and of its QDQ model in onnxruntime (overhead not subtracted)."""
    from toolchain.quantize.ptq import quantize_model

    spec = ZOO[name]
    model = spec.build()
    feeds = spec.inputs(model)
    qmodel = quantize_model(model, calibration(model))[0]
    times = []
    for tag, m in (("fp32", model), ("int8", qmodel)):
        bundle = compile_model(m, target, root / f"{name}_{tag}",
                               input_shapes=spec.input_shapes, name=f"{name}_{tag}",
                               force=True, progress=False)
        times.append(time_kiln(bundle, feeds, runs))
        if show and tag == "int8":
            profile(bundle, runs)
    times.append(time_ort(qmodel, feeds, runs) if ort else float("nan"))
    return times[0], times[1], times[2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=list(MODELS))
    ap.add_argument("--target", default=None, help="default: the host's widest CPU target")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--profile", action="store_true", help="per-kernel times of int8")
    ap.add_argument("--no-ort", action="store_true", help="leave out onnxruntime's int8")
    args = ap.parse_args(argv)
    if args.target is None:
        from toolchain.target import host_target

        args.target = host_target().name
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            rows.append((name, *bench(name, args.target, args.runs, Path(tmp), args.profile,
                                      not args.no_ort)))
    ovh = 0.0 if args.no_ort else ort_overhead(args.runs)
    print(f"\n{args.target}, minimum of {args.runs} calls each; onnxruntime int8 less its "
          f"per-call overhead ({ovh * 1e6:.1f} us), 1 thread\n")
    print("| model | fp32 | int8 | ort int8 | int8 / fp32 | int8 / ort int8 |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, f, q, o in rows:
        o = o - ovh
        print(f"| {name} | {f * 1e6:,.1f} us | {q * 1e6:,.1f} us | {o * 1e6:,.1f} us | "
              f"{q / f:.2f}x | {q / o:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
