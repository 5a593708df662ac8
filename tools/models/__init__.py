"""Bringing a model: `sdk init` (`init_pipeline.py`, `init_cascade.py`; the families it recognises in `families.py`,
the decoder blocks it writes in `family_decoders.py`, the tensors both read in `tensors.py`), `sdk prepare`
(`prepare.py`), model downloads (`prefetch.py`), and what `sdk optimize` recorded in a model (`optimized.py`)."""
