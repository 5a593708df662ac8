"""Reaching a target: a session (`sessions.py`: local or over SSH, one protocol in `session_protocol.py`), OpenSSH
(`ssh.py`, `known_hosts.py`, `ssh_keys.py`), the device agent it installs (`ssh_agent.py`), labgrid places
(`labgrid_place.py`), the processes a session runs (`local_process.py`, `remote_process.py`), a scratch folder on the
device (`device_scratch.py`); and what is done to a target over it outside a deploy: `sdk targets add`
(`add_target.py`), `check` (`check_target.py`, first `local_checks.py`), `trust-key` (`trust_key.py`), probe,
rollback, status and the service (`remote_ops.py`)."""
