"""Reaching a target: a session (`sessions.py`: local or over SSH, one protocol in `session_protocol.py`), OpenSSH
(`ssh.py`, `known_hosts.py`, `ssh_keys.py`), the device agent it installs (`ssh_agent.py`), labgrid places
(`labgrid_place.py`), and the processes a session runs (`local_process.py`, `remote_process.py`)."""
