"""SSD anchors in centre form: from a tensor of the original graph, or generated as MediaPipe's SsdAnchorsCalculator does.

Generation (the options keep MediaPipe's names, so a user copies them from the model's graph config):

- Layer i's scale is min_scale + (max_scale - min_scale) * i / (L - 1) over the L strides (the mean of
  the two when L is 1); the layer after the last has scale 1.
- Consecutive layers of equal stride share one grid of ceil(input / stride) cells per axis; per cell
  their anchors follow each other, layer by layer: for each aspect ratio r, (scale, r), then, when
  interpolated_scale_aspect_ratio > 0, (sqrt(scale * next scale), that ratio). With
  reduce_boxes_in_lowest_layer, layer 0 has (0.1, 1), (scale, 2), (scale, 0.5) instead.
- An anchor is h = scale / sqrt(r), w = scale * sqrt(r) (w = h = 1 with fixed_anchor_size), centred at
  ((x + anchor_offset_x) / cells_x, (y + anchor_offset_y) / cells_y); order: grid row, column, anchor.

Coordinates are normalised to the network input. Computed in float64, stored float32 (MediaPipe
computes in float32: the two differ by at most one unit in the last place).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sdk.spec.schema import SsdAnchorOptions


@dataclass(frozen=True)
class CentreAnchors:
    """[N] float32 each: centre x, centre y, width, height, normalised to the network input."""

    cx: np.ndarray
    cy: np.ndarray
    w: np.ndarray
    h: np.ndarray

    def __len__(self) -> int:
        return len(self.cx)


def from_corners(anchors: np.ndarray, layout: str) -> CentreAnchors:
    """An anchor tensor of corners (`yxyx` or `xyxy`, any shape ending in 4) in centre form, in float32 as TF computes it."""
    anchors = np.asarray(anchors, np.float32).reshape(-1, 4)
    if layout == "yxyx":
        y1, x1, y2, x2 = anchors.T
    else:
        x1, y1, x2, y2 = anchors.T
    h, w = y2 - y1, x2 - x1
    return CentreAnchors(cx=x1 + 0.5 * w, cy=y1 + 0.5 * h, w=w, h=h)


def _scale(options: SsdAnchorOptions, layer: int) -> float:
    count = len(options.strides)
    if count == 1:
        return (options.min_scale + options.max_scale) * 0.5
    return options.min_scale + (options.max_scale - options.min_scale) * layer / (count - 1.0)


def _cell_anchors(options: SsdAnchorOptions, layer: int) -> list[tuple[float, float]]:
    """(scale, aspect ratio) of each anchor this layer places in a cell, in order."""
    scale = _scale(options, layer)
    if layer == 0 and options.reduce_boxes_in_lowest_layer:
        return [(0.1, 1.0), (scale, 2.0), (scale, 0.5)]
    found = [(scale, ratio) for ratio in options.aspect_ratios]
    if options.interpolated_scale_aspect_ratio > 0:
        following = 1.0 if layer == len(options.strides) - 1 else _scale(options, layer + 1)
        found.append((math.sqrt(scale * following), options.interpolated_scale_aspect_ratio))
    return found


def generate(options: SsdAnchorOptions) -> CentreAnchors:
    """The anchors MediaPipe's SsdAnchorsCalculator generates for these options, in its order."""
    parts: list[np.ndarray] = []
    layer = 0
    while layer < options.num_layers:
        stride = options.strides[layer]
        cell: list[tuple[float, float]] = []
        while layer < options.num_layers and options.strides[layer] == stride:
            cell += _cell_anchors(options, layer)
            layer += 1
        rows = math.ceil(options.input_size_height / stride)
        cols = math.ceil(options.input_size_width / stride)
        if not cell:
            continue
        sizes = np.array(
            [(1.0, 1.0) if options.fixed_anchor_size else (s * math.sqrt(r), s / math.sqrt(r)) for s, r in cell], np.float64
        )  # (w, h) per anchor of a cell
        ys, xs = np.meshgrid(np.arange(rows, dtype=np.float64), np.arange(cols, dtype=np.float64), indexing="ij")
        cx = (xs + options.anchor_offset_x) / cols
        cy = (ys + options.anchor_offset_y) / rows
        k = len(cell)
        block = np.empty((rows, cols, k, 4), np.float64)
        block[..., 0] = cx[..., None]
        block[..., 1] = cy[..., None]
        block[..., 2] = sizes[:, 0]
        block[..., 3] = sizes[:, 1]
        parts.append(block.reshape(-1, 4))
    table = np.concatenate(parts).astype(np.float32) if parts else np.zeros((0, 4), np.float32)
    return CentreAnchors(*(np.ascontiguousarray(table[:, i]) for i in range(4)))


__all__ = ["CentreAnchors", "from_corners", "generate"]
