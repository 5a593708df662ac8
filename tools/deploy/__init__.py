"""Putting a release on targets: the deploy flow (`flow.py`), fleets (`fleet.py`), signing (`signing.py`), outputs a
release must not overwrite (`blocked_outputs.py`), the device's scratch folder (`device_scratch.py`), and the Mender
artifact (`export.py`)."""
