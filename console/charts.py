"""Line charts as inline SVG, drawn on the server: the console needs no script or CDN, and a chart
is there in the page the moment it loads (the tenant dashboard)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from html import escape

WIDTH, HEIGHT = 560, 180
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 56, 12, 12, 28
COLOURS = ("#417690", "#d98c1f", "#6b8e23", "#a34d7c", "#555555")

Point = tuple[datetime, float]


def _label(value: float) -> str:
    if abs(value) >= 10_000:
        return f"{value / 1000:,.0f}k"
    return f"{value:,.0f}" if abs(value) >= 10 or value == int(value) else f"{value:.2f}"


def line_chart(title: str, series: Mapping[str, Sequence[Point]], unit: str = "") -> str:
    """An SVG line chart of ``series`` (name -> points in time order), with its title, the
    values' range on the y axis, the first and last times on the x axis and a legend. Points of
    one time count once (the last); a series of one time is drawn as a dot, never as a line up
    and down one instant; a chart without any point says why."""
    drawn = {name: list(dict(points).items()) for name, points in series.items() if points}
    heading = f'<h3 class="chart-title">{escape(title)}</h3>'
    if not drawn:
        return f'{heading}<p class="chart-empty">Nothing to draw yet: no search or change since the first figures.</p>'
    times = [t.timestamp() for points in drawn.values() for t, _ in points]
    values = [v for points in drawn.values() for _, v in points]
    t0, t1 = min(times), max(times)
    low, high = min(0.0, min(values)), max(values)
    high = high if high > low else low + 1
    plot_w, plot_h = WIDTH - PAD_LEFT - PAD_RIGHT, HEIGHT - PAD_TOP - PAD_BOTTOM

    def x(t: datetime) -> float:
        if t1 == t0:
            return PAD_LEFT + plot_w / 2
        return PAD_LEFT + (t.timestamp() - t0) / (t1 - t0) * plot_w

    def y(v: float) -> float:
        return PAD_TOP + (1 - (v - low) / (high - low)) * plot_h

    parts = [
        f'<svg class="chart" role="img" aria-label="{escape(title)}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="{WIDTH}" height="{HEIGHT}" xmlns="http://www.w3.org/2000/svg">',
        f'<line x1="{PAD_LEFT}" y1="{PAD_TOP + plot_h}" x2="{WIDTH - PAD_RIGHT}" y2="{PAD_TOP + plot_h}" stroke="#999"/>',
        f'<line x1="{PAD_LEFT}" y1="{PAD_TOP}" x2="{PAD_LEFT}" y2="{PAD_TOP + plot_h}" stroke="#999"/>',
        f'<text x="{PAD_LEFT - 6}" y="{PAD_TOP + 4}" text-anchor="end" font-size="11">{_label(high)}{unit}</text>',
        f'<text x="{PAD_LEFT - 6}" y="{PAD_TOP + plot_h}" text-anchor="end" font-size="11">{_label(low)}{unit}</text>',
    ]
    first, last = (
        min(min(p[0] for p in pts) for pts in drawn.values()),
        max(max(p[0] for p in pts) for pts in drawn.values()),
    )
    parts.append(f'<text x="{PAD_LEFT}" y="{HEIGHT - 8}" font-size="11">{first:%Y-%m-%d %H:%M}</text>')
    parts.append(
        f'<text x="{WIDTH - PAD_RIGHT}" y="{HEIGHT - 8}" text-anchor="end" font-size="11">{last:%Y-%m-%d %H:%M}</text>'
    )
    legend = []
    for n, (name, points) in enumerate(drawn.items()):
        colour = COLOURS[n % len(COLOURS)]
        coordinates = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in points)
        for t, v in points if len(points) == 1 else ():
            parts.append(f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="4" fill="{colour}"/>')
        parts.append(
            f'<polyline class="series" data-series="{escape(name)}" fill="none" stroke="{colour}" '
            f'stroke-width="2" points="{coordinates}"/>'
        )
        legend.append(f'<span class="legend" style="color:{colour}">&#9632; {escape(name)}</span>')
    parts.append("</svg>")
    return heading + "".join(parts) + f'<div class="chart-legend">{" ".join(legend)}</div>'
