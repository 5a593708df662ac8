"""The run history: every measured run indexed into one SQLite database beside the reports, queried, compared and summarised.

`store.py` (the database: schema, migrations, writers that never fail a run), `record.py` (a report folder as a row;
the hook the commands call), `query.py` (`sdk history`), `trends.py` (its `--html` page), `samples.py` and
`stats.py` (per-frame samples and the bootstrap), `compare.py` (`sdk compare`), `gate.py` (the pytest plugin's
regression gate), `fleet_report.py` (the fleet summary), `mlflow_log.py` (optional MLflow logging), `commands.py`
(the command line). Standard library and numpy only; MLflow is imported only when asked for.
"""
