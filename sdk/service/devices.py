"""What the locked-down unit lets a pipeline reach: device nodes and address families, from the pipeline alone.

A unit hides every device (DevicePolicy=closed) but the ones a pipeline's source and backend open:

- a V4L2 camera (`v4l2://`): the whole V4L2 class (`char-video4linux`), not one node: a USB camera
  replugged by the reconnect logic may come back under another /dev/videoN, and a camera absent when
  the service starts has no node systemd could resolve (DeviceAllow= resolves paths at start);
- the GPU (backend `tensorrt`, or `auto`, which takes TensorRT where the release has an engine), a CSI
  camera (Argus hands frames over in NVMM buffers) or a GStreamer pipeline: the Jetson iGPU's nodes as
  NVIDIA's container runtime for JetPack 5 and 6 passes them to a GPU container (nvidia-container-toolkit,
  Tegra "devices.csv"/CDI spec: /dev/nvmap, /dev/nvhost-ctrl, /dev/nvhost-ctrl-gpu, /dev/nvhost-gpu,
  /dev/nvhost-as-gpu, ... and JetPack 6's /dev/nvgpu/igpu0/* and /dev/host1x-fence), plus a discrete
  GPU's /dev/nvidia* (DRIVE's dGPU, a workstation);
- DLA (`model.dla`): /dev/nvhost-nvdla<core> and its control node.

A path that does not exist on a given board is skipped by systemd with a log line, so one list serves
JetPack 5 (nvhost nodes) and 6 (nvgpu nodes). Network address families only where the pipeline uses
the network: a UDP heartbeat, or a GStreamer pipeline (it may read RTSP/UDP).
"""

from __future__ import annotations

from dataclasses import dataclass

JETSON_GPU_NODES = (
    "/dev/nvmap",
    "/dev/nvhost-ctrl",
    "/dev/nvhost-ctrl-gpu",
    "/dev/nvhost-gpu",
    "/dev/nvhost-as-gpu",
    "/dev/nvhost-prof-gpu",
    "/dev/nvhost-tsg-gpu",
    "/dev/nvhost-sched-gpu",
    "/dev/nvhost-vic",
    "/dev/nvhost-nvdec",
    "/dev/nvgpu/igpu0/ctrl",
    "/dev/nvgpu/igpu0/as",
    "/dev/nvgpu/igpu0/channel",
    "/dev/nvgpu/igpu0/tsg",
    "/dev/nvgpu/igpu0/power",
    "/dev/nvgpu/igpu0/prof",
    "/dev/nvgpu/igpu0/sched",
    "/dev/host1x-fence",
)
DISCRETE_GPU_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
CAMERA_CLASS = "char-video4linux"  # every V4L2 node, whatever its number (/proc/devices: video4linux)
ARGUS_SOCKET = "/tmp/argus_socket"  # nvargus-daemon's socket: CSI cameras go through it


@dataclass(frozen=True)
class Access:
    devices: tuple[str, ...]  # DeviceAllow= entries, read-write
    network: bool  # AF_INET/AF_INET6 and an IP address allow-list are needed
    argus: bool  # the CSI camera daemon's socket must be visible in the private /tmp


def source_scheme(uri: str) -> str:
    return uri.partition("://")[0]


def pipeline_access(spec) -> Access:
    """The device nodes and address families `spec` (a PipelineSpec) needs, over all its cameras; nothing else is
    reachable."""
    schemes = {source_scheme(camera.uri) for camera in spec.cameras.values()}
    devices: list[str] = []
    if schemes & {"v4l2", "gst"}:
        devices.append(CAMERA_CLASS)
    gpu = spec.model.backend != "onnxruntime" or bool(schemes & {"csi", "gst"})
    if gpu:
        devices += [*JETSON_GPU_NODES, *DISCRETE_GPU_NODES]
    if spec.model.dla is not None:
        core = spec.model.dla.core
        devices += [f"/dev/nvhost-nvdla{core}", f"/dev/nvhost-ctrl-nvdla{core}"]
    if "csi" in schemes:
        devices += [CAMERA_CLASS, "/dev/nvhost-vi", "/dev/nvhost-isp", "/dev/nvhost-nvcsi", "/dev/nvhost-ctrl-vi"]
    network = spec.service.heartbeat_udp is not None or "gst" in schemes
    return Access(tuple(dict.fromkeys(devices)), network, "csi" in schemes)


__all__ = ["ARGUS_SOCKET", "Access", "pipeline_access", "source_scheme"]
