"""A killed run's unfinished video segment, kept up to its last complete frame where the container allows.

A segment is finished (its index written) when it is closed, so a kill -9 leaves the current one
without: an MP4 without its `moov` box (OpenCV cannot open it at all), an AVI without its index and
with header sizes never filled in (FFmpeg reads it, torn last chunk and all), a Matroska file with
an open-ended segment. What each becomes, with OpenCV only (FFmpeg may not be on the device):

- AVI: the chunks are self-describing. It is cut after its last complete frame chunk, its sizes and
  frame counts are written and an `idx1` index is added (key frames: every MJPG frame, MPEG-4 part
  2 intra VOPs). Frames past the first RIFF (OpenDML, beyond 1 GiB) are not kept.
- MP4/MOV with MPEG-4 part 2 (mp4v, XVID, DIVX, FMP4) or MJPG: the `mdat` holds the frames back to
  back. MPEG-4 part 2 frames begin with a start code (a VOP is the last of a frame's), JPEG frames
  run from SOI to EOI, so the frames are found in the bytes. The last MPEG-4 frame runs to the end
  of the file and may be torn: it is never kept. The sample description (with the decoder's
  configuration) comes from a two-frame probe that OpenCV writes with the segment's own settings
  (written beside the segment when it began: `.NAME.current.SUFFIX.json`), and a `moov` box is
  appended after the kept frames.
- Matroska: FFmpeg reads it to its last complete cluster as it is: kept when a frame reads.
Every kept file must open in OpenCV with the number of frames it was given and its first frame
read, else it is not kept. What cannot be kept raises Unsalvageable, with the reason.
"""

from __future__ import annotations

import json
import mmap
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

MPEG4_PART2 = ("mp4v", "XVID", "DIVX", "FMP4")
START_CODE = re.compile(rb"\x00\x00\x01[\x00-\xff]", re.DOTALL)
JPEG_START = re.compile(rb"\xff\xd8\xff")
AVIIF_KEYFRAME = 0x10
AVIF_HASINDEX = 0x10


class Unsalvageable(Exception):
    """The segment cannot be kept (the reason is the message)."""


@dataclass(frozen=True)
class Salvaged:
    frames: int  # complete frames kept
    cut_bytes: int  # the torn tail cut off (a frame the kill interrupted)
    how: str


def settings_path(current: Path) -> Path:
    return current.with_name(current.name + ".json")


def write_settings(current: Path, fourcc: str, fps: float, width: int, height: int) -> None:
    """What a salvage needs to rebuild the segment's index, written (atomically) when the segment begins."""
    final = settings_path(current)
    partial = final.with_name(final.name + ".partial")
    partial.write_text(json.dumps({"fourcc": fourcc, "fps": fps, "width": width, "height": height}))
    os.replace(partial, final)


def read_settings(current: Path) -> dict | None:
    try:
        return json.loads(settings_path(current).read_text())
    except (OSError, ValueError):
        return None


def salvage(path: Path, settings: dict | None) -> Salvaged:
    """Make the killed segment at `path` a file that plays, up to its last complete frame, in place."""
    suffix = path.suffix.lower()
    try:
        if suffix == ".avi":
            kept = _avi(path)
        elif suffix in (".mp4", ".mov"):
            kept = _mp4(path, settings)
        elif suffix == ".mkv":
            kept = Salvaged(_frames_read(path), 0, "kept as written: Matroska reads to its last complete cluster")
        else:
            raise Unsalvageable(f"no salvage for {suffix} files")
    except (struct.error, ValueError, IndexError, KeyError, TypeError) as exc:  # bytes no writer of ours left
        raise Unsalvageable(f"damaged beyond its structure: {type(exc).__name__}: {exc}") from None
    if kept.frames == 0:
        raise Unsalvageable("no complete frame in it")
    _verify(path, kept)
    return kept


def _verify(path: Path, kept: Salvaged) -> None:
    import cv2

    capture = cv2.VideoCapture(str(path))
    try:
        if not capture.isOpened() or not capture.read()[0]:
            raise Unsalvageable("OpenCV cannot read the salvaged file")
        if path.suffix.lower() != ".mkv" and int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) != kept.frames:
            raise Unsalvageable(f"OpenCV counts {int(capture.get(cv2.CAP_PROP_FRAME_COUNT))} frames in the salvaged file, not {kept.frames}")
    finally:
        capture.release()


def _frames_read(path: Path) -> int:
    import cv2

    capture = cv2.VideoCapture(str(path))
    try:
        count = 0
        while capture.isOpened() and capture.grab():
            count += 1
        return count
    finally:
        capture.release()


# ---------------------------------------------------------------- AVI


def _avi(path: Path) -> Salvaged:
    if path.stat().st_size < 12:
        raise Unsalvageable("no complete frame in it")
    with path.open("r+b") as handle:
        data = mmap.mmap(handle.fileno(), 0)
        try:
            if data[:4] != b"RIFF" or data[8:12] != b"AVI ":
                raise Unsalvageable("not an AVI file")
            movi, headers = _avi_top(data)
            frames: list[tuple[bytes, int, int, bool]] = []  # (chunk id, offset, size, key frame)
            end = at = movi + 12
            while at + 8 <= len(data):
                tag, size = data[at : at + 4], struct.unpack_from("<I", data, at + 4)[0]
                if tag in (b"idx1", b"RIFF") or at + 8 + size > len(data):
                    break  # the index of a finished file, OpenDML's next RIFF, or the torn chunk
                if tag[2:4] in (b"dc", b"db"):
                    frames.append((tag, at, size, _key_frame(data[at + 8 : at + 8 + min(size, 4096)])))
                at += 8 + size + (size & 1)
                end = min(at, len(data))
            cut = len(data) - end
            index = b"".join(struct.pack("<4sIII", tag, AVIIF_KEYFRAME if key else 0, offset - (movi + 8), size) for tag, offset, size, key in frames)
            total = end + 8 + len(index)
            struct.pack_into("<I", data, 4, total - 8)  # RIFF
            struct.pack_into("<I", data, movi + 4, end - (movi + 8))  # LIST movi
            for tag, where in headers:
                if tag == b"avih":
                    struct.pack_into("<I", data, where + 8 + 12, struct.unpack_from("<I", data, where + 8 + 12)[0] | AVIF_HASINDEX)
                    struct.pack_into("<I", data, where + 8 + 16, len(frames))
                elif tag == b"strh" and data[where + 8 : where + 12] == b"vids":
                    struct.pack_into("<I", data, where + 8 + 32, len(frames))
                elif tag == b"dmlh":
                    struct.pack_into("<I", data, where + 8, len(frames))
            data.flush()
        finally:
            data.close()
        handle.truncate(end)
        handle.seek(end)
        handle.write(b"idx1" + struct.pack("<I", len(index)) + index)
        handle.flush()
        os.fsync(handle.fileno())
    return Salvaged(len(frames), cut, "AVI cut after its last complete frame, sizes and index written")


def _avi_top(data) -> tuple[int, list[tuple[bytes, int]]]:
    """The offset of the LIST movi, and the header chunks (avih, strh, dmlh) with their offsets."""
    headers: list[tuple[bytes, int]] = []
    stack = [(12, len(data))]
    movi = None
    while stack:
        at, stop = stack.pop()
        while at + 8 <= stop:
            tag, size = data[at : at + 4], struct.unpack_from("<I", data, at + 4)[0]
            kind = data[at + 8 : at + 12] if tag == b"LIST" else None
            if kind == b"movi":
                movi = at
                break
            if kind is not None and at + 8 + size <= stop:
                stack.append((at + 12, at + 8 + size))
            elif tag in (b"avih", b"strh", b"dmlh"):
                headers.append((tag, at))
            at += 8 + size + (size & 1)
    if movi is None:
        raise Unsalvageable("no frames list (LIST movi) in it")
    return movi, headers


def _key_frame(head: bytes) -> bool:
    """An MJPG frame, or an MPEG-4 part 2 frame whose VOP is intra."""
    if head.startswith(b"\xff\xd8"):
        return True
    vop = head.find(b"\x00\x00\x01\xb6")
    return vop >= 0 and len(head) > vop + 4 and head[vop + 4] >> 6 == 0


# ---------------------------------------------------------------- MP4 / MOV


def _mp4(path: Path, settings: dict | None) -> Salvaged:
    if settings is None:
        raise Unsalvageable("its settings file is missing (the segment began before a power cut, or with an older SDK)")
    fourcc = settings.get("fourcc")
    if fourcc not in (*MPEG4_PART2, "MJPG"):
        raise Unsalvageable(f"no salvage for {fourcc} in MP4")
    if path.stat().st_size < 16:
        raise Unsalvageable("no complete frame in it")
    with path.open("r+b") as handle:
        data = mmap.mmap(handle.fileno(), 0)
        try:
            mdat, header = _mdat(data)
            starts, end = (_jpeg_frames if fourcc == "MJPG" else _mpeg4_frames)(data, mdat + header)
            if not starts:
                raise Unsalvageable("no complete frame in it")
            sizes = [b - a for a, b in zip(starts, [*starts[1:], end], strict=True)]
            keys = [fourcc == "MJPG" or _key_frame(data[a : a + 64]) for a in starts]
            cut = len(data) - end
            if end - mdat >= 1 << 32:  # the 8 bytes FFmpeg reserves before `mdat` make room for a 64-bit size
                if mdat < 8 or data[mdat - 8 : mdat] != b"\x00\x00\x00\x08free":
                    raise Unsalvageable("an mdat over 4 GiB with no room for its size")
                data[mdat - 8 : mdat + 8] = struct.pack(">I4sQ", 1, b"mdat", end - (mdat - 8))
            else:
                struct.pack_into(">I", data, mdat, end - mdat)
            data.flush()
        finally:
            data.close()
        moov = _moov(_probe(path, settings), starts, sizes, keys, settings)
        handle.truncate(end)
        handle.seek(end)
        handle.write(moov)
        handle.flush()
        os.fsync(handle.fileno())
    return Salvaged(len(sizes), cut, "MP4 index rebuilt after its last complete frame")


def _mdat(data) -> tuple[int, int]:
    at = 0
    while at + 8 <= len(data):
        size, kind = struct.unpack_from(">I4s", data, at)
        header = 16 if size == 1 else 8
        if kind == b"mdat":
            return at, header
        if size == 1:
            size = struct.unpack_from(">Q", data, at + 8)[0]
        if size < 8:
            break
        at += size
    raise Unsalvageable("no mdat box in it")


def _mpeg4_frames(data, start: int) -> tuple[list[int], int]:
    """(each complete frame's first byte, where the last of them ends). A frame begins at the first start code
    after a VOP's (a GOV or a VOP): the last frame runs to the end of the file, may be torn, and is not kept."""
    starts, vop = [], True
    for match in START_CODE.finditer(data, start):
        if vop:
            starts.append(match.start())
        vop = match.group()[3] == 0xB6
    return (starts[:-1], starts[-1]) if starts else ([], start)


def _jpeg_frames(data, start: int) -> tuple[list[int], int]:
    """(each complete JPEG frame's first byte, where the last of them ends): frames run from SOI to EOI, back to
    back; the last one is complete when the file ends with its EOI."""
    starts = [m.start() for m in JPEG_START.finditer(data, start) if m.start() == start or data[m.start() - 2 : m.start()] == b"\xff\xd9"]
    if starts and data[len(data) - 2 :] == b"\xff\xd9":
        return starts, len(data)
    return (starts[:-1], starts[-1]) if starts else ([], start)


def _probe(path: Path, settings: dict) -> dict:
    """The sample description, time scale and frame duration that OpenCV writes for these settings (two frames)."""
    import cv2
    import numpy as np

    probe = path.with_name(f".{path.stem.lstrip('.')}.probe{path.suffix}")
    size = (int(settings["width"]), int(settings["height"]))
    writer = cv2.VideoWriter(str(probe), cv2.VideoWriter_fourcc(*settings["fourcc"]), float(settings["fps"]), size)
    try:
        if not writer.isOpened():
            raise Unsalvageable(f"OpenCV cannot write {settings['fourcc']} here to learn the segment's settings")
        black = np.zeros((size[1], size[0], 3), np.uint8)
        writer.write(black)
        writer.write(black)
        writer.release()
        data = probe.read_bytes()
    finally:
        writer.release()
        probe.unlink(missing_ok=True)
    stbl = _box(data, (b"moov", b"trak", b"mdia", b"minf", b"stbl"))
    stsd = _box(data, (b"stsd",), stbl[0] + 8, stbl[1])
    stts = _box(data, (b"stts",), stbl[0] + 8, stbl[1])
    mdhd = _box(data, (b"moov", b"trak", b"mdia", b"mdhd"))[0]
    return {
        "stsd": data[stsd[0] : stsd[1]],
        "timescale": struct.unpack_from(">I", data, mdhd + (28 if data[mdhd + 8] == 1 else 20))[0],
        "delta": struct.unpack_from(">I", data, stts[0] + 20)[0],
    }


def _box(data: bytes, path: tuple[bytes, ...], start: int = 0, end: int | None = None) -> tuple[int, int]:
    """(start, end) of the box at `path`: its first name among the boxes from `start`, each next among the children."""
    end = len(data) if end is None else end
    found = None
    for depth, kind in enumerate(path):
        at = start + 8 if depth else start  # a container's children begin after its header
        found = None
        while at + 8 <= end:
            size, name = struct.unpack_from(">I4s", data, at)
            if size < 8:
                break
            if name == kind:
                found = start, end = at, at + size
                break
            at += size
        if found is None:
            raise Unsalvageable(f"OpenCV's probe file has no {kind.decode()} box")
    return found


def _full(kind: bytes, body: bytes, flags: int = 0) -> bytes:
    return _plain(kind, struct.pack(">I", flags) + body)


def _plain(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I4s", 8 + len(body), kind) + body


MATRIX = struct.pack(">9I", 0x10000, 0, 0, 0, 0x10000, 0, 0, 0, 0x40000000)


def _moov(probe: dict, starts: list[int], sizes: list[int], keys: list[bool], settings: dict) -> bytes:
    count, scale, delta = len(sizes), probe["timescale"], probe["delta"]
    duration_ms = count * delta * 1000 // scale
    width, height = int(settings["width"]), int(settings["height"])
    wide = starts and starts[-1] >= 1 << 32
    offsets = struct.pack(f">I{count}{'Q' if wide else 'I'}", count, *starts)
    stbl = _plain(
        b"stbl",
        probe["stsd"]
        + _full(b"stts", struct.pack(">III", 1, count, delta))
        + (b"" if all(keys) else _full(b"stss", struct.pack(f">I{sum(keys)}I", sum(keys), *[i + 1 for i, k in enumerate(keys) if k])))
        + _full(b"stsc", struct.pack(">IIII", 1, 1, 1, 1))
        + _full(b"stsz", struct.pack(f">II{count}I", 0, count, *sizes))
        + _full(b"co64" if wide else b"stco", offsets),
    )
    dinf = _plain(b"dinf", _full(b"dref", struct.pack(">I", 1) + _full(b"url ", b"", flags=1)))
    minf = _plain(b"minf", _full(b"vmhd", bytes(8), flags=1) + dinf + stbl)
    mdhd = _full(b"mdhd", struct.pack(">IIIIHH", 0, 0, scale, count * delta, 0x55C4, 0))
    hdlr = _full(b"hdlr", struct.pack(">I4s12x", 0, b"vide") + b"VideoHandler\x00")
    tkhd = _full(
        b"tkhd", struct.pack(">IIIII8xHHH2x", 0, 0, 1, 0, duration_ms, 0, 0, 0) + MATRIX + struct.pack(">II", width << 16, height << 16), flags=3
    )
    mvhd = _full(b"mvhd", struct.pack(">IIIIIH10x", 0, 0, 1000, duration_ms, 0x10000, 0x100) + MATRIX + bytes(24) + struct.pack(">I", 2))
    return _plain(b"moov", mvhd + _plain(b"trak", tkhd + _plain(b"mdia", mdhd + hdlr + minf)))
