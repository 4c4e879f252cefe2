"""Judge one model: onnxruntime and Kiln's reference executor against Kiln's bundles.

``check(model, inputs, targets)`` returns the :class:`Finding`\\ s of one model (none when
all is well). A finding is one of

* ``wrong`` — a bundle (or the reference executor) disagrees with onnxruntime beyond the
  tolerance: the worst bug Kiln can have;
* ``crash`` — anything that is Kiln's fault: an exception that is not a
  :class:`~toolchain.errors.KilnError`, an ``InternalError``, generated code the C compiler
  rejects (``GeneratedCodeError``);
* ``refused`` — a clear user error (``KilnError``) for a model onnxruntime runs.

A model onnxruntime itself rejects is no finding (the generator's fault, reported as
``invalid``); nor is a disagreement that follows from an ``ArgMax``/``ArgMin`` over values
that tie within rounding, or a comparison of operands equal within rounding
(``ambiguous``: onnxruntime's InstanceNormalization, say, gives two instances of one
expanded row values one ulp apart, and which index wins is noise; the mean of ``erf(x)``
and ``erf(-x)`` is 1e-9 in one implementation and 0 in another, and ``Less(., 0)``
flips), nor one where onnxruntime's graph optimizations change its own result and its
plain kernels (``ORT_DISABLE_ALL``) agree with Kiln (``onnxruntime``: a Transpose into
a MatMul by a 1-D operand, fused, is wrong in onnxruntime 1.32), nor one where ONNX's
own reference evaluator (``onnx.reference``) disagrees with onnxruntime's plain kernels
and agrees with Kiln (``onnxruntime`` too: Resize by ``sizes`` with
``keep_aspect_ratio_policy`` and ``align_corners``, docs/testing.md).
Targets this host cannot run (CPU features it lacks) are skipped.

``shrink(model, inputs, finding, targets)`` cuts a failing model down to the smallest
prefix graph that still fails the same way (outputs moved to the earliest failing
tensor, unused nodes dropped, one output kept).
"""

from __future__ import annotations

import tempfile
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from toolchain.errors import GeneratedCodeError, InternalError, KilnError, TargetError
from toolchain.graph.ir import Graph

#: max |got - want| / max |want| allowed (fp32 kernels reassociate sums and use their own
#: exp/tanh/erf; chains of ops amplify the differences a little) ...
RTOL = 2e-3
#: ... beyond an absolute 1e-5 (an output that cancels to ~0, the mean of x and -x, has no
#: meaningful relative error)
ATOL = 1e-5


@dataclass(frozen=True)
class Finding:
    """What went wrong with one model on one target (``"reference"`` for the executor)."""

    kind: str  # wrong | crash | refused | invalid | ambiguous
    target: str
    detail: str

    def same_as(self, other: Finding) -> bool:
        """The same failure (kind, target and first line of the error type)."""
        return (self.kind, self.target, self.detail.split(":")[0]) == \
            (other.kind, other.target, other.detail.split(":")[0])


def run_ort(model: onnx.ModelProto, inputs: dict[str, np.ndarray], optimize: bool = True
            ) -> dict[str, np.ndarray]:
    """``model``'s outputs as onnxruntime computes them (on one thread; ``optimize=False``:
    without its graph optimizations, each node by its own kernel). A recurrent node of
    ``layout`` 1, which onnxruntime's CPU provider refuses, runs as its layout-0 twin
    between Transposes (``tests.bundle.test_recurrent.ort_twin``)."""
    import onnxruntime as ort

    if any(n.op_type in ("LSTM", "GRU", "RNN") and any(
            a.name == "layout" and a.i == 1 for a in n.attribute) for n in model.graph.node):
        from tests.bundle.test_recurrent import ort_twin

        model = ort_twin(model)

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    if not optimize:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, inputs), strict=True))


def run_onnx_reference(model: onnx.ModelProto, inputs: dict[str, np.ndarray]
                       ) -> dict[str, np.ndarray] | None:
    """``model``'s outputs as ``onnx.reference`` (ONNX's own evaluator, the
    specification in numpy) computes them; None where it cannot run the model. The
    second opinion where onnxruntime and Kiln disagree."""
    from onnx.reference import ReferenceEvaluator

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sess = ReferenceEvaluator(model)
            names = [o.name for o in model.graph.output]
            return {k: np.asarray(v) for k, v in
                    zip(names, sess.run(None, inputs), strict=True)}
    except Exception:  # noqa: BLE001 - an op it lacks: no second opinion
        return None


def max_rel(got: np.ndarray, want: np.ndarray) -> float:
    if got.shape != want.shape:
        return float("inf")
    if want.size == 0:
        return 0.0
    g, w = got.astype(np.float64), want.astype(np.float64)
    if not np.array_equal(np.isnan(g), np.isnan(w)):
        return float("inf")
    g, w = np.nan_to_num(g), np.nan_to_num(w)
    scale = max(float(np.abs(w).max()), 1e-30)
    return max(float(np.abs(g - w).max()) - ATOL, 0.0) / scale


#: the tolerance of a ``NAME:fp16`` bundle (float16 tensors and weights, float32 sums):
#: a coarse check, for what is wrong by far more than float16 rounding
FP16_RTOL = 5e-2


def compare_outputs(got: dict[str, np.ndarray], want: dict[str, np.ndarray],
                    rtol: float = RTOL) -> str | None:
    """What is wrong with ``got`` against onnxruntime's ``want`` (the first output off by
    more than the tolerance ``rtol``), or None."""
    for name, w in want.items():
        err = max_rel(np.asarray(got[name]), w)
        if not err <= rtol:
            return f"output {name!r}: max rel err {err:.3g} (shape {np.shape(got[name])})"
    return None


def bound_shapes(model: onnx.ModelProto, inputs: dict[str, np.ndarray]
                 ) -> dict[str, tuple[int, ...]] | None:
    """The shapes of ``inputs`` for each graph input declared with a symbolic or unknown
    dimension (what ``kiln compile --input-shape`` binds), or None when every input is
    static."""
    shapes = {}
    for vi in model.graph.input:
        dims = vi.type.tensor_type.shape.dim
        if vi.name in inputs and any(not d.HasField("dim_value") for d in dims):
            shapes[vi.name] = tuple(int(d) for d in np.shape(inputs[vi.name]))
    return shapes or None


#: ``NAME:budget``: a RAM budget of this fraction of the plain plan's arena
BUDGET_FRACTION = 0.6


class BudgetUnmet(Exception):
    """A ``NAME:budget`` build whose budget no patch stage meets (a clear refusal, the
    graph has no convolution chain to tile): no finding, nothing to compare."""


def run_on(model: onnx.ModelProto, inputs: dict[str, np.ndarray], target: str,
           out: Path) -> dict[str, np.ndarray]:
    """Compile ``model`` for ``target`` into ``out`` and run it: a target name (built for
    this host), ``NAME:llvm`` (kernels through the LLVM backend), ``NAME:emulate`` (a GPU
    target's kernels run thread by thread in C on this CPU), ``NAME:threads`` (compiled
    for 3 cores and run on 3 threads: uneven chunks, the SPMD kernels and the pool),
    ``NAME:fp16`` (``precision="fp16"``, judged with :data:`FP16_RTOL`),
    ``NAME:fp16emulate`` (both), ``NAME:budget`` (``ram_budget`` at
    :data:`BUDGET_FRACTION` of the plain plan's arena: patch stages; :class:`BudgetUnmet`
    where none meets it) or ``board:NAME`` (a firmware for that board, run under QEMU).
    A model with symbolic input dimensions is compiled with them bound to the shapes of
    ``inputs`` (:func:`bound_shapes`)."""
    import json
    from dataclasses import replace

    from toolchain.bundle import compile_model, load_bundle
    from toolchain.errors import OptionError
    from toolchain.target import resolve_target

    shapes = bound_shapes(model, inputs)
    name, _, variant = target.partition(":")
    if name == "board":
        from toolchain.boards import compile_board
        from toolchain.boards.qemu import run_on_qemu

        path, _ = compile_board(model, variant, out, build=False, input_shapes=shapes)
        return run_on_qemu(path, inputs).outputs
    if variant == "threads":
        bundle = load_bundle(compile_model(model, replace(resolve_target(name), cores=3),
                                           out, progress=False, input_shapes=shapes))
        bundle.set_threads(3)
        return bundle(inputs)
    if variant == "budget":
        plain = compile_model(model, name, out / "plain", progress=False, input_shapes=shapes)
        arena = int(json.loads((plain / "metadata.json").read_text())["arena_bytes"])
        if arena == 0:  # every tensor in the caller's buffers: nothing to budget
            raise BudgetUnmet("the plain plan has no arena")
        try:
            path = compile_model(model, name, out / "budget", progress=False,
                                 input_shapes=shapes,
                                 ram_budget=max(1, int(arena * BUDGET_FRACTION)))
        except OptionError as exc:
            if "cannot be met" in str(exc):
                raise BudgetUnmet(str(exc)) from None
            raise
        return load_bundle(path)(inputs)
    kw = {"backend": "llvm"} if variant == "llvm" else \
        {"emulate": True} if variant == "emulate" else \
        {"precision": "fp16"} if variant == "fp16" else \
        {"precision": "fp16", "emulate": True} if variant == "fp16emulate" else {}
    return load_bundle(compile_model(model, name, out, progress=False, input_shapes=shapes,
                                     **kw))(inputs)


def slug(target: str) -> str:
    """``target`` as one file name: a target may be a YAML file's path.

    >>> slug("/tmp/targets/vta-small.yaml"), slug("c-generic:llvm")
    ('vta-small', 'c-generic_llvm')
    """
    if target.endswith((".yaml", ".yml")):
        target = Path(target).stem
    return target.replace(":", "_").replace("/", "_")


def accelerator_layers(bundle: Path, epilogue: str | None = None) -> int | None:
    """How many layers the bundle in ``bundle`` runs on an accelerator (its
    ``metadata.json``'s ``accelerator.layers``; with ``epilogue``, those whose epilogue
    runs there: ``"accelerator"`` or ``"host"``); None for a bundle of a target without
    one."""
    import json

    meta = bundle / "metadata.json"
    if not meta.is_file():
        return None
    acc = json.loads(meta.read_text()).get("accelerator")
    if acc is None:
        return None
    return sum(epilogue in (None, x.get("epilogue")) for x in acc.get("layers", []))


def on_targets(model: onnx.ModelProto, inputs: dict[str, np.ndarray],
               targets: tuple[str, ...], judge: Callable[[dict], str | None],
               placed: Counter[str] | None = None) -> list[Finding]:
    """Run ``model`` on every target (:func:`run_on`; one this host cannot run is
    skipped); ``judge(outputs)`` says what is wrong with a target's outputs, or None.
    ``placed`` (if given) counts, for each accelerator target whose bundle was built,
    ``"<target> bundles"`` and ``"<target> with accelerator layers"`` (a bundle with at
    least one) and ``"<target> accelerator layers"``: a campaign whose graphs all stay on
    the host shows."""
    findings = []
    with tempfile.TemporaryDirectory(prefix="kiln-fuzz-") as tmp:
        for target in targets:
            out = Path(tmp) / slug(target)
            try:
                got = run_on(model, inputs, target, out)
            except BudgetUnmet:
                if placed is not None:
                    placed[f"{target} unmet"] += 1
                continue
            except TargetError as exc:
                if "this host" in str(exc) or "CPU" in str(exc):
                    continue  # a target this machine cannot run
                findings.append(Finding("refused", target, f"TargetError: {exc}"))
                continue
            except Exception as exc:  # noqa: BLE001 - every failure is a finding
                findings.append(Finding(_classify(exc), target,
                                        f"{type(exc).__name__}: {str(exc)[:2000]}"))
                continue
            if placed is not None and (out / "budget").is_dir():
                meta = (out / "budget" / "metadata.json").read_text()
                placed[f"{target} bundles"] += 1
                placed[f"{target} patched"] += '"ram_budget"' in meta
            layers = accelerator_layers(out)
            if placed is not None and layers is not None:
                placed[f"{target} bundles"] += 1
                placed[f"{target} with accelerator layers"] += layers > 0
                placed[f"{target} accelerator layers"] += layers
                placed[f"{target} requantizing layers"] += accelerator_layers(
                    out, "accelerator") or 0
            bad = judge(got)
            if bad:
                findings.append(Finding("wrong", target, bad))
    return findings


def _classify(exc: BaseException) -> str:
    if isinstance(exc, (GeneratedCodeError, InternalError)) or not isinstance(exc, KilnError):
        return "crash"
    return "refused"


def check(model: onnx.ModelProto, inputs: dict[str, np.ndarray],
          targets: tuple[str, ...] = ("c-generic",),
          placed: Counter[str] | None = None) -> list[Finding]:
    """Every finding of ``model`` on ``targets`` (see the module docstring); an output is
    wrong when ``max|got - want| > RTOL * max|want| + ATOL``. ``placed``: counts, as
    :func:`on_targets` keeps them (``NAME:budget``: bundles, those with a patch stage,
    budgets unmet)."""
    from toolchain.frontend.onnx import from_onnx
    from toolchain.graph.reference import run_graph

    try:
        want = run_ort(model, inputs)
    except Exception as exc:  # noqa: BLE001 - onnxruntime rejects it: not a valid model
        return [Finding("invalid", "onnxruntime", f"{type(exc).__name__}: {exc}")]
    findings = []
    plain: list[dict[str, np.ndarray]] = []  # without onnxruntime's graph optimizations
    spec: list[dict[str, np.ndarray] | None] = []  # ONNX's reference evaluator

    def judge(got: dict[str, np.ndarray], rtol: float = RTOL) -> str | None:
        bad = compare_outputs(got, want, rtol)
        if bad is None:
            return None
        big = max((float(np.nanmax(np.abs(w))) for w in want.values()
                   if w.dtype.kind == "f" and w.size), default=0.0)
        if rtol == FP16_RTOL and big > 65504.0:  # float16's largest finite value
            findings.append(Finding("ambiguous", "onnxruntime", (
                f"an output beyond float16's range (|y| up to {big:.3g}; {bad})")))
            return None
        if not plain:
            plain.append(run_ort(model, inputs, optimize=False))
        if compare_outputs(got, plain[0], rtol) is None:
            findings.append(Finding("onnxruntime", "onnxruntime", (
                "onnxruntime's graph optimizations change the result (" + bad +
                "); its plain kernels agree with Kiln")))
            return None
        if not spec:
            spec.append(run_onnx_reference(model, inputs))
        if spec[0] is not None and compare_outputs(got, spec[0], rtol) is None and \
                compare_outputs(plain[0], spec[0], rtol) is not None:
            findings.append(Finding("onnxruntime", "onnxruntime", (
                "onnxruntime disagrees with ONNX's reference evaluator (" + bad +
                "), which agrees with Kiln")))
            return None
        return bad

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ref = run_graph(from_onnx(model, input_shapes=bound_shapes(model, inputs)),
                            inputs)
            bad = judge(ref)
            if bad:
                findings.append(Finding("wrong", "reference", bad))
        except Exception as exc:  # noqa: BLE001 - every failure is a finding
            findings.append(Finding(_classify(exc), "reference",
                                    f"{type(exc).__name__}: {str(exc)[:2000]}"))
        for target in targets:
            rtol = FP16_RTOL if target.partition(":")[2].startswith("fp16") else RTOL
            findings += on_targets(model, inputs, (target,),
                                   lambda got, rtol=rtol: judge(got, rtol), placed)
    if any(f.kind == "wrong" for f in findings):
        tie = near_tie(model, inputs)
        if tie is not None:
            return [Finding("ambiguous", "onnxruntime", tie)]
        # a float16 bundle rounds every tensor: its ties are float16's (seed 239566 of
        # --wide: Equal(x, 0.1) true where x is 0.09998, both 0.09998 in float16)
        half = [f for f in findings if f.kind == "wrong" and
                f.target.partition(":")[2].startswith("fp16")]
        tie = near_tie(model, inputs, FP16_TIE_RTOL) if half else None
        if tie is not None:
            findings = [f for f in findings if f not in half] + [
                Finding("ambiguous", "onnxruntime", f"in float16: {tie}")]
    if any(f.kind == "onnxruntime" for f in findings):  # one such finding says it all
        findings = [f for f in findings if f.kind != "onnxruntime"] + [
            next(f for f in findings if f.kind == "onnxruntime")]
    return findings


#: top two values of an ArgMax/ArgMin slice closer than this (relative to the input's
#: largest magnitude) tie within the rounding differences of two implementations
TIE_RTOL = 1e-4


#: the same for a float16 bundle (``NAME:fp16``): float16 has 11 significant bits
FP16_TIE_RTOL = 1e-3


#: comparisons: a result that flips where the two operands are (nearly) equal
COMPARISONS = ("Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Equal")
#: ops that pick by rank along an axis: a result that flips where two values tie
SELECTIONS = ("ArgMax", "ArgMin", "Hardmax", "TopK")
#: elementwise ops with a jump (and a Cast from float to an integer or bool): a result
#: that flips where the input is at the jump
STEPS = ("Floor", "Ceil", "Round", "Sign", "ThresholdedRelu", "Shrink", "Mod")


def _step_gap(node: onnx.NodeProto, x: np.ndarray, values: dict
              ) -> tuple[np.ndarray, str] | None:
    """How far each element of ``x``, the input of a :data:`STEPS` node (or a Cast), is
    from the node's nearest jump, and what the jump is; None where there is none."""
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    op = node.op_type
    if op == "Cast":
        to = attrs.get("to")
        if to == onnx.TensorProto.BOOL:
            return np.abs(x), "zero"
        if to in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16):
            return None
        return np.abs(x - np.round(x)), "an integer"
    if op in ("Floor", "Ceil"):
        return np.abs(x - np.round(x)), "an integer"
    if op == "Round":
        return np.abs(x - np.floor(x) - 0.5), "a half"
    if op == "Sign":
        return np.abs(x), "zero"
    if op == "ThresholdedRelu":
        return np.abs(x - attrs.get("alpha", 1.0)), "alpha"
    if op == "Shrink":
        return np.abs(np.abs(x) - attrs.get("lambd", 0.5)), "lambd"
    if len(node.input) < 2 or node.input[1] not in values:
        return None
    q = x / np.asarray(values[node.input[1]], np.float64)  # Mod: a jump at whole quotients
    return np.broadcast_to(np.abs(q - np.round(q)), np.broadcast_shapes(x.shape, q.shape)), \
        "a multiple of the divisor"


def near_tie(model: onnx.ModelProto, inputs: dict[str, np.ndarray], rtol: float = TIE_RTOL
             ) -> str | None:
    """The first node of ``model`` whose result hangs on rounding, as onnxruntime
    computes its inputs: an ``ArgMax``/``ArgMin`` with a slice whose best two values are
    within :data:`TIE_RTOL`, or a comparison (``Less``, ``Equal``, ...) with operands within
    ``TIE_RTOL`` (relative) + ``ATOL`` of each other (the mean of ``erf(x)`` and
    ``erf(-x)`` is 0 exactly, about 1e-9 in float32, and ``Less(., 0)`` flips).

    >>> from onnx import TensorProto, helper
    >>> g = helper.make_graph([helper.make_node("ArgMax", ["x"], ["y"], axis=1)], "g",
    ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
    ...     [helper.make_tensor_value_info("y", TensorProto.INT64, [1, 1])])
    >>> m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    >>> near_tie(m, {"x": np.array([[1.0, 3.0, 3.0000001]], np.float32)})
    "ArgMax 'y': 1 of 1 slices have two values within 0.0001 of each other (relative)"
    >>> near_tie(m, {"x": np.array([[1.0, 3.0, 2.0]], np.float32)}) is None
    True
    >>> g = helper.make_graph([helper.make_node("Less", ["x", "z"], ["y"])], "g",
    ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
    ...      helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])],
    ...     [helper.make_tensor_value_info("y", TensorProto.BOOL, [2])])
    >>> m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    >>> near_tie(m, {"x": np.array([1e-9, 1.0], np.float32), "z": np.zeros(2, np.float32)})
    "Less 'y': 1 of 2 elements compare operands within 0.0001 (relative) + 1e-05"
    """
    nodes = [n for n in model.graph.node if n.op_type in SELECTIONS or
             n.op_type in COMPARISONS or n.op_type in STEPS or n.op_type == "Cast"]
    if not nodes:
        return None
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {vi.name: vi.type.tensor_type.elem_type for vi in (
        *inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output)}
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    have = {o.name for o in probe.graph.output}
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    for n in nodes:
        for name in n.input[:2]:
            if name and name not in have and name not in inits and name in types:
                probe.graph.output.append(onnx.helper.make_tensor_value_info(
                    name, types[name], None))
                have.add(name)
    values = {**inits, **dict(inputs), **run_ort(probe, inputs)}
    for n in nodes:
        if n.op_type in COMPARISONS:
            if len(n.input) < 2 or n.input[0] not in values or n.input[1] not in values:
                continue
            a = np.asarray(values[n.input[0]], np.float64)
            b = np.asarray(values[n.input[1]], np.float64)
            if not (np.issubdtype(a.dtype, np.floating) and a.size and b.size):
                continue
            gap = np.abs(a - b)
            scale = np.maximum(np.abs(a), np.abs(b))
            close = int(np.sum(gap <= rtol * scale + ATOL))
            if close:
                return (f"{n.op_type} {n.output[0]!r}: {close} of {gap.size} elements "
                        f"compare operands within {rtol:g} (relative) + {ATOL:g}")
            continue
        if n.input[0] not in values:
            continue
        x = np.asarray(values[n.input[0]])
        if not np.issubdtype(x.dtype, np.floating):
            continue  # integer arithmetic is exact
        x = x.astype(np.float64)
        if n.op_type in STEPS or n.op_type == "Cast":
            step = _step_gap(n, x, values)
            if step is None:
                continue
            gap, what = step
            close = int(np.sum(gap <= rtol * np.abs(x) + ATOL))
            if close:
                return (f"{n.op_type} {n.output[0]!r}: {close} of {gap.size} elements within "
                        f"{rtol:g} (relative) + {ATOL:g} of {what}")
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        axis = attrs.get("axis", 0 if n.op_type in ("ArgMax", "ArgMin") else -1) \
            % max(x.ndim, 1)
        if x.ndim == 0 or x.shape[axis] < 2:
            continue
        s = np.sort(x, axis=axis)
        if n.op_type == "ArgMin" or (n.op_type == "TopK" and not attrs.get("largest", 1)):
            s = np.flip(s, axis)
        # the best two (ArgMax, Hardmax), or any neighbours among TopK's k + 1 best
        last = 2 if n.op_type != "TopK" else min(
            int(np.asarray(values.get(n.input[1], [x.shape[axis]])).ravel()[0]) + 1,
            x.shape[axis])
        s = np.flip(s, axis)
        gaps = np.abs(np.diff(np.take(s, range(last), axis), axis=axis))
        gap = gaps.min(axis=axis)
        scale = max(float(np.abs(x).max()), 1e-30)
        close = int(np.sum(gap <= rtol * scale))
        if close:
            return (f"{n.op_type} {n.output[0]!r}: {close} of {gap.size} slices have two "
                    f"values within {rtol:g} of each other (relative)")
    return None


def quantized_reference(model: onnx.ModelProto, inputs: dict[str, np.ndarray],
                        power_of_two: bool = False
                        ) -> tuple[onnx.ModelProto, dict[str, np.ndarray], set[str]]:
    """``model`` quantized by Kiln's post-training quantization (calibrated on seeded
    data; ``power_of_two``: with power-of-two scales), the integer reference's outputs
    (``run_graph`` of ``quantize_ops``) on ``inputs``, and the tensors float arithmetic
    computed (:func:`_float_computed`): what :func:`check_int8` judges a bundle against."""
    from toolchain.frontend.onnx import from_onnx
    from toolchain.graph.passes.quantize_ops import quantize_ops
    from toolchain.graph.reference import run_graph
    from toolchain.quantize.ptq import quantize_model

    rng = np.random.default_rng(0)
    cal = {k: rng.standard_normal((8, *v.shape)).astype(np.float32)
           for k, v in inputs.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        qdq, _ = quantize_model(model, cal, power_of_two_scales=power_of_two)
        graph = quantize_ops(from_onnx(qdq))
        want = run_graph(graph, inputs)
    return qdq, want, _float_computed(graph)


def check_int8(model: onnx.ModelProto, inputs: dict[str, np.ndarray],
               targets: tuple[str, ...] = ("c-generic",),
               placed: Counter[str] | None = None,
               power_of_two: bool = False) -> list[Finding]:
    """``model`` quantized by Kiln's post-training quantization (calibrated on seeded
    data; ``power_of_two``: with power-of-two scales) and compiled for ``targets``: the
    integer kernels must equal the integer reference (``run_graph`` of ``quantize_ops``)
    bit for bit. ``placed`` counts the accelerator bundles and their layers
    (:func:`on_targets`)."""
    try:
        qdq, want, rounded = quantized_reference(model, inputs, power_of_two)
    except Exception as exc:  # noqa: BLE001 - every failure is a finding
        return [Finding(_classify(exc), "quantize",
                        f"{type(exc).__name__}: {str(exc)[:2000]}")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return on_targets(qdq, inputs, targets,
                          lambda got: exact_outputs(got, want, rounded), placed)


#: float ops that move or select values without arithmetic (and the dequantization, one
#: exact product): their output is exact when their inputs are
_EXACT_FLOAT = frozenset({"Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze",
                          "Identity", "Concat", "Split", "Slice", "Gather", "Expand", "Tile",
                          "MaxPool", "GlobalMaxPool", "Pad", "DequantizeLinear"})


def _float_computed(graph: Graph) -> set[str]:
    """The tensors of a quantized graph that float arithmetic computed (a ``MatMul`` of
    two dequantized activations the quantizer leaves in float, a ``Gemm`` with float
    weights), and what is computed from them: their value depends on the order of a float
    sum, so a float one is compared with the float tolerance and an integer one (quantized
    from it) within one step; every other output must match bit for bit."""
    computed: set[str] = set()
    for node in graph.nodes:
        inexact = any(o.dtype.startswith("float") for o in node.outputs) and \
            node.op not in _EXACT_FLOAT
        if inexact or any(i is not None and i.name in computed for i in node.inputs):
            computed.update(o.name for o in node.outputs)
    return computed


def exact_outputs(got: dict[str, np.ndarray], want: dict[str, np.ndarray],
                  rounded: set[str] = frozenset()) -> str | None:
    """What is wrong with an int8 bundle's outputs ``got`` against the integer reference's
    ``want`` (the first output that differs; those in ``rounded``, computed by float
    arithmetic, within the float tolerance or one quantization step), or None."""
    for name, w in want.items():
        if name in rounded and w.dtype.kind == "f":
            err = max_rel(np.asarray(got[name]), w)
            if not err <= RTOL:
                return f"float output {name!r} of an int8 graph: max rel err {err:.3g}"
        elif name in rounded:
            off = int(np.abs(got[name].astype(np.int64) - w.astype(np.int64)).max(initial=0))
            if off > 1:
                return f"int8 output {name!r} quantized from a float sum: off by {off}"
        elif not np.array_equal(got[name], w):
            return f"int8 output {name!r}: {int(np.sum(got[name] != w))} of {w.size} values differ"
    return None


def _prefix_model(model: onnx.ModelProto, output: str,
                  inputs: dict[str, np.ndarray]) -> onnx.ModelProto:
    """``model`` cut to the nodes ``output`` depends on, with ``output`` its only output."""
    from onnx import helper

    from tests.fuzz.graphs import reads

    need = {output}
    keep = []
    for node in reversed(model.graph.node):
        if any(o in need for o in node.output):
            keep.append(node)
            need.update(i for i in reads(node) if i)  # a Scan body's weights too
    keep.reverse()
    inits = [t for t in model.graph.initializer if t.name in need]
    graph_inputs = [i for i in model.graph.input if i.name in need]
    graph = helper.make_graph(keep, model.graph.name, graph_inputs,
                              [helper.make_empty_tensor_value_info(output)], inits)
    out = helper.make_model(graph, opset_imports=list(model.opset_import),
                            producer_name=model.producer_name)
    out.ir_version = model.ir_version
    # declare the output as onnxruntime computes it (ONNX shape inference has known bugs)
    from onnx import helper as h

    feeds = {i.name: inputs[i.name] for i in out.graph.input}
    got = np.asarray(run_ort(out, feeds)[output])
    out.graph.output[0].CopyFrom(h.make_tensor_value_info(
        output, h.np_dtype_to_tensor_dtype(got.dtype), list(got.shape)))
    return out


def shrink(model: onnx.ModelProto, inputs: dict[str, np.ndarray], finding: Finding,
           targets: tuple[str, ...]) -> onnx.ModelProto:
    """The smallest prefix of ``model`` (by node count) that still gives ``finding``."""
    target = (finding.target,) if finding.target in targets else targets
    best = model
    candidates = [o for n in model.graph.node for o in n.output if o]
    for out in candidates:  # earliest first: the first that fails is the smallest cut
        try:
            small = _prefix_model(model, out, inputs)
        except Exception:  # noqa: BLE001 - a cut onnx cannot type: try the next one
            continue
        if len(small.graph.node) >= len(best.graph.node):
            continue
        feeds = {i.name: inputs[i.name] for i in small.graph.input}
        if any(f.same_as(finding) for f in check(small, feeds, target)):
            best = small
            break
    return best
