"""Tuning curves as SVG, drawn by hand (no plotting library): best throughput so far
against trials, one polyline per series.

>>> svg = curve_svg("C2", {"xgb": [1.0, 2.0, 2.5], "random": [1.0, 1.5, 1.5]},
...                 "GFLOP/s")
>>> svg.startswith("<svg") and "xgb" in svg and svg.count("<polyline") == 2
True
>>> from xml.dom import minidom
>>> minidom.parseString(svg).documentElement.tagName   # well-formed XML
'svg'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def curve_svg(title: str, series: Mapping[str, Sequence[float]], ylabel: str,
              width: int = 480, height: int = 300) -> str:
    """An SVG line chart of ``series`` (name -> value after each trial)."""
    left, right, top, bottom = 56, 110, 28, 40
    pw, ph = width - left - right, height - top - bottom
    n = max((len(v) for v in series.values()), default=1)
    finite = [x for v in series.values() for x in v if x == x and x not in (float("inf"),)]
    ymax = max(finite, default=1.0) * 1.05 or 1.0

    def xy(i: int, y: float) -> str:
        x = left + pw * (i / max(1, n - 1))
        return f"{x:.1f},{top + ph * (1 - min(max(y, 0.0), ymax) / ymax):.1f}"

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="16" font-size="13">{escape(title)}</text>',
           f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" '
           'stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="black"/>']
    for k in range(5):
        y = ymax * k / 4
        py = top + ph * (1 - k / 4)
        out.append(f'<text x="{left - 4}" y="{py + 4:.1f}" text-anchor="end">{y:.3g}</text>')
        out.append(f'<line x1="{left}" y1="{py:.1f}" x2="{left + pw}" y2="{py:.1f}" '
                   'stroke="#ddd"/>')
    for k in range(5):
        i = round((n - 1) * k / 4)
        px = left + pw * (i / max(1, n - 1))
        out.append(f'<text x="{px:.1f}" y="{top + ph + 14}" text-anchor="middle">'
                   f'{i + 1}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 6}" text-anchor="middle">trials'
               '</text>')
    out.append(f'<text x="12" y="{top + ph / 2}" text-anchor="middle" '
               f'transform="rotate(-90 12 {top + ph / 2})">{escape(ylabel)}</text>')
    for j, (name, values) in enumerate(series.items()):
        c = COLOURS[j % len(COLOURS)]
        pts = " ".join(xy(i, v) for i, v in enumerate(values) if v == v)
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="2" points="{pts}"/>')
        ly = top + 14 * j + 6
        out.append(f'<line x1="{left + pw + 10}" y1="{ly}" x2="{left + pw + 28}" y2="{ly}" '
                   f'stroke="{c}" stroke-width="2"/>')
        out.append(f'<text x="{left + pw + 32}" y="{ly + 4}">{escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def throughput_curve(curve: Sequence[float], flops: int, unit: str) -> tuple[list[float],
                                                                            str]:
    """A best-cost curve as what to plot: GFLOP/s for timed kernels with FLOPs, else the
    inverse cost relative to the first trial (the default's speed-up)."""
    if unit == "s" and flops:
        return [flops / c / 1e9 if c and c != float("inf") else 0.0 for c in curve], \
            "GFLOP/s (best so far)"
    first = next((c for c in curve if c != float("inf")), 1.0)
    return [first / c if c and c != float("inf") else 0.0 for c in curve], \
        "speed-up over the first trial"
