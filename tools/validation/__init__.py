"""On top of deploy: `sdk validate` (`validate.py`, fleets in `validate_fleet.py`), `sdk check` (`pipeline_check.py`),
`sdk selftest` (`selftest.py`, the gpu tests' bundle in `selftest_bundle.py`) and the pytest plugin."""
