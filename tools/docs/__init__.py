"""The documentation's generated pages (`python -m tools.docs.reference`: `key_pages.py` for the pipeline and target
files, `cli_pages.py` for the command line and exit codes, `meanings.py` for what the code does not describe itself)
and the site's build hooks (`hooks.py`)."""
