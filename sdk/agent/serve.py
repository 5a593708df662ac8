"""`python -m sdk store --root R serve`: one device process answering a whole deploy's store requests.

The host starts it once per SSH session and sends one JSON request a line; every answer is one JSON
line. A request is `{"argv": [OP, ARGS...]}` (the same operations as `python -m sdk store OP`, by the
same code), `{"put": PATH, "data": TEXT}` (a small file written whole: a manifest, its signature, a
verify key), `{"probe": true}`, `{"service-status": true}`, `{"receive": ["SHA:SIZE", ...]}`,
`{"lock": OWNER, "lease": S, "wait": S}` and `{"unlock": true}`. An empty line is the host's heartbeat.

The agent holds the deploy lock for its session itself (sdk/agent/lease.py, decision 0810): one device
Python start-up per deploy.

`receive` is the upload: the answer is where each object's partial upload (`store/.upload-<sha>`)
stands, then the host streams every object's missing bytes back to back on stdin. Each object is
hashed as it is written (a resumed one after re-reading what was there), and only when the stream's
sha256 is the object's name is it fsynced, made read-only and renamed into the store, in a
background thread while the next object arrives. A wrong hash removes the upload; a failed write
(a full disk) removes its partial and ends the process after its error line, since the rest of the
stream can no longer be read in step. A cut link leaves the partial for the next deploy to resume.

Why one process: a Python start on a small device costs 0.1-0.3 s, and a deploy asked for about ten.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import sys
from pathlib import Path

from sdk.agent.lease import AgentLease, Requests
from sdk.durable import fsync_dir
from sdk.errors import ReleaseError, SdkError
from sdk.store.faults import point
from sdk.store.objects import DISK_FULL, ReleaseStore

BLOCK = 1 << 20


def _answer(out, answer: dict) -> None:
    out.write(json.dumps(answer).encode() + b"\n")
    out.flush()


def _error(exc: BaseException, op: str) -> dict:
    if isinstance(exc, SdkError):
        return {"error": exc.message, "hint": exc.hint}
    if isinstance(exc, OSError):
        return {"error": f"`store {op}` failed on the target: {exc.strerror or exc} ({exc.filename or '-'})", "errno": exc.errno}
    return {"error": f"`store {op}` failed on the target: {exc}"}


def serve(root: Path, stdin=None, stdout=None) -> int:
    stdin = stdin or sys.stdin.buffer
    stdout = stdout or sys.stdout.buffer
    store = ReleaseStore(root)
    lease = AgentLease(store)
    requests = Requests(stdin, lease.heard)
    _answer(stdout, {"ready": True, "pid": os.getpid()})
    try:
        return _serve(root, store, lease, requests, stdin, stdout)
    finally:
        requests.close()
        lease.end("the host closed the lock")  # the session ended (or the host's stream broke): as `hold-lock` does


def _serve(root: Path, store: ReleaseStore, lease: AgentLease, requests: Requests, stdin, stdout) -> int:
    while (request := requests.next()) is not Requests.END:
        if not isinstance(request, dict):
            _answer(stdout, {"error": f"not a request: {request[:80]!r}"})
            return 2
        try:
            result = _handle(root, store, lease, requests, request, stdin, stdout)
        except ReceiveFailed as failed:
            requests.close()
            _answer(stdout, failed.answer)
            return 1  # the stream is out of step: the host starts a new agent for its next request
        except (SdkError, OSError) as exc:
            op = (request.get("argv") or ["put" if "put" in request else "request"])[0]
            result = _error(exc, op)
        finally:
            if "receive" in request:
                requests.resume()  # a no-op after a broken stream: requests.close() ends the reader first
        _answer(stdout, {"ok": result} if "error" not in result else result)
    return 0


def _handle(root: Path, store: ReleaseStore, lease: AgentLease, requests: Requests, request: dict, stdin, stdout) -> dict:
    if "argv" in request:
        from sdk.store.cli import main as store_main

        return store_main(["--root", str(root), *request["argv"]])
    if "receive" in request:
        return Receiver(store, request["receive"], lease.heard, requests.resume).run(stdin, stdout)
    if "lock" in request:
        return lease.acquire(str(request["lock"]), float(request.get("lease", 30.0)), float(request.get("wait", 0.0)))
    if "unlock" in request:
        return lease.end("the host closed the lock")
    if "put" in request:
        return put(Path(request["put"]), request["data"].encode())
    if "probe" in request:
        from sdk.probe import fingerprint

        return fingerprint(str(root))
    if "service-status" in request:
        from sdk.service.control import SERVICE_DIR, status

        return status(root / SERVICE_DIR)
    return {"error": f"unknown request {sorted(request)}"}


def put(path: Path, data: bytes) -> dict:
    """A small file written whole and synced; a partial one is removed."""
    try:
        with path.open("wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError:
        path.unlink(missing_ok=True)
        raise
    return {"written": str(path), "bytes": len(data)}


class ReceiveFailed(Exception):
    def __init__(self, answer: dict) -> None:
        super().__init__(answer.get("error"))
        self.answer = answer


class Receiver:
    """Write, hash and publish a stream of objects (see the module's docstring)."""

    def __init__(self, store: ReleaseStore, specs: list[str], heard=lambda: None, streamed=lambda: None) -> None:
        self.store = store
        self.heard = heard  # every block read proves the host alive (the deploy lease)
        self.streamed = streamed  # called once the stream's last byte is read: stdin carries request lines again
        self.objects = []
        for spec in specs:
            sha256, _, size = spec.partition(":")
            self.store.object_path(sha256)  # a valid object name, or a ReleaseError
            self.objects.append((sha256, int(size)))

    def offsets(self) -> dict[str, int]:
        """Bytes already on the device for each object (a partial upload longer than its object starts over)."""
        found = {}
        for sha256, size in self.objects:
            path = self.store.upload_path(sha256)
            try:
                length = path.stat().st_size
            except FileNotFoundError:
                length = 0
            if length > size:
                path.unlink()
                length = 0
            found[sha256] = length
        return found

    def run(self, stdin, stdout) -> dict:
        from concurrent.futures import ThreadPoolExecutor

        self.store.ensure()
        offsets = self.offsets()
        _answer(stdout, {"offsets": offsets})
        installed = []
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="publish") as publisher:
            pending = []
            for sha256, size in self.objects:
                digest = self._receive(stdin, sha256, size, offsets[sha256])
                pending.append(publisher.submit(self._publish, sha256, digest))
            self.streamed()  # the host's heartbeats are read again while the last objects are published
            for future in pending:
                installed.append(future.result())
        fsync_dir(self.store.objects)
        return {"installed": installed}

    def _receive(self, stdin, sha256: str, size: int, offset: int) -> str:
        path = self.store.upload_path(sha256)
        digest = hashlib.sha256()
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ReceiveFailed(self._write_failed(path, exc, size - offset)) from None
        try:
            if offset:
                with path.open("rb") as existing:
                    while offset - existing.tell() > 0 and (block := existing.read(min(BLOCK, offset - existing.tell()))):
                        digest.update(block)
                os.lseek(fd, offset, os.SEEK_SET)
            os.ftruncate(fd, offset)
            left = size - offset
            while left > 0:
                block = stdin.read1(min(BLOCK, left)) if hasattr(stdin, "read1") else stdin.read(min(BLOCK, left))
                if not block:
                    raise ReceiveFailed({"error": "the host's stream ended early", "cut": True})  # keeps the partial
                self.heard()
                digest.update(block)
                view = memoryview(block)
                try:
                    while view:
                        view = view[os.write(fd, view) :]
                except OSError as exc:
                    os.close(fd)  # its blocks are freed only once closed: the free space reported is the real one
                    fd = -1
                    raise ReceiveFailed(self._write_failed(path, exc, left)) from None
                left -= len(block)
        finally:
            if fd >= 0:
                os.close(fd)
        return digest.hexdigest()

    def _write_failed(self, path: Path, exc: OSError, left: int) -> dict:
        """A refused write: the partial is removed (a full disk's cannot be resumed into the space that is not there)."""
        try:
            path.unlink(missing_ok=True)
        except OSError:  # a file system turned read-only keeps it; the next deploy resumes or removes it
            pass
        answer = {"error": f"writing {path} failed: {exc.strerror or exc} (errno {exc.errno})", "errno": exc.errno, "path": str(path)}
        if exc.errno in DISK_FULL:
            answer.update(disk_full=True, free_bytes=self.store.free_bytes(), need=left)
        return answer

    def _publish(self, sha256: str, actual: str) -> str:
        """The written bytes' hash checked, then fsync, read-only, rename (sdk/store/objects.py's install, hash given)."""
        path = self.store.upload_path(sha256)
        if actual != sha256:
            path.unlink(missing_ok=True)
            raise ReleaseError(f"object {sha256[:12]} arrived corrupt (got {actual[:12]}); that upload was discarded")
        try:
            with path.open("rb") as handle:
                os.fsync(handle.fileno())  # a full disk can surface here (delayed allocation)
            path.chmod(0o444)
            os.replace(path, self.store.object_path(sha256))
            point("store.object-installed")
        except OSError as exc:
            path.unlink(missing_ok=True)
            if exc.errno == errno.ENOSPC:
                raise
            raise ReleaseError(f"object {sha256[:12]} could not be stored: {exc.strerror or exc}; that upload was discarded") from None
        return sha256
