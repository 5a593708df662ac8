"""The meaning of each key and option that the schema or the parser does not describe itself (one line each)."""

from __future__ import annotations

MEANINGS = {
    "version": "format of the pipeline file; only 1 exists",
    "name": "the pipeline's name: report folders, the systemd unit and the release's pipeline file are named after it",
    "source": "where frames come from: one camera, named after the pipeline; exactly one of `source` and `sources`",
    "sources": (
        "several cameras through one model: camera name (1 to 64 of letters, digits, `_`, `-`) -> the block `source` takes, "
        "plus its own `crop`; exactly one of `source` and `sources` (guides/cameras.md)"
    ),
    "sources.<name>.uri": "the camera's URI, as `source.uri`",
    "sources.<name>.replay": "how this camera's recording is played back (its own rate), as `source.replay`",
    "sources.<name>.replay.loop": "start the recording again at its end",
    "sources.<name>.replay.late_frames": "as `source.replay.late_frames`",
    "sources.<name>.replay.pace": "as `source.replay.pace`",
    "sources.<name>.reconnect": "this camera's reopening backoff, as `source.reconnect`",
    "sources.<name>.crop": "this camera's crop in its source pixels; `null`: `preprocess.crop`",
    "batch.size": "`cameras`: one inference call takes a frame of each camera (the model is prepared with that batch); `1`: one frame at a time",
    "budgets.cameras": "per camera (by the names of `sources`): its own `end_to_end` limits and `deadline_ms`, checked on its frames",
    "source.uri": (
        "`file://clip.avi`, `images://folder`, `v4l2:///dev/video0?width=&height=&fps=`, `csi://0?width=&height=&fps=` (Jetson Argus), "
        "`mcap://drive.mcap?topic=/camera/image_raw` and `rosbag2://bag_folder?topic=...` (a camera topic of an MCAP file or a "
        "ROS 2 bag: sensor_msgs Image rgb8/bgr8/mono8 or CompressedImage JPEG/PNG, each frame with its recorded stamp; several `topic=` "
        "are a camera each, named after the topic; guides/recordings.md), "
        "`gst://<pipeline ending in appsink>`, `synthetic://boxes?width=&height=&frames=` (or `noise`) "
        "(`&live=1&fps=&unplug_at=&unplug_ms=` emulates a camera with a pulled cable); paths relative to the pipeline file; "
        "`format=nv12` on `file://` (replayed as NV12) and `csi://` hands NV12 frames to the pipeline, as a `gst://` pipeline "
        "whose caps before appsink say `format=NV12` does (docs/guides/gpu.md)"
    ),
    "source.replay": "how a recorded source is played back",
    "source.replay.loop": "start the recording again at its end",
    "source.replay.late_frames": (
        "`keep`: process every frame, lateness shows as latency (acceptance runs); "
        "`drop`: skip a frame whose successor is already due, counted in `dropped`"
    ),
    "source.replay.pace": (
        "`rate`: one frame every 1/`rate_fps` s (as fast as the pipeline goes where `rate_fps` is null); "
        "`recorded`: each frame when its recorded stamp says, counted from the first (`mcap://`, `rosbag2://`; stamps that go "
        "backwards are delivered at once and counted)"
    ),
    "source.reconnect": "live cameras: reopen a camera that disappears, with a doubling backoff; `null`: the stream ends with the camera",
    "preprocess": "the network input tensor from a frame: crop, resize, colour order, normalisation, layout, type",
    "preprocess.resize": "the network input size and how the frame (or crop) is fitted into it",
    "preprocess.resize.mode": "`stretch`: both axes scaled independently; `letterbox`: aspect kept, the rest padded with `pad_value`",
    "preprocess.resize.align": "letterbox: `center` (padding on both sides; Ultralytics) or `top_left` (padding right and below; YOLOX)",
    "preprocess.resize.content": (
        "letterbox: the resized image's size w·r x h·r rounded to the nearest pixel (`round`; Ultralytics) or down "
        "(`floor`; YOLOX's int(w·r)) (guides/evaluate.md)"
    ),
    "preprocess.resize.coordinates": "sampling grid, as ONNX Resize's `coordinate_transformation_mode` (TF's legacy bilinear is `asymmetric`)",
    "preprocess.color": "channel order of the tensor (frames are BGR as decoded)",
    "preprocess.layout": "tensor layout",
    "preprocess.dtype": "tensor element type",
    "preprocess.device": (
        "`auto`: the CUDA kernels where a CUDA device, cuda-python, the release's kernels and a TensorRT engine are there, "
        "else the CPU; `cpu`; `cuda`: an error where the CUDA path cannot run (`SDK_CUDA_EMULATION=host` emulates it on the host)"
    ),
    "preprocess.cuda_graph": (
        "with the CUDA path (`device` cuda or auto): the frame's work (kernel, enqueueV3, decode, copies, events) captured once "
        "as one CUDA graph and replayed per frame; an engine that cannot be captured runs un-captured and the report says why; "
        "one camera only"
    ),
    "model": "the detector and how it runs",
    "model.path": "the original ONNX model, relative to the pipeline file (the release carries the prepared model, not this file)",
    "model.reference": (
        "the original model an optimized one was made from (`sdk optimize` writes it), relative to the pipeline file: "
        "accuracy budgets judge the run against this model's FP32 detections"
    ),
    "model.prepare": "cut the graph between these tensors, with static shapes (what TensorRT and DLA can take); `null`: use the model as it is",
    "model.prepare.inputs": (
        "the image input's name and static shape, and each constant input's (model.inputs); with `sources` and "
        "`batch.size: cameras` an image batch of 1 is prepared as the camera count"
    ),
    "model.prepare.outputs": "names of the tensors the cut model ends at",
    "model.prepare.fold_constants": "fold constants after the cut until nothing folds",
    "model.inputs": (
        "constant inputs besides the image (an image size, scale factors), by name: a number or a flat list in C order, "
        "cast to the input's type and bound once; the one input not named here is the image"
    ),
    "model.backend": (
        "`auto`: a TensorRT engine where the target reports TensorRT and a GPU (built there by `deploy`), else ONNX Runtime; "
        "`tensorrt`: must build an engine (refused before anything is sent on a device without TensorRT); `onnxruntime`: never builds"
    ),
    "model.precision": (
        "`int8`: `deploy` calibrates (the `calibration` section) and refuses a model that fails the accuracy gate; the CPU backend runs "
        "the Q/DQ model; `fp16` is TensorRT's, the CPU backend runs FP32 and says so"
    ),
    "model.dla": "run on a DLA core under this placement contract (TensorRT builds only); a build that breaks it is refused",
    "model.dla.gpu_fallback": "`forbidden`: every layer must run on DLA",
    "model.spinning": (
        "ONNX Runtime: idle threads spin-wait (its default, the lowest latency on cores of their own); false: they sleep, "
        "for cores shared with other work (less CPU, about 1 ms more inference measured on the example)"
    ),
    "model.profile_layers": "TensorRT: per-layer times in the report (names the slowest layers; costs time)",
    "model.cuda_graph": "TensorRT: capture the engine's launches once and replay them as one CUDA graph; not with `profile_layers`",
    "postprocess": (
        "decoding the raw outputs: boxes with the SDK's non-maximum suppression (`ssd`, `yolo`), boxes as the model's own "
        "NMS left them (`nms_inside`), text regions of a DB text detector (`db`), a frame's top classes (`classify`) or a class mask (`segment`)"
    ),
    "postprocess.decoder": "the output decoder, chosen by `kind`",
    "postprocess.decoder.kind": (
        "`ssd`, `yolo`, `nms_inside`, `db`, `classify`, `segment` ([models](../guides/models.md)) "
        "or `python` ([decoder plug-ins](../guides/decoder-plugins.md))"
    ),
    "postprocess.decoder.entry": (
        "`kind: python`: `package.module:function`, or an entry point of the `sdk.decoders` group ([decoder plug-ins](../guides/decoder-plugins.md))"
    ),
    "postprocess.decoder.path": "`kind: python`: a folder beside the pipeline file searched first for the module; it travels with the release",
    "postprocess.decoder.options": "`kind: python`: strings, numbers and booleans handed to the function unchanged",
    "postprocess.decoder.nms": "`kind: python`: run the SDK's per-class NMS on what the function returns (false: it suppresses itself)",
    "postprocess.decoder.box_encodings": "output tensor of box encodings",
    "postprocess.decoder.class_logits": "output tensor of class logits",
    "postprocess.decoder.anchors": (
        "`ssd`: the name of a constant tensor of the ORIGINAL graph holding the anchors, read exactly at preparation; or "
        "`{generate: {...}}`: anchors generated on the device from MediaPipe's `SsdAnchorsCalculator` options. "
        "`yolo` v5: `{stride: [[w, h], ...]}`, a raw (undecoded) head's anchors in input pixels, one entry per output scale in order"
    ),
    "postprocess.decoder.strides": "`yolo` yolox: the feature maps' strides, in the order their cells follow each other in the output",
    "postprocess.decoder.boxes": "`nms_inside`: the output of the kept boxes, `[1, K, 4]`",
    "postprocess.decoder.scores": "`nms_inside`: the output of their scores, `[1, K]`",
    "postprocess.decoder.classes": "`nms_inside`: the output of their class ids, `[1, K]` (integer or float)",
    "postprocess.decoder.count": "`nms_inside`: the output holding how many of the K rows are detections; `null`: rows scoring above the threshold",
    "postprocess.decoder.box_format": "`nms_inside`: coordinate order of a box (TF Object Detection API: `yxyx`; EfficientNMS: `xyxy`)",
    "postprocess.decoder.normalized": "`nms_inside`: coordinates are fractions of the network input (TF Object Detection API), else its pixels",
    "postprocess.decoder.class_offset": "`nms_inside`: subtracted from a class id before it names a class (TF Object Detection API: 1)",
    "postprocess.decoder.activation": (
        "`classify`: `softmax` over the classes, `sigmoid` per class, `none` (the output is already a probability); "
        "`segment`: of a one-channel output"
    ),
    "postprocess.decoder.top_k": "`classify`: classes reported per frame, best first (those at or above `score_threshold`)",
    "postprocess.decoder.labels": "`classify`, `segment`: a text file beside the pipeline, one class name a line (instead of `postprocess.classes`)",
    "postprocess.decoder.channels_last": "`segment`: the output is `[1, H, W, C]` (else `[1, C, H, W]`)",
    "postprocess.decoder.threshold": "`segment`, one channel: foreground where the probability is above this (several channels: argmax)",
    "postprocess.decoder.anchors.generate.strides": "one stride per layer; consecutive layers of equal stride share one grid",
    "postprocess.decoder.anchors.generate.aspect_ratios": "width / height of the anchors each layer places per cell",
    "postprocess.decoder.anchors.generate.fixed_anchor_size": "every anchor is 1 x 1: the model regresses sizes in input units (BlazeFace)",
    "postprocess.decoder.anchors.generate.reduce_boxes_in_lowest_layer": "layer 0 places three anchors: scale 0.1 ratio 1, its scale ratio 2 and 0.5",
    "postprocess.decoder.anchor_layout": "corner order of an anchor tensor (not with `generate`)",
    "postprocess.decoder.box_layout": (
        "what a row of `box_encodings` starts with: `yxhw` (TF) or `xywh` (MediaPipe's `reverse_output_order`); "
        "keypoint pairs follow in the same order"
    ),
    "postprocess.decoder.box_size": (
        "`exp`: size = exp(t / scale) x anchor size (TF's log-space coding); `linear`: size = t / scale x anchor size "
        "(MediaPipe without `apply_exponential_on_box_size`)"
    ),
    "postprocess.decoder.score_activation": "`sigmoid` per class, or `softmax` over all classes",
    "postprocess.decoder.background_class": "class 0 of the logits is background and is skipped",
    "postprocess.decoder.clip_boxes": "clip boxes to the image",
    "postprocess.decoder.output": "the output tensor",
    "postprocess.decoder.dilation": "grow the text pixels by a 2 x 2 dilation before the regions are found (PaddleOCR's `use_dilation`)",
    "postprocess.nms": (
        "which boxes non-maximum suppression compares: those of the same class (`per_class`), or all of them (`class_agnostic`, as YOLOX's demo)"
    ),
    "postprocess.decoder.layout": (
        "`v5`: `[1, N, 5 + C]` (cx, cy, w, h, objectness, classes; with `anchors`: a raw head's logits); `v8`: `[1, 4 + C, N]`; "
        "`yolox`: `[1, N, 5 + C]` raw (cell offsets, log sizes, objectness, classes), decoded on grids laid from the input size"
    ),
    "postprocess.classes": ("class names, in the model's order (without the background class); `segment` with one channel: [background, foreground]"),
    "sinks": (
        "where each frame's detections go; paths are inside the report folder. Default: one `jsonl` sink. `[]` is refused: "
        "`[{kind: null}]` writes nothing (a measured run still writes detections.jsonl into its report folder)"
    ),
    "sinks[].kind": (
        "`jsonl`, `video`, `mask` (a `segment` decoder's masks as PNGs), `mcap` (foxglove.ImageAnnotations for Foxglove, on each "
        "frame's recorded stamp), `foxglove` (a live Foxglove WebSocket view; guides/recordings.md) or `null` (YAML's `kind: null` is accepted too)"
    ),
    "sinks[].images": "also each frame as a JPEG foxglove.CompressedImage on `image_topic`, so the file opens alone (about 30 ms a 1080p frame)",
    "sinks[].path": (
        "file name (`mask`: folder name) inside the report folder; not hidden, not one of the run's own files "
        "(`report.json`, `junit.xml`, ...), and no two outputs on one path (checked at load)"
    ),
    "sinks[].fourcc": (
        "video codec; `mp4v` (MPEG-4 part 2) plays everywhere. The path's suffix picks the container: "
        "`.mp4`, `.mov`, `.mkv` or `.avi` (checked at load)"
    ),
    "sinks[].exact": "boxes and scores with every digit (what an evaluation run on a target writes); false: boxes to 2 "
    "decimals, scores to 4",
    "sinks[].mosaic": "several cameras: one video of every camera side by side, a tile each (at `path`), instead of `annotated-NAME.mp4` per camera",
    "budgets": "what the run is judged against; no budget at all gives INCONCLUSIVE",
    "budgets.end_to_end": "latency limits from capture to the end of the sinks",
    "budgets.stages": "latency limits per stage",
    "budgets.environment": "what the device must be set to for the measurement to count",
    "budgets.environment.power_mode": "nvpmodel mode name the device must be in (e.g. `MAXN`)",
    "budgets.environment.clocks_locked": "CPU, GPU and EMC clocks at min = max = hardware maximum (what `jetson_clocks` does)",
    "budgets.environment.cpu_governor": "cpufreq governor every online CPU must use (e.g. `performance`)",
    "budgets.environment.on_unmet": "`fail`: an unmet or unreadable requirement fails (or is INCONCLUSIVE); `warn`: a WARN line only",
    "budgets.accuracy": (
        "the run's detections against the host's FP32 reference on the same frames; `map50_95`, `map50` and "
        "`min_recall_at_precision` (per class of the model, its recall at `evaluation.recall_at_precision`): minimums on "
        "labelled images, judged by `sdk evaluate` on the 95 % bootstrap bound (guides/evaluate.md)"
    ),
    "budgets.accuracy.min_recall_at_precision": (
        "model class name -> its recall at `evaluation.recall_at_precision` (IoU 0.5) on the labels, at least (0 to 1); "
        "judged per class on its 95 % bootstrap bound as `accuracy.min_recall_at_precision.CLASS`"
    ),
    "budgets.determinism": "two runs on the same replay; without tolerances: bit-identical outputs",
    "calibration": "INT8 calibration (needed by `model.precision: int8`)",
    "calibration.source": "a `file://` or `images://` recording to calibrate on; `null`: the pipeline's source",
    "calibration.method": "`entropy` (TensorRT's KL threshold), `minmax` or `percentile`",
    "calibration.accuracy": "the accuracy gate: INT8 against FP32 on the held-out frames",
    "calibration.fallback": "`fp16`: when the gate fails, keep the worst layers out of INT8 until it passes; `none`: refuse",
    "service": "the runtime as a long-running service on the vehicle",
    "service.degraded": "deadline supervision: when the runtime sheds load and when it stops",
    "service.heartbeat_udp": "`host:port`: also send each status as a UDP datagram",
    "service.cpu_affinity": "CPUs the runtime is pinned to, where permitted",
    "service.lock_memory": "`mlockall` the runtime's memory, where permitted",
    "health": "the health check of a release on trial, run by the device before the release is committed",
    "evaluation": (
        "how `sdk evaluate` scores the model on labelled images: its own score floor and NMS, the class map, and the labels an "
        "acceptance run is judged on (guides/evaluate.md)"
    ),
    "evaluation.nms": "`per_class` (COCO's evaluations) or `class_agnostic`: which boxes the evaluation's NMS compares",
    "evaluation.classes": (
        "model class name -> label category name, for classes whose names differ from the labels'; `null` leaves a class out. "
        "Unlisted classes go to the category of the same name"
    ),
    "evaluation.labels": (
        "labels of the images the source replays (COCO detection JSON or an Ultralytics dataset YAML, relative to this file; "
        "read on the host): a deploy or `sdk validate` scores its own detections against them and judges the budgets on labels; "
        "`sdk calibrate` and `sdk optimize` judge candidates' mAP drop on them"
    ),
    "evaluation.images": "a COCO JSON's image folder (default: images/ beside it, else its folder)",
}

TARGET_MEANINGS = {
    "host": "address or name of the device",
    "user": "the deploy user on the device (need not be root)",
    "key_file": "private key for key-only authentication (no agent, no agent forwarding); refused when others can read it",
    "key_passphrase_env": "the environment variable holding `key_file`'s passphrase (else it is asked on a terminal)",
    "host_key": "the pinned host key; exactly one of `known_hosts` or `fingerprint`. An unknown or changed key is refused, never added",
    "host_key.known_hosts": "a known_hosts file, relative to the target file",
    "host_key.fingerprint": "the OpenSSH SHA256 fingerprint of the device's host key",
    "platform": "the device family: decides DLA facts and which CUDA binaries a release carries",
    "remote_root": "the folder on the device that holds the release store, environments and the service state",
    "python": "the device's Python (3.10 or newer)",
    "jump": "another target used as a jump host (one hop; its host key is pinned too)",
    "timeouts": "SSH timeouts",
}

CLI_MEANINGS = {
    "target": "target name, list or group (see above)",
    "pipeline": "pipeline file (YAML)",
    "lines": "lines of the log to show",
}


# ---------------------------------------------------------------- the pipeline file


__all__ = ["CLI_MEANINGS", "MEANINGS", "TARGET_MEANINGS"]
