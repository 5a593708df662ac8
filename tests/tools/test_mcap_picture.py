"""tools/docs/mcap_picture.py: the docs' picture of an mcap sink's file draws each box where the annotations put it,
in its colour, over the frame logged with them; a frame number the file does not have is one error line."""

from __future__ import annotations

import cv2
import numpy as np

from sdk.frame import Frame
from sdk.postprocess.detections import Detections
from sdk.sinks.mcap_sink import PALETTE, McapSink
from tools.docs.mcap_picture import main


def test_the_picture_draws_the_files_boxes_over_its_frame(tmp_path, capsys):
    sink = McapSink(tmp_path / "d.mcap", images=True)
    sink.open()
    detections = Detections(4, ("person",))
    detections.count, detections.scores[0] = 1, 0.8
    detections.boxes[0] = [20, 30, 120, 90]
    for i in range(2):
        sink.write(Frame(i, 0, np.full((120, 160, 3), 40, np.uint8), stamp_ns=1_700_000_000_000_000_000 + i), detections)
    sink.close()
    assert main([str(tmp_path / "d.mcap"), str(tmp_path / "p.jpg"), "--frame", "1"]) == 0
    assert capsys.readouterr().out.endswith("frame 1 of 2, 1 box(es)\n")
    picture = cv2.imread(str(tmp_path / "p.jpg")).astype(int)
    r, g, b = PALETTE[0]
    colour = np.array([b, g, r]) * 255
    assert np.abs(picture[60, 20] - colour).max() < 40 and np.abs(picture[90, 70] - colour).max() < 40  # left and bottom edges
    assert np.abs(picture[60, 70] - 40).max() < 12  # inside: the frame, untouched
    assert main([str(tmp_path / "d.mcap"), str(tmp_path / "q.jpg"), "--frame", "2"]) == 1
    assert capsys.readouterr().err.startswith(f"error: {tmp_path / 'd.mcap'}: --frame 2; allowed: 0 to 1")
    assert not (tmp_path / "q.jpg").exists()
