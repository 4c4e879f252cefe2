"""Several ONNX node cases compiled into one host bundle (``test_node_bundle``'s batches).

A bundle's fixed costs — Kiln's start of a compile, planning and file writing, the C
compiler's start-up and header parsing, the link — are most of what a node case costs
when it is built alone (tens of milliseconds each for graphs of one node). A *batch*
merges a group of cases into one model whose parts are disjoint: every name of part ``i``
(node, tensor, input, output, initializer, symbolic dimension) gets the prefix ``p<i>_``,
so no value flows from one part to another. The batch is compiled once (host target, the
strict warning flags) and run once; each case then checks its own outputs, and remains
its own pytest item with its own outcome.

What keeps the attribution exact (:func:`batch_results`):

* a part the compile refuses (an :class:`~toolchain.errors.UnsupportedError` naming its
  prefix) leaves the batch, which is rebuilt without it; the refused case runs alone and
  so gets its own skip reason;
* any other failure of the batch's compile or run: every member runs alone; a member that
  passes alone passes, one that fails alone fails with its own detail, and if every member
  passes alone the batch's failure is a Kiln bug (independent subgraphs interacted), so
  every member fails with the batch's error;
* a member whose outputs in the batch are wrong runs alone too and fails either way, with
  both details (alone it passes: the batch made it wrong, a Kiln bug).

Example::

    >>> from onnx import helper, TensorProto as T
    >>> def one(op):
    ...     g = helper.make_graph([helper.make_node(op, ["x"], ["y"])], op,
    ...         [helper.make_tensor_value_info("x", T.FLOAT, [2])],
    ...         [helper.make_tensor_value_info("y", T.FLOAT, [2])])
    ...     return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    >>> merged = merge_models([one("Relu"), one("Abs")])
    >>> [(n.name, list(n.input), list(n.output)) for n in merged.graph.node]
    [('p0_Relu_0', ['p0_x'], ['p0_y']), ('p1_Abs_0', ['p1_x'], ['p1_y'])]
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from toolchain.errors import UnsupportedError

#: cases a batch holds at most: large enough that the fixed costs fade, small enough that
#: a batch that must be rebuilt (a refused case) stays cheap
BATCH_SIZE = 24

#: how a part's names are prefixed (``part_prefix(3) == "p3_"``)
_PREFIX = re.compile(r"(?<![A-Za-z0-9_])p(\d+)_")


def part_prefix(i: int) -> str:
    """The prefix of every name of part ``i`` of a merged model."""
    return f"p{i}_"


def parts_named(message: str, count: int) -> set[int]:
    """The parts (``< count``) an error message names through their prefix.

    >>> sorted(parts_named("node 'p3_Resize_0' (Resize): mode 'cubic'; 'p12_y'", 10))
    [3]
    """
    return {int(m) for m in _PREFIX.findall(message) if int(m) < count}


def batchable(model: onnx.ModelProto) -> bool:
    """Whether ``merge_models`` can take ``model`` as a part: no model-local functions,
    no sparse initializers, no control-flow bodies (their outer-scope references would
    need renaming too; such cases are built alone)."""
    g = model.graph
    return not (model.functions or g.sparse_initializer or any(
        a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
        for n in g.node for a in n.attribute))


def _rename_dims(info: onnx.ValueInfoProto, prefix: str) -> None:
    if info.type.HasField("tensor_type"):
        for d in info.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param:
                d.dim_param = prefix + d.dim_param


def _add_part(g: onnx.GraphProto, part: onnx.GraphProto, prefix: str) -> None:
    def ren(name: str) -> str:
        return prefix + name if name else name  # "" is an omitted optional input

    for j, node in enumerate(part.node):
        n = g.node.add()
        n.CopyFrom(node)
        # a name for every node, so an error about it names its part
        n.name = prefix + (node.name or f"{node.op_type}_{j}")
        del n.input[:], n.output[:]
        n.input.extend(ren(x) for x in node.input)
        n.output.extend(ren(x) for x in node.output)
    for src, dst in ((part.input, g.input), (part.output, g.output),
                     (part.value_info, g.value_info)):
        for info in src:
            v = dst.add()
            v.CopyFrom(info)
            v.name = ren(info.name)
            _rename_dims(v, prefix)
    for init in part.initializer:
        t = g.initializer.add()
        t.CopyFrom(init)
        t.name = ren(init.name)


def merge_models(models: Sequence[onnx.ModelProto], name: str = "nodebatch"
                 ) -> onnx.ModelProto:
    """One model holding every model of ``models`` as a disjoint part (names prefixed with
    :func:`part_prefix`). The models must share their IR version and opset imports and be
    :func:`batchable`; a ``ValueError`` says which one is not."""
    first = models[0]
    opsets = sorted((o.domain, o.version) for o in first.opset_import)
    out = onnx.ModelProto()
    out.ir_version = first.ir_version
    out.opset_import.extend(first.opset_import)
    out.graph.name = name
    for i, m in enumerate(models):
        if m.ir_version != first.ir_version or \
                sorted((o.domain, o.version) for o in m.opset_import) != opsets:
            raise ValueError(f"part {i} ({m.graph.name}): IR version or opset imports "
                             "differ from part 0's")
        if not batchable(m):
            raise ValueError(f"part {i} ({m.graph.name}): functions, sparse initializers "
                             "or control-flow bodies cannot be merged")
        _add_part(out.graph, m.graph, part_prefix(i))
    return out


@dataclass
class Part:
    """One data set of one case, ready to build: the model (shape operands frozen), the
    feeds of its remaining inputs, and the expected outputs by name."""

    case: str
    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]
    expected: dict[str, np.ndarray] = field(default_factory=dict)


def run_merged(parts: Sequence[Part], out: Path, flags: Sequence[str]
               ) -> list[dict[str, np.ndarray]]:
    """Compile ``parts`` as one host bundle under ``out`` (built with ``flags``), run it
    once, and return each part's outputs under its own names."""
    from toolchain.bundle import compile_model, load_bundle

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = compile_model(merge_models([p.model for p in parts]), "host", out,
                             progress=False)
    bundle = load_bundle(path, extra_flags=flags)
    feeds = {part_prefix(i) + k: v for i, p in enumerate(parts) for k, v in p.feeds.items()}
    got = bundle({t["name"]: feeds[t["name"]] for t in bundle.inputs})
    return [{k: got[part_prefix(i) + k] for k in p.expected} for i, p in enumerate(parts)]


Outcome = tuple[str, str]


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def batch_results(names: Sequence[str], parts_of: Callable[[str], list[Part]],
                  check: Callable[[Part, Mapping[str, np.ndarray]], None],
                  alone: Callable[[str], Outcome], out: Path,
                  flags: Sequence[str] = (), retries: int = 3,
                  run: Callable[..., list[dict[str, np.ndarray]]] | None = None
                  ) -> dict[str, Outcome]:
    """``("pass" | "skip" | "fail", detail)`` of every case of ``names`` (all of which the
    reference passes), built as one batch (rules in the module docstring). ``parts_of``
    gives a case's parts, ``check`` raises when a part's outputs are wrong, ``alone`` builds
    and checks a case on its own (its outcome is final), ``run`` builds and runs parts
    (:func:`run_merged`)."""
    run = run or run_merged
    results: dict[str, Outcome] = {}
    parts: dict[str, list[Part]] = {}
    for n in names:
        try:
            parts[n] = parts_of(n)
        except Exception:  # noqa: BLE001 - alone says what it is, with the right outcome
            results[n] = alone(n)
    members = list(parts)
    for attempt in range(retries + 1):
        if len(members) <= 1:
            return {**results, **{n: alone(n) for n in members}}
        flat = [p for n in members for p in parts[n]]
        try:
            got = run(flat, out / f"batch{attempt}", flags)
        except UnsupportedError as exc:
            named = {flat[i].case for i in parts_named(str(exc), len(flat))}
            if not named or attempt == retries:
                return {**results, **_after_failure(members, exc, alone)}
            results.update({n: alone(n) for n in sorted(named)})
            members = [n for n in members if n not in named]
            continue
        except Exception as exc:  # noqa: BLE001 - every failure is attributed below
            return {**results, **_after_failure(members, exc, alone)}
        return {**results, **_checked(members, flat, got, check, alone)}
    raise AssertionError("unreachable")  # pragma: no cover


def _checked(members: Sequence[str], flat: Sequence[Part],
             got: Sequence[Mapping[str, np.ndarray]],
             check: Callable[[Part, Mapping[str, np.ndarray]], None],
             alone: Callable[[str], Outcome]) -> dict[str, Outcome]:
    """Each member's outcome from the batch's outputs (a wrong one is also built alone)."""
    wrong: dict[str, str] = {}
    for part, outputs in zip(flat, got, strict=True):
        if part.case in wrong:
            continue
        try:
            check(part, outputs)
        except Exception as exc:  # noqa: BLE001 - a failure to report, whatever it is
            wrong[part.case] = _describe(exc)
    results: dict[str, Outcome] = {}
    for n in members:
        if n not in wrong:
            results[n] = ("pass", "")
            continue
        status, detail = alone(n)
        if status == "pass":
            results[n] = ("fail", "passes in a bundle of its own but fails in a batch of "
                          f"{len(members)} cases (independent subgraphs interacted: a Kiln "
                          f"bug): {wrong[n]}")
        else:
            results[n] = ("fail", f"alone: {status}: {detail}; in its batch: {wrong[n]}")
    return results


def _after_failure(members: Sequence[str], exc: BaseException,
                   alone: Callable[[str], Outcome]) -> dict[str, Outcome]:
    """Outcomes when the batch itself could not be built or run: each member alone."""
    results = {n: alone(n) for n in members}
    if all(status == "pass" for status, _ in results.values()):
        why = (f"every case of its batch of {len(members)} passes in a bundle of its own, "
               f"but the batch failed (independent subgraphs interacted: a Kiln bug): "
               f"{_describe(exc)}")
        return {n: ("fail", why) for n in members}
    return results


def group_names(cases: Mapping[str, Any], eligible: Callable[[Any], bool],
                size: int = BATCH_SIZE) -> dict[str, str]:
    """Case name -> batch id for every eligible case: cases sorted by name, chunked by
    ``size`` within each (IR version, opset imports); deterministic.

    >>> from types import SimpleNamespace as NS
    >>> m = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], []),
    ...                            opset_imports=[onnx.helper.make_opsetid("", 17)])
    >>> m.ir_version = 8
    >>> group_names({n: NS(model=m) for n in "abc"}, lambda c: True, size=2)
    {'a': 'ir8-17-0', 'b': 'ir8-17-0', 'c': 'ir8-17-1'}
    """
    by_key: dict[str, list[str]] = {}
    for name in sorted(cases):
        m = cases[name].model
        if not eligible(cases[name]):
            continue
        opsets = "-".join(f"{o.domain + ':' if o.domain else ''}{o.version}"
                          for o in sorted(m.opset_import, key=lambda o: (o.domain, o.version)))
        by_key.setdefault(f"ir{m.ir_version}-{opsets}", []).append(name)
    return {name: f"{key}-{i // size}" for key, names in by_key.items()
            for i, name in enumerate(names)}
