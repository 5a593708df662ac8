"""`kind: python`: a user's decoder function, loaded once when the pipeline opens, called once a frame.

The function is `decode(outputs, geometry, options) -> mapping`: `outputs` maps every output name of the
model to a read-only view of its buffer (valid during the call), `geometry` is the frame's
`ResizeGeometry` (network input size `out_width` x `out_height`, source size, crop, letterbox), and
`options` the decoder's `options` mapping. It returns `boxes` [K, 4] (x1, y1, x2, y2 in network-input
pixels), `scores` [K] and `class_ids` [K] (indices into postprocess.classes), optionally `keypoints`
[K, P, 2] (x, y, network-input pixels). The SDK then keeps scores above postprocess.score_threshold,
runs its per-class NMS (unless `nms: false`), keeps max_detections and maps everything to source pixels.

Errors: a bad entry (not importable, not callable) is a ConfigError when the pipeline opens; an exception
inside the function, or a return value outside the contract, is the plug-in's and is raised at this
stage's boundary as PluginError naming the plug-in (the runner counts the frame as a postprocess error and
goes on; a plug-in failing every frame stops the run with that message).
"""

from __future__ import annotations

import importlib
import sys
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType

import numpy as np

from sdk.errors import ConfigError
from sdk.geometry import ResizeGeometry
from sdk.postprocess.detections import Detections
from sdk.spec.plugin import ENTRY_HINT, ENTRY_POINT_GROUP, MODULE_ENTRY, PythonDecoder
from sdk.spec.schema import Postprocess
from sdk.stage import Stage

CONTRACT = "docs/guides/decoder-plugins.md"


class PluginError(RuntimeError):
    """A decoder plug-in raised, or returned something outside the contract (the user's code, not the SDK's)."""


def load_entry(entry: str, folder: Path | None = None) -> Callable:
    """The function `entry` names: `package.module:function`, or an entry point of the `sdk.decoders` group."""
    where = f"postprocess.decoder.entry: {entry!r}"
    if folder is not None:
        if not folder.is_dir():
            raise ConfigError(f"postprocess.decoder.path: {folder} is not a folder", hint="paths are relative to the pipeline file's folder")
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    match = MODULE_ENTRY.match(entry)
    if match is None:
        return _entry_point(entry)
    module_name, attribute = match.groups()
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"{where}: module {exc.name!r} cannot be found" + (f" (searched {folder} first)" if folder else ""),
            hint="install the plug-in's package on the device, or put its module under decoder.path beside the pipeline file",
        ) from None
    except Exception as exc:  # the user's module failed while importing
        raise ConfigError(f"{where}: importing {module_name!r} raised {type(exc).__name__}: {exc}{_origin(exc)}", hint=ENTRY_HINT) from None
    function: object = module
    for part in attribute.split("."):
        if not hasattr(function, part):
            raise ConfigError(f"{where}: {module_name!r} has no attribute {attribute!r}", hint=ENTRY_HINT)
        function = getattr(function, part)
    if not callable(function):
        raise ConfigError(f"{where}: {attribute!r} is a {type(function).__name__}, not a function", hint=ENTRY_HINT)
    return function


def _entry_point(name: str) -> Callable:
    from importlib.metadata import entry_points

    found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not found:
        known = sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))
        raise ConfigError(
            f"postprocess.decoder.entry: {name!r} is not an entry point of the {ENTRY_POINT_GROUP!r} group; "
            f"installed: {', '.join(known) if known else 'none'}",
            hint=ENTRY_HINT,
        )
    try:
        function = found[0].load()
    except Exception as exc:
        raise ConfigError(
            f"postprocess.decoder.entry: entry point {name!r} ({found[0].value}) raised {type(exc).__name__} on load: {exc}", hint=ENTRY_HINT
        ) from None
    if not callable(function):
        raise ConfigError(f"postprocess.decoder.entry: entry point {name!r} ({found[0].value}) is not callable", hint=ENTRY_HINT)
    return function


def _origin(exc: BaseException) -> str:
    """' at FILE:LINE' of the innermost frame that raised (the plug-in's own line), or ''."""
    frames = traceback.extract_tb(exc.__traceback__)
    return f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""


class PluginPostprocessor(Stage):
    name = "postprocess"

    def __init__(self, spec: Postprocess, outputs: dict[str, np.ndarray], folder: Path | None = None) -> None:
        decoder = spec.decoder
        assert isinstance(decoder, PythonDecoder)
        self.spec, self.decoder = spec, decoder
        self.function = load_entry(decoder.entry, folder)
        self.plugin = decoder.entry
        views = {}
        for name, array in outputs.items():
            view = array.view()
            view.flags.writeable = False  # the plug-in reads the backend's buffers; it cannot change them
            views[name] = view
        self._outputs = MappingProxyType(views)
        self._options = MappingProxyType(dict(decoder.options))
        self._classes = len(spec.classes)
        self._keypoints: int | None = None  # fixed by the first frame that returns keypoints
        self.detections: Detections | None = None

    def __call__(self, geometry: ResizeGeometry) -> Detections:
        try:
            result = self.function(self._outputs, geometry, self._options)
        except Exception as exc:
            raise PluginError(f"decoder plug-in {self.plugin!r} raised {type(exc).__name__}: {str(exc).strip()}{_origin(exc)}") from exc
        boxes, scores, class_ids, keypoints = self._checked(result)
        out = self._buffer(keypoints)
        keep = np.nonzero(scores > self.spec.score_threshold)[0]
        if len(keep) == 0:
            out.count = 0
            return out
        boxes, scores, class_ids = boxes[keep], scores[keep], class_ids[keep]
        keypoints = keypoints[keep] if keypoints is not None else None
        if self.decoder.nms:
            return out.select(boxes, scores, class_ids, self.spec.iou_threshold, geometry, keypoints=keypoints)
        order = np.argsort(-scores, kind="stable")[: len(out.scores)]
        n = len(order)
        out.boxes[:n], out.scores[:n], out.class_ids[:n] = boxes[order], scores[order], class_ids[order]
        out.count = n
        geometry.boxes_to_source(out.boxes[:n])
        if keypoints is not None and out.keypoints.shape[1]:
            out.keypoints[:n] = keypoints[order]
            geometry.points_to_source(out.keypoints[:n].reshape(-1, 2))
        return out

    def _buffer(self, keypoints: np.ndarray | None) -> Detections:
        count = 0 if keypoints is None else keypoints.shape[1]
        if self.detections is None:
            self._keypoints = count
            self.detections = Detections(self.spec.max_detections, self.spec.classes, keypoints=count, class_agnostic=self.spec.class_agnostic)
        elif count != self._keypoints:
            raise self._broken(f"returned {count} keypoints per detection after {self._keypoints} on an earlier frame; the count must not change")
        return self.detections

    def _broken(self, problem: str) -> PluginError:
        return PluginError(f"decoder plug-in {self.plugin!r} {problem} (the contract: {CONTRACT})")

    def _checked(self, result: object) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        if not isinstance(result, Mapping) or not {"boxes", "scores", "class_ids"} <= set(result):
            raise self._broken(f"returned {type(result).__name__}; expected a mapping with boxes, scores and class_ids")
        try:
            boxes = np.asarray(result["boxes"], np.float32)
            scores = np.asarray(result["scores"], np.float32)
            class_ids = np.asarray(result["class_ids"])
            keypoints = None if result.get("keypoints") is None else np.asarray(result["keypoints"], np.float32)
        except (TypeError, ValueError) as exc:
            raise self._broken(f"returned values that are not numeric arrays: {exc}") from None
        k = len(scores) if scores.ndim == 1 else -1
        if k < 0 or boxes.shape != (k, 4) or class_ids.shape != (k,):
            raise self._broken(
                f"returned boxes {list(boxes.shape)}, scores {list(scores.shape)}, class_ids {list(class_ids.shape)}; expected [K, 4], [K], [K]"
            )
        if keypoints is not None and (keypoints.ndim != 3 or keypoints.shape[0] != k or keypoints.shape[2] != 2):
            raise self._broken(f"returned keypoints {list(keypoints.shape)}; expected [K, P, 2] with K = {k}")
        if k and not np.issubdtype(class_ids.dtype, np.integer):
            raise self._broken(f"returned class_ids of type {class_ids.dtype}; expected integers")
        if k and (class_ids.min() < 0 or class_ids.max() >= self._classes):
            bad = int(class_ids.max() if class_ids.max() >= self._classes else class_ids.min())
            raise self._broken(f"returned class id {bad}; postprocess.classes names {self._classes} (ids 0 to {self._classes - 1})")
        if not (np.isfinite(boxes).all() and np.isfinite(scores).all()):
            raise self._broken("returned a box or score that is NaN or infinite")
        return boxes, scores, class_ids.astype(np.int32), keypoints
