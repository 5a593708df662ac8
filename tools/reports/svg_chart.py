"""A small SVG chart writer for report.html's plots: axes (linear or logarithmic, people's tick labels), lines,
points, dashed budget lines, histogram bars, a strip of marked cells, a title and a legend outside the axes.

The report's four plots are this simple, and drawing them with matplotlib's SVG backend cost about a quarter of a
second each (tick objects, text layout) plus its import on every deploy; written here they take milliseconds
(decision 0564). Coordinates are SVG pixels; text is real <text>, so the page stays searchable and selectable.
"""

from __future__ import annotations

import math
from html import escape

import numpy as np

from sdk.runtime.verdict import format_number

COLOURS = {
    "tab:blue": "#1f77b4",
    "tab:orange": "#ff7f0e",
    "tab:green": "#2ca02c",
    "tab:red": "#d62728",
    "darkred": "#8b0000",
    "black": "#000000",
    "grey": "#808080",
}
CYCLE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
PX = 72  # pixels per inch of the sizes the plots are given in
MARGIN = {"left": 0.85, "right": 0.25, "bottom": 0.55, "top": 0.35}  # inches: tick labels, axis labels, the title
LEGEND = 2.2  # inches right of the axes for the legend


def colour(name: str) -> str:
    return COLOURS.get(name, name)


class Axis:
    """One axis: its range (padded like matplotlib's 5 % margins), scale and ticks."""

    def __init__(self, values: list[float], log: bool, *, pad: float = 0.05, whole: bool = False) -> None:
        self.whole = whole  # a count (runs, frames): ticks at whole numbers only
        finite = [float(v) for v in values if v is not None and math.isfinite(v) and (v > 0 or not log)]
        if not finite:
            finite = [1.0, 10.0] if log else [0.0, 1.0]
        low, high = min(finite), max(finite)
        self.log = log
        if log:
            low, high = math.log10(low), math.log10(high)
        if high == low:
            low, high = low - 0.5, high + 0.5
        span = high - low
        self.low, self.high = low - pad * span, high + pad * span

    def unit(self, value) -> np.ndarray:
        """0..1 along the axis."""
        value = np.asarray(value, np.float64)
        if self.log:
            value = np.log10(np.maximum(value, 1e-300))
        return (value - self.low) / (self.high - self.low)

    def ticks(self) -> tuple[list[float], list[float]]:
        """(labelled ticks, small unlabelled ticks) inside the range."""
        if not self.log:
            step = _nice((self.high - self.low) / 6)
            step = max(1.0, round(step)) if self.whole else step
            first = math.ceil(self.low / step)
            major = [round(k * step, 12) for k in range(first, int(math.floor(self.high / step)) + 1)]
            return major, []
        decades = range(math.floor(self.low), math.ceil(self.high) + 1)
        subs = (1, 2, 5) if self.high - self.low < 2.5 else (1,)
        major = [m * 10.0**d for d in decades for m in subs]
        minor = [m * 10.0**d for d in decades for m in range(2, 10) if m not in subs]
        inside = lambda v: self.low <= math.log10(v) <= self.high  # noqa: E731
        return [v for v in major if inside(v)], [v for v in minor if inside(v)]


def _nice(raw: float) -> float:
    power = 10.0 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    for factor in (1, 2, 2.5, 5, 10):
        if raw <= factor * power:
            return factor * power
    return 10 * power


class Chart:
    """Axes of `width` x `height` inches with fixed margins, plus room for the legend on the right when `legend`."""

    def __init__(self, width: float, height: float, *, legend: bool = True) -> None:
        right = LEGEND if legend else MARGIN["right"]
        self.width, self.height = (width + right) * PX, height * PX
        self.left, self.top = MARGIN["left"] * PX, MARGIN["top"] * PX
        self.plot_w = (width - MARGIN["left"]) * PX
        self.plot_h = (height - MARGIN["top"] - MARGIN["bottom"]) * PX
        self.x: Axis | None = None
        self.y: Axis | None = None
        self.body: list[str] = []
        self.entries: list[tuple[str, str, str]] = []  # (kind, colour, label)
        self.title = self.xlabel = self.ylabel = ""
        self.x_formatter = format_number

    def axes(self, x: Axis, y: Axis) -> None:
        self.x, self.y = x, y

    def _px(self, xs, ys) -> tuple[np.ndarray, np.ndarray]:
        return self.left + self.x.unit(xs) * self.plot_w, self.top + (1 - self.y.unit(ys)) * self.plot_h

    def line(self, xs, ys, colour_name: str, label: str | None = None, width: float = 1.0, dashed: bool = False) -> None:
        px, py = self._px(xs, ys)
        if len(px) == 0:
            return
        points = " ".join(f"{a:.2f},{b:.2f}" for a, b in zip(px.tolist(), py.tolist(), strict=True))
        dash = ' stroke-dasharray="4,2"' if dashed else ""
        self.body.append(f'<polyline points="{points}" fill="none" stroke="{colour(colour_name)}" stroke-width="{width}"{dash}/>')
        if label:
            self.entries.append(("dashed" if dashed else "line", colour(colour_name), label))

    def points(self, xs, ys, colour_name: str, label: str | None = None, *, radii=None, opacity: float | None = None) -> None:
        """Dots of radius 2.2 px, or each its own of `radii`; `opacity` lets overlapping dots show through."""
        px, py = self._px(xs, ys)
        fill = colour(colour_name)
        sizes = ["2.2"] * len(px) if radii is None else [f"{r:.2f}" for r in radii]
        see = "" if opacity is None else f' fill-opacity="{opacity}"'
        self.body += [
            f'<circle cx="{a:.2f}" cy="{b:.2f}" r="{r}" fill="{fill}"{see}/>' for a, b, r in zip(px.tolist(), py.tolist(), sizes, strict=True)
        ]
        if label:
            self.entries.append(("point", fill, label))

    def rule(self, value: float, colour_name: str, label: str, *, vertical: bool, dashed: bool = True, width: float = 1.0) -> None:
        """A line across the axes at `value` (x when vertical, else y): a budget or a deadline."""
        if vertical:
            (at,), _ = self._px([value], [1.0] if self.y.log else [0.0])
            coords = f'x1="{at:.2f}" x2="{at:.2f}" y1="{self.top:.2f}" y2="{self.top + self.plot_h:.2f}"'
        else:
            _, (at,) = self._px([1.0] if self.x.log else [0.0], [value])
            coords = f'x1="{self.left:.2f}" x2="{self.left + self.plot_w:.2f}" y1="{at:.2f}" y2="{at:.2f}"'
        dash = ' stroke-dasharray="4,2"' if dashed else ""
        self.body.append(f'<line {coords} stroke="{colour(colour_name)}" stroke-width="{width}"{dash}/>')
        self.entries.append(("dashed" if dashed else "line", colour(colour_name), label))

    def bars(self, edges: np.ndarray, counts: np.ndarray, colour_name: str, label: str) -> None:
        left, top = self._px(edges[:-1], counts)
        right, bottom = self._px(edges[1:], np.zeros(len(counts)))
        fill = colour(colour_name)
        for a, b, c, d in zip(left.tolist(), right.tolist(), top.tolist(), bottom.tolist(), strict=True):
            if d - c > 0:
                self.body.append(
                    f'<rect x="{a:.2f}" y="{c:.2f}" width="{max(b - a, 0.3):.2f}" height="{d - c:.2f}" fill="{fill}" fill-opacity="0.75"/>'
                )
        self.entries.append(("box", fill, label))

    def cells(self, start: float, width: float, flags: np.ndarray, colour_name: str) -> None:
        """A strip: each True flag a filled cell of `width` from `start` (runs joined into one rectangle)."""
        fill, padded = colour(colour_name), np.concatenate([[False], flags.astype(bool), [False]])
        changes = np.flatnonzero(padded[1:] != padded[:-1])
        for first, end in zip(changes[::2].tolist(), changes[1::2].tolist(), strict=True):
            (a, b), _ = self._px([start + first * width, start + end * width], [0.0, 0.0])
            self.body.append(f'<rect x="{a:.2f}" y="{self.top:.2f}" width="{max(b - a, 0.5):.2f}" height="{self.plot_h:.2f}" fill="{fill}"/>')

    def svg(self, *, y_ticks: bool = True) -> str:
        out = [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width:.0f}" height="{self.height:.0f}" viewBox="0 0 {self.width:.0f} '
            f'{self.height:.0f}" font-family="DejaVu Sans, Arial, sans-serif" font-size="10">',
            f'<rect width="{self.width:.0f}" height="{self.height:.0f}" fill="#ffffff"/>',
            *self._ticks("x"),
            *(self._ticks("y") if y_ticks else []),
            *self.body,
            f'<rect x="{self.left:.2f}" y="{self.top:.2f}" width="{self.plot_w:.2f}" height="{self.plot_h:.2f}" fill="none" '
            'stroke="#000000" stroke-width="0.8"/>',
            self._text(self.left + self.plot_w / 2, self.top - 8, self.title, size=12, anchor="middle"),
            self._text(self.left + self.plot_w / 2, self.top + self.plot_h + 32, self.xlabel, anchor="middle"),
        ]
        if self.ylabel:
            x, y = 14, self.top + self.plot_h / 2
            out.append(f'<text x="{x}" y="{y:.2f}" text-anchor="middle" transform="rotate(-90 {x} {y:.2f})">{escape(self.ylabel)}</text>')
        out += self._legend()
        out.append("</svg>")
        return "\n".join(out)

    def _ticks(self, which: str) -> list[str]:
        axis = self.x if which == "x" else self.y
        major, minor = axis.ticks()
        out = []
        for value, size, label in [(v, 4, True) for v in major] + [(v, 2, False) for v in minor]:
            if which == "x":
                (at,), _ = self._px([value], [1.0] if self.y.log else [0.0])
                base = self.top + self.plot_h
                out.append(f'<line x1="{at:.2f}" x2="{at:.2f}" y1="{base:.2f}" y2="{base + size:.2f}" stroke="#000000" stroke-width="0.8"/>')
                if label:
                    out.append(self._text(at, base + 15, self.x_formatter(value), anchor="middle"))
            else:
                _, (at,) = self._px([1.0] if self.x.log else [0.0], [value])
                out.append(
                    f'<line x1="{self.left - size:.2f}" x2="{self.left:.2f}" y1="{at:.2f}" y2="{at:.2f}" stroke="#000000" stroke-width="0.8"/>'
                )
                if label:
                    out.append(self._text(self.left - 6, at + 3.5, format_number(value), anchor="end"))
        return out

    def _legend(self) -> list[str]:
        out, x = [], self.left + self.plot_w + 0.08 * PX
        for row, (kind, fill, label) in enumerate(self.entries):
            y = self.top + 6 + row * 15
            if kind == "point":
                out.append(f'<circle cx="{x + 10:.2f}" cy="{y:.2f}" r="2.5" fill="{fill}"/>')
            elif kind == "box":
                out.append(f'<rect x="{x + 2:.2f}" y="{y - 4:.2f}" width="16" height="8" fill="{fill}" fill-opacity="0.75"/>')
            else:
                dash = ' stroke-dasharray="4,2"' if kind == "dashed" else ""
                out.append(f'<line x1="{x:.2f}" x2="{x + 20:.2f}" y1="{y:.2f}" y2="{y:.2f}" stroke="{fill}" stroke-width="1.5"{dash}/>')
            out.append(self._text(x + 26, y + 3.5, label, size=9))
        return out

    @staticmethod
    def _text(x: float, y: float, text: str, *, size: int = 10, anchor: str = "start") -> str:
        return f'<text x="{x:.2f}" y="{y:.2f}" font-size="{size}" text-anchor="{anchor}">{escape(text)}</text>'


__all__ = ["CYCLE", "Axis", "Chart", "colour"]
