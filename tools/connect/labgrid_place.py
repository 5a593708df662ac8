"""A target that is a labgrid place: acquired for one session, reached over SSH through its NetworkService, released
at the end whatever happens (an error, Ctrl-C). labgrid is a host-only package, imported here and only here, lazily.

The coordinator is the target file's `labgrid.coordinator`, else labgrid's own `LG_COORDINATOR` variable, else
labgrid's default 127.0.0.1:20408. The SSH address, port and user come from the place's NetworkService; the key
and the host-key pin still come from the target file (a bench's key is never trusted on first use, decision 0803).
A power cycle, when a test asks for one, goes through the place's power driver as `labgrid-client power cycle` does.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import signal
import threading

from sdk.errors import TargetError

DEFAULT_COORDINATOR = "127.0.0.1:20408"  # labgrid's own default


def coordinator_of(settings) -> str:
    return settings.coordinator or os.environ.get("LG_COORDINATOR") or DEFAULT_COORDINATOR


class LabgridPlace:
    """Context manager: `with LabgridPlace(coordinator, place, where) as place: place.network_service()`."""

    def __init__(self, coordinator: str, place: str, where: str) -> None:
        self.coordinator = coordinator
        self.place = place
        self.where = where
        self._session = None
        self._acquired = False
        self.borrowed = False

    def __enter__(self) -> LabgridPlace:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def acquire(self) -> None:
        try:
            from labgrid.remote.client import start_session
        except ImportError:
            raise TargetError(
                f"{self.where}: the target is a labgrid place but labgrid is not installed", hint="pip install 'perception-deploy-sdk[labgrid]'"
            ) from None
        args = argparse.Namespace(place=self.place, allow_unmatched=False, kick=False, action=None, delay=None, name=None)
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # labgrid prints "acquired place X"
                self._session = start_session(self.coordinator, extra={"args": args})
                holder = self._session.get_place(self.place).acquired
                if holder and holder == f"{self._session.gethostname()}/{self._session.getuser()}":
                    self.borrowed = True  # acquired already by this user here (labgrid-client acquire, labgrid's pytest plugin): used, left acquired
                else:
                    with _ctrl_c_after_the_answer():
                        self._run(self._session.acquire())
                        self._acquired = True
        except BaseException as exc:  # Ctrl-C or an error half-way: whatever was taken goes back
            self.release()
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            raise TargetError(
                f"{self.where}: cannot acquire labgrid place {self.place!r} at {self.coordinator}: {_reason(exc)}",
                hint="check the place with `labgrid-client -p PLACE show` (is it acquired by someone else?)",
            ) from None

    def _run(self, coroutine):
        return self._session.loop.run_until_complete(coroutine)

    def network_service(self) -> dict:
        """The place's NetworkService: {address, port, username}."""
        place = self._session.get_place(self.place)
        services = [r for (_, cls), r in self._session.get_target_resources(place).items() if cls == "NetworkService"]
        if len(services) != 1:
            raise TargetError(
                f"{self.where}: labgrid place {self.place!r} has {len(services)} NetworkService resources; the SDK needs exactly one",
                hint="add a match for one NetworkService to the place (labgrid-client -p PLACE add-match EXPORTER/GROUP/NetworkService)",
            )
        params = services[0].params
        return {"address": str(params["address"]), "port": int(params.get("port") or 22), "username": str(params["username"])}

    def power_cycle(self, delay: float | None = None) -> None:
        """Off, wait, on through the place's power driver (labgrid's PowerProtocol)."""
        self._session.args.action = "cycle"
        self._session.args.delay = delay
        try:
            self._session.power()
        except Exception as exc:
            raise TargetError(
                f"{self.where}: power cycle of labgrid place {self.place!r} failed: {_reason(exc)}", hint="does the place have a power resource?"
            ) from None

    def release(self) -> None:
        session, self._session = self._session, None
        if session is None:
            return
        try:
            if self._acquired:
                with contextlib.redirect_stdout(io.StringIO()):
                    session.loop.run_until_complete(session.release())
        except Exception:  # noqa: S110 - already released, or the coordinator is gone: nothing more to give back
            pass
        finally:
            self._acquired = False
            try:
                session.loop.run_until_complete(session.stop())
            except Exception:  # noqa: S110
                pass
            session.loop.close()


@contextlib.contextmanager
def _ctrl_c_after_the_answer():
    """A first Ctrl-C during the acquisition waits for the coordinator's answer, then interrupts: the place it may just
    have granted is then known to be held, and released. Cut mid-call, the grant would be the coordinator's alone and
    the place would stay acquired by nobody's session. A second Ctrl-C interrupts at once (a coordinator that does not
    answer). Only where Python delivers signals: the main thread."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    pressed = []

    def defer(signum, frame) -> None:
        if pressed:
            raise KeyboardInterrupt
        pressed.append(signum)

    signal.signal(signal.SIGINT, defer)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if pressed:
        raise KeyboardInterrupt


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def reached_target(target, service: dict):
    """The target as reached through the place's NetworkService (address, port, user); key and pin from the file."""
    from pydantic import ValidationError

    from tools.targets import RemoteTarget

    data = {**target.spec.model_dump(exclude_none=True), "host": service["address"], "port": service["port"], "user": service["username"]}
    try:
        spec = type(target.spec).model_validate(data)  # the place's values pass the same allow-lists as a target file's
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"])
        raise TargetError(
            f"{target.name}: labgrid place {target.spec.labgrid.place!r}: its NetworkService gives {field} = {error.get('input')!r}: {error['msg']}",
            hint="fix the exporter's NetworkService (address, port, username) for this place",
        ) from None
    return RemoteTarget(target.name, spec, target.path)


def open_place_session(target):
    """An SshSession to the place's NetworkService; the place is released when the session closes."""
    from tools.connect.session_ssh import SshSession
    from tools.connect.ssh import connect

    settings = target.spec.labgrid
    place = LabgridPlace(coordinator_of(settings), settings.place, target.name)
    place.acquire()
    try:
        reached = reached_target(target, place.network_service())
        session = SshSession(reached, connect(reached))
        session.place = place
        return session
    except BaseException:
        place.release()
        raise
