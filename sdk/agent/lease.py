"""The deploy lease held by the device agent (sdk/agent/serve.py) for the life of its SSH session.

One device Python process per deploy: the agent that answers the store requests also holds the deploy
lock, with the guarantees the separate `store hold-lock` process gives (decision 0810):

- the kernel's flock is held by the agent's process: kill -9 of the agent frees it at once, and its
  lease is dead for every other process (its pid and start time are gone);
- every line from the host renews the lease (a request, or the empty heartbeat line the host sends
  every quarter lease), and so does every block of an upload stream; a reader thread reads them even
  while a long request (building an environment) runs;
- the end of the session (stdin closed: the host closed it, or its SSH session died) and a host silent
  for one lease (a pulled cable, which SSH may take minutes to notice) both end the lease the way
  `store hold-lock` ends it: the lease's own unfinished trial is rolled back first, then the lock freed.
  A silent host also ends the agent: the host is gone.

`Requests` is the agent's stdin: one thread reads the request lines, passes heartbeats to the lease and
requests to the agent's loop. After a `receive` request it stops reading until the agent has read the
upload's bytes from the same stream (`resume`).
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time

from sdk.errors import ReleaseError


class AgentLease:
    def __init__(self, store) -> None:
        self.store = store
        self.holder = None
        self._mutex = threading.Lock()
        self._heard = time.monotonic()
        self._renewed = 0.0

    def heard(self) -> None:
        """The host is alive: a line or an upload block arrived. Renews the lease (at most 8 times a lease)."""
        now = time.monotonic()
        self._heard = now
        holder = self.holder
        if holder is None or now - self._renewed < holder.lease.lease_s / 8:
            return
        with self._mutex:
            if self.holder is holder:
                holder.renew()
                self._renewed = now

    def acquire(self, owner: str, lease_s: float, wait_s: float) -> dict:
        if self.holder is not None:
            raise ReleaseError(f"this session already holds the deploy lock as {self.holder.lease.describe()}")
        holder = self.store.acquire(owner, wait_s=wait_s, lease_s=lease_s)
        with self._mutex:
            self.holder = holder
            self._heard = self._renewed = time.monotonic()
        threading.Thread(target=self._watch, args=(holder,), name="lease-watch", daemon=True).start()
        return {"locked": owner, "token": holder.token}

    def end(self, why: str, only=None) -> dict:
        """Roll back this lease's own unfinished trial, then free the lock (nothing when none is held, or when
        `only` is given and no longer the holder)."""
        with self._mutex:
            holder = self.holder
            if holder is None or (only is not None and holder is not only):
                return {"unlocked": None, "rolled_back": None}
            self.holder = None
            from sdk.store.trial import end_lease

            return {"unlocked": holder.lease.owner, "rolled_back": end_lease(self.store, holder, why)}

    def _watch(self, holder) -> None:
        lease_s = holder.lease.lease_s
        while self.holder is holder:
            time.sleep(lease_s / 8)
            if self.holder is holder and time.monotonic() - self._heard > lease_s:
                if self.end(f"no heartbeat from the host for {lease_s:g} s", only=holder)["unlocked"] is None:
                    return  # unlocked meanwhile by the host itself
                os._exit(1)  # the host is gone; whatever the agent was doing for it ends here, as a kill would


class Requests:
    """The agent's stdin: request lines (JSON), heartbeats (empty lines) and, after `receive`, raw upload bytes."""

    END = None

    def __init__(self, stdin, heard) -> None:
        self.stdin = stdin
        self._heard = heard
        self._queue: queue.Queue = queue.Queue()
        self._streamed: threading.Event | None = None  # the request in hand's: set when its stream is read
        self._closed = threading.Event()
        threading.Thread(target=self._read, name="requests", daemon=True).start()

    def next(self):
        """The next request (a dict), the unparsable line (bytes), or END when the host closed the session."""
        request, self._streamed = self._queue.get()
        return request

    def resume(self) -> None:
        """The upload's bytes of the request in hand are read: go on reading request lines (once per request)."""
        streamed, self._streamed = self._streamed, None
        if streamed is not None:
            streamed.set()

    def close(self) -> None:
        """The agent is done (a stream out of step included): the reader stops."""
        self._closed.set()
        self.resume()

    def _read(self) -> None:
        try:
            while line := self.stdin.readline():
                self._heard()
                if not line.strip():
                    continue  # a heartbeat
                try:
                    request = json.loads(line)
                except ValueError:
                    request = None
                if not isinstance(request, dict):
                    self._queue.put((line, None))
                    return
                if "receive" not in request:
                    self._queue.put((request, None))
                    continue
                streamed = threading.Event()
                self._queue.put((request, streamed))
                streamed.wait()  # the agent reads the stream's bytes from stdin now
                if self._closed.is_set():
                    return
        except (OSError, ValueError):
            pass
        self._queue.put((self.END, None))
