"""Segmenters: a class per pixel (argmax over the channels; one channel: foreground above `threshold`), mapped back
to the source frame through the preprocessing's geometry (the letterbox padding cut off, the content resized to the
crop with nearest-neighbour sampling at pixel centres, placed where the crop was).

The mask holds class indices into postprocess.classes (one channel: 0 background, 1 foreground), and 255 where the
network did not look (outside `preprocess.crop`); hence at most 255 classes. Counts per class are kept per frame.
"""

from __future__ import annotations

import hashlib

import numpy as np

from sdk.errors import ModelError
from sdk.geometry import ResizeGeometry
from sdk.spec.decoders import SegmentDecoder
from sdk.spec.schema import Postprocess
from sdk.stage import Stage

UNSEEN = 255  # mask value outside the crop the network saw


class Mask:
    """One frame's class mask in source pixels and its per-class pixel counts: valid until the next frame."""

    kind = "segment"

    def __init__(self, labels: tuple[str, ...]) -> None:
        self.labels = labels
        self.mask = np.zeros((0, 0), np.uint8)
        self.pixels = np.zeros(len(labels), np.int64)
        self.file: str | None = None  # the PNG a mask sink wrote for this frame (set by create_sinks' wiring)

    def __len__(self) -> int:
        return 0

    def __iter__(self):
        return iter(())

    def jsonl_fields(self, decimals: int) -> dict:
        counts = {self.labels[i]: int(n) for i, n in enumerate(self.pixels) if n}
        return {"mask": self.file, "pixels": counts}

    def digest(self) -> int:
        return int.from_bytes(hashlib.blake2b(self.mask.data, digest_size=8).digest(), "little")

    def draw(self, image: np.ndarray) -> None:
        """Blend the classes (not class 0, the background) over the frame, 50 %."""
        if self.mask.shape != image.shape[:2]:
            return
        palette = _palette()
        seen = (self.mask > 0) & (self.mask != UNSEEN)
        image[seen] = (image[seen].astype(np.uint16) + palette[self.mask[seen]]) // 2


_PALETTE: list[np.ndarray] = []


def _palette() -> np.ndarray:
    """A fixed colour per class index (made once): class 0, the background, is not drawn."""
    if not _PALETTE:
        palette = np.random.default_rng(20).integers(40, 256, (256, 3)).astype(np.uint16)
        palette[0] = 0
        _PALETTE.append(palette)
    return _PALETTE[0]


class SegmentPostprocessor(Stage):
    name = "postprocess"

    def __init__(self, spec: Postprocess, outputs: dict[str, np.ndarray], classes: tuple[str, ...]) -> None:
        decoder = spec.decoder
        assert isinstance(decoder, SegmentDecoder)
        if decoder.output not in outputs:
            raise ModelError(f"postprocess.decoder.output: the model has no output {decoder.output!r}; it has {sorted(outputs)}")
        raw = outputs[decoder.output]
        if raw.ndim != 4 or raw.shape[0] != 1:
            layout = "[1, H, W, C]" if decoder.channels_last else "[1, C, H, W]"
            raise ModelError(
                f"postprocess.decoder.output: {decoder.output!r} is {list(raw.shape)}, expected {layout} (channels_last: {decoder.channels_last})"
            )
        self._planes = None if decoder.channels_last else raw[0]  # [C, H, W]: argmax as a running max over contiguous planes
        self._maps = raw[0] if decoder.channels_last else raw[0].transpose(1, 2, 0)  # a [H, W, C] view
        channels = self._maps.shape[2]
        expected = 2 if channels == 1 else channels
        if len(classes) != expected:
            raise ModelError(
                f"postprocess: {len(classes)} class name(s) but {decoder.output!r} {list(raw.shape)} has {channels} channel(s)",
                hint="one name per channel; a one-channel output needs two: [background, foreground]",
            )
        if channels > UNSEEN:
            raise ModelError(f"postprocess.decoder.output: {channels} classes; allowed: at most {UNSEEN} (a mask is 8-bit, 255 marks unseen pixels)")
        if channels == 1 and decoder.activation == "sigmoid":
            p = decoder.threshold
            self._cut = float(np.log(p / (1 - p)))  # sigmoid(x) > p <=> x > logit(p)
        else:
            self._cut = decoder.threshold
        self.decoder, self.spec = decoder, spec
        height, width = self._maps.shape[:2]
        self._net = np.zeros((height, width), np.uint8)
        self._best = np.zeros((height, width), np.float32)
        self._higher = np.zeros((height, width), bool)
        self._step = np.zeros((height, width), np.uint8)
        self.result = Mask(classes)

    def describe(self) -> str:
        h, w, c = self._maps.shape
        how = f"foreground above {self.decoder.threshold:g}" if c == 1 else "per-pixel argmax"
        return f"segment, {c} channel(s) of {w}x{h}, {how}, mask in source pixels"

    def __call__(self, geometry: ResizeGeometry) -> Mask:
        import cv2

        maps, net = self._maps, self._net
        if maps.shape[2] == 1:
            np.greater(maps[:, :, 0], self._cut, out=net.view(bool))
        elif self._planes is not None:
            # argmax over contiguous planes without a masked write (slow in numpy): the maximum, then, from the last
            # channel to the first (so the first maximum wins, as argmax), net -= (net - c) * (plane == max), in uint8.
            best, equal, step = self._best, self._higher, self._step
            np.copyto(best, self._planes[0])
            for plane in self._planes[1:]:
                np.maximum(best, plane, out=best)
            net.fill(0)
            for channel in range(len(self._planes) - 1, -1, -1):
                np.equal(self._planes[channel], best, out=equal)
                np.subtract(net, np.uint8(channel), out=step)
                np.multiply(step, equal, out=step)
                np.subtract(net, step, out=net)
        else:
            net[:] = np.argmax(maps, axis=2)
        out = self.result
        size = (geometry.source_height, geometry.source_width)
        if out.mask.shape != size:
            out.mask = np.empty(size, np.uint8)
        mask = out.mask
        if geometry.crop_width != geometry.source_width or geometry.crop_height != geometry.source_height:
            mask.fill(UNSEEN)
        if net.shape != (geometry.out_height, geometry.out_width):
            # an output smaller than the input (stride > 1): first to the network input, at pixel centres
            net = cv2.resize(net, (geometry.out_width, geometry.out_height), interpolation=cv2.INTER_NEAREST_EXACT)
        content = net[geometry.pad_y : geometry.pad_y + geometry.content_height, geometry.pad_x : geometry.pad_x + geometry.content_width]
        region = mask[geometry.crop_y : geometry.crop_y + geometry.crop_height, geometry.crop_x : geometry.crop_x + geometry.crop_width]
        region[:] = cv2.resize(content, (geometry.crop_width, geometry.crop_height), interpolation=cv2.INTER_NEAREST_EXACT)
        counts = np.bincount(region.ravel(), minlength=len(out.labels))
        out.pixels[:] = counts[: len(out.labels)]
        return out
