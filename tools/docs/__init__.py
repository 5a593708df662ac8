"""The documentation's generated pages (`python -m tools.docs.reference`) and the site's build hooks (`hooks.py`)."""
