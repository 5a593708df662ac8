"""YOLO11 (Ultralytics, yolo11.yaml) rebuilt with the onnx helper API at 640x640, as `yolo export format=onnx`
writes it: batch norms folded, SiLU as Sigmoid x Mul, C3k2/C3k/SPPF/C2PSA blocks, the Detect head with its DFL and
box decoding (output 1 x 84 x 8400). Scales n, s, m, l from the yaml's (depth, width, max channels); m and l use C3k
in every C3k2 (Ultralytics' parse_model). Weights random. Not a benchmark itself."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from tests.benchmarks.published_nets import Net

SCALES = {"n": (0.50, 0.25, 1024), "s": (0.50, 0.50, 1024), "m": (0.50, 1.00, 512), "l": (1.00, 1.00, 512)}


class Yolo:
    def __init__(self, net: Net, scale: str) -> None:
        self.net = net
        self.depth, self.width, self.max_channels = SCALES[scale]
        self.c3k_everywhere = scale in "ml"

    def ch(self, c: int) -> int:
        return int(math.ceil(min(c, self.max_channels) * self.width / 8) * 8)

    def n(self, repeats: int) -> int:
        return max(round(repeats * self.depth), 1)

    def conv(self, x: str, c: int, k: int = 1, s: int = 1, g: int = 1, act: bool = True) -> str:
        return self.net.conv(x, c, k, s, g=g, act="silu" if act else None)

    def bottleneck(self, x: str, c: int, shortcut: bool, e: float = 0.5) -> str:
        y = self.conv(self.conv(x, int(c * e), 3), c, 3)
        return self.net.add(x, y) if shortcut else y

    def c3k(self, x: str, c: int, n: int = 2) -> str:
        hidden = int(c * 0.5)
        a = self.conv(x, hidden)
        for _ in range(n):
            a = self.bottleneck(a, hidden, True, e=1.0)
        return self.conv(self.net.concat([a, self.conv(x, hidden)]), c)

    def c3k2(self, x: str, c2: int, n: int, c3k: bool, e: float = 0.5) -> str:
        c = int(c2 * e)
        parts = self.net.split(self.conv(x, 2 * c), [c, c])
        for _ in range(n):
            y = parts[-1]
            parts.append(self.c3k(y, c) if (c3k or self.c3k_everywhere) else self.bottleneck(y, c, True))
        return self.conv(self.net.concat(parts), c2)

    def sppf(self, x: str, c2: int) -> str:
        y = [self.conv(x, self.net.shapes[x][0] // 2)]
        for _ in range(3):
            y.append(self.net.maxpool(y[-1], 5, 1))
        return self.conv(self.net.concat(y), c2)

    def attention(self, x: str) -> str:
        net = self.net
        c, h, w = net.shapes[x]
        heads = max(c // 64, 1)
        head_dim = c // heads
        key_dim = int(head_dim * 0.5)
        qkv = self.conv(x, c + 2 * key_dim * heads, act=False)
        flat = net.reshape(qkv, [-1, heads, 2 * key_dim + head_dim, h * w])
        q, k, v = net.node("Split", [flat, net.constant(np.asarray([key_dim, key_dim, head_dim], np.int64), "s")], outputs=3, axis=2)
        qt = net.node("Transpose", [q], perm=[0, 1, 3, 2])[0]
        scores = net.node("Mul", [net.node("MatMul", [qt, k])[0], net.constant(np.float32(key_dim**-0.5), "c")])[0]
        attn = net.node("Softmax", [scores], axis=-1)[0]
        out = net.node("MatMul", [v, net.node("Transpose", [attn], perm=[0, 1, 3, 2])[0]])[0]
        out = net.reshape(out, [-1, c, h, w])
        net.shapes[out] = (c, h, w)
        v_map = net.reshape(v, [-1, c, h, w])
        net.shapes[v_map] = (c, h, w)
        pe = self.conv(v_map, c, 3, g=c, act=False)
        return self.conv(net.add(out, pe), c, act=False)

    def c2psa(self, x: str, c1: int, n: int) -> str:
        c = int(c1 * 0.5)
        a, b = self.net.split(self.conv(x, 2 * c), [c, c])
        for _ in range(n):
            b = self.net.add(b, self.attention(b))
            b = self.net.add(b, self.conv(self.conv(b, 2 * c), c, act=False))
        return self.conv(self.net.concat([a, b]), c1)

    def detect(self, levels: list[str], classes: int = 80, reg_max: int = 16) -> str:
        net = self.net
        first = net.shapes[levels[0]][0]
        c2, c3 = max(16, first // 4, reg_max * 4), max(first, min(classes, 100))
        flat = []
        for x in levels:
            box = self.net.conv(self.conv(self.conv(x, c2, 3), c2, 3), 4 * reg_max, 1, act=None)
            cls = x
            for _ in range(2):
                cls = self.conv(self.conv(cls, net.shapes[cls][0], 3, g=net.shapes[cls][0]), c3)
            cls = net.conv(cls, classes, 1, act=None)
            flat.append(net.reshape(net.concat([box, cls]), [-1, 4 * reg_max + classes, net.shapes[x][1] * net.shapes[x][2]]))
        joined = net.node("Concat", flat, axis=2)[0]
        box, cls = net.node("Split", [joined, net.constant(np.asarray([4 * reg_max, classes], np.int64), "s")], outputs=2, axis=1)
        anchors = sum(net.shapes[x][1] * net.shapes[x][2] for x in levels)
        dist = net.node("Transpose", [net.reshape(box, [-1, 4, reg_max, anchors])], perm=[0, 2, 1, 3])[0]
        dist = net.node("Softmax", [dist], axis=1)[0]
        weight = net.constant(np.arange(reg_max, dtype=np.float32).reshape(1, reg_max, 1, 1))
        dist = net.reshape(net.node("Conv", [dist, weight], kernel_shape=[1, 1])[0], [-1, 4, anchors])
        lt, rb = net.node("Split", [dist, net.constant(np.asarray([2, 2], np.int64), "s")], outputs=2, axis=1)
        grid = net.constant(np.zeros((1, 2, anchors), np.float32), "anchors")
        x1y1, x2y2 = net.node("Sub", [grid, lt])[0], net.node("Add", [grid, rb])[0]
        centre = net.node("Div", [net.node("Add", [x1y1, x2y2])[0], net.constant(np.float32(2.0), "c")])[0]
        size = net.node("Sub", [x2y2, x1y1])[0]
        strides = net.constant(np.ones((1, anchors), np.float32), "strides")
        boxes = net.node("Mul", [net.node("Concat", [centre, size], axis=1)[0], strides])[0]
        return net.node("Concat", [boxes, net.node("Sigmoid", [cls])[0]], axis=1)[0]

    def build(self) -> str:
        n, ch = self.n, self.ch
        x = self.conv(self.conv("images", ch(64), 3, 2), ch(128), 3, 2)
        x = self.conv(self.c3k2(x, ch(256), n(2), False, 0.25), ch(256), 3, 2)
        p3 = self.c3k2(x, ch(512), n(2), False, 0.25)
        p4 = self.c3k2(self.conv(p3, ch(512), 3, 2), ch(512), n(2), True)
        x = self.c3k2(self.conv(p4, ch(1024), 3, 2), ch(1024), n(2), True)
        p5 = self.c2psa(self.sppf(x, ch(1024)), ch(1024), n(2))
        h4 = self.c3k2(self.net.concat([self.net.upsample(p5), p4]), ch(512), n(2), False)
        out3 = self.c3k2(self.net.concat([self.net.upsample(h4), p3]), ch(256), n(2), False)
        out4 = self.c3k2(self.net.concat([self.conv(out3, ch(256), 3, 2), h4]), ch(512), n(2), False)
        out5 = self.c3k2(self.net.concat([self.conv(out4, ch(512), 3, 2), p5]), ch(1024), n(2), True)
        return self.detect([out3, out4, out5])


def yolo11(folder: Path, scale: str) -> Path:
    net = Net(f"yolo11{scale}", 3, 640, 640)
    net.output(Yolo(net, scale).build())
    return net.save(folder / f"yolo11{scale}.onnx")
