"""What every measuring command writes into: report folders (`report_dirs.py`), the detections file (`detections_file.py`),
SVG charts (`svg_chart.py`) and the latency plots drawn with them (`plots.py`)."""
