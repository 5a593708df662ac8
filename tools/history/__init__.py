"""The run history: every measured run indexed into one SQLite database beside the reports, queried, compared and summarised.

`store.py` (the database: schema, migrations, writers that never fail a run), `record.py` (a report folder as a row),
`hook.py` (what a finished run calls: the history, then MLflow), `query.py` (`sdk history`), `trends.py` (its
`--html` page), `samples.py`, `stats.py` and `noise.py` (per-frame samples, the bootstrap, the history's run-to-run
spread), `compare.py` and `resolve.py` (`sdk compare`), `gate.py` (the pytest plugin's regression gate),
`fleet_report.py` (the fleet summary), `mlflow_log.py` (optional MLflow logging), `commands.py` (the command line).
Standard library and numpy only; MLflow is imported only when asked for.
"""
