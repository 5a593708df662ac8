"""The host's checks of a run on a target: the FP32 reference (`reference.py`), determinism across repeats
(`determinism.py`), the verdict recombined with them (`acceptance.py`), where the host ran (`provenance.py`) and
report.html (`html_report.py`, `camera_plots.py`)."""
