"""Putting a release on targets: the deploy flow (`flow.py`), fleets (`fleet.py`) and the Mender artifact
(`export.py`)."""
