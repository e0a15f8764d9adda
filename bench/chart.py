"""A line chart as SVG, drawn by hand: the benchmarks' pictures need no plotting library.

One line per series over a logarithmic x axis (sizes span decades) and a
linear y axis from zero; ticks at powers of ten and at round values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

WIDTH, HEIGHT = 720, 420
LEFT, RIGHT, TOP, BOTTOM = 70, 150, 40, 60
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


def _nice_step(span: float) -> float:
    """A round tick step giving about five ticks over `span`."""
    raw = span / 5
    power = 10.0 ** math.floor(math.log10(raw))
    return next(float(step * power) for step in (1, 2, 5, 10) if step * power >= raw)


def line_chart(
    series: Mapping[str, Sequence[tuple[float, float]]],
    path: Path,
    *,
    title: str,
    x_label: str,
    y_label: str,
    log_x: bool = True,
) -> None:
    """Write `series` (name -> (x, y) points) as an SVG line chart at `path`: x on a log axis (x > 0),
    or with `log_x=False` a linear one from zero (time)."""
    xs = [x for points in series.values() for x, _ in points]
    ys = [y for points in series.values() for _, y in points]
    top = max(ys) * 1.1
    step = _nice_step(top)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    if log_x:
        low, high = math.floor(math.log10(min(xs))), math.ceil(math.log10(max(xs)))
        ticks: list[float] = [10**power for power in range(low, high + 1)]

        def fraction(x: float) -> float:
            return (math.log10(x) - low) / max(high - low, 1)
    else:
        x_step = _nice_step(max(xs))
        ticks = [i * x_step for i in range(math.ceil(max(xs) / x_step) + 1)]

        def fraction(x: float) -> float:
            return x / ticks[-1]

    def at(x: float, y: float) -> tuple[float, float]:
        return LEFT + fraction(x) * plot_w, TOP + plot_h - y / top * plot_h

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        'font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{LEFT}" y="22" font-size="14">{title}</text>',
        f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 15}" text-anchor="middle">{x_label}</text>',
        f'<text x="18" y="{TOP + plot_h / 2}" text-anchor="middle" '
        f'transform="rotate(-90 18 {TOP + plot_h / 2})">{y_label}</text>',
    ]
    for value in ticks:
        x, _ = at(value, 0)
        parts.append(f'<line x1="{x}" y1="{TOP}" x2="{x}" y2="{TOP + plot_h}" stroke="#ddd"/>')
        label = f"{value:,}" if log_x else f"{value:g}"
        parts.append(f'<text x="{x}" y="{TOP + plot_h + 18}" text-anchor="middle">{label}</text>')
    tick = 0.0
    while tick <= top:
        _, y = at(ticks[0], tick)
        parts.append(f'<line x1="{LEFT}" y1="{y}" x2="{LEFT + plot_w}" y2="{y}" stroke="#ddd"/>')
        parts.append(f'<text x="{LEFT - 8}" y="{y + 4}" text-anchor="end">{tick:g}</text>')
        tick += step
    for n, (name, points) in enumerate(series.items()):
        colour = COLOURS[n % len(COLOURS)]
        drawn = " ".join(f"{px:.1f},{py:.1f}" for px, py in (at(x, y) for x, y in sorted(points)))
        parts.append(f'<polyline points="{drawn}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for x, y in points if log_x else []:  # a time series is too dense for a marker per point
            px, py = at(x, y)
            parts.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{colour}"/>')
        legend_y = TOP + 10 + n * 20
        parts.append(
            f'<line x1="{WIDTH - RIGHT + 15}" y1="{legend_y}" x2="{WIDTH - RIGHT + 40}" y2="{legend_y}" '
            f'stroke="{colour}" stroke-width="2"/>'
        )
        parts.append(f'<text x="{WIDTH - RIGHT + 46}" y="{legend_y + 4}">{name}</text>')
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n")
