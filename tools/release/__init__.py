"""Release bundles and staging them into a target's store, their signatures (`signing.py`), and the check that a
target's current release runs a given pipeline file (`current.py`)."""
