"""The device agent: one process per deploy session, answering the host's store requests, the service's status and the
probe (`python -m sdk store --root R serve`), and holding the deploy lease for the session."""
