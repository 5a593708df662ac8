"""What runs on a target: the committed release, a trial, and the steps between (RAUC's slots, as pointers).

    <root>/state.json      the truth: {"committed": the last release that passed its health check,
                           "history": committed releases, oldest first}; one atomic write changes both
    <root>/trial.json      present while a release is on trial: release, fallback, owner, fencing token,
                           boot id, deadline, state (running | passed)
    <root>/last_trial.json how the last trial ended, and why
    <root>/committed, current, previous   symbolic links derived from the two files above: `current`
                           names the trial while one runs and the committed release otherwise

Every step is a write of a new file then a rename (or a symlink renamed over the old one), each
followed by a kill point (sdk/store/faults.py) that the tests SIGKILL. Whatever moment a kill or a power
cut comes at, `recover()` brings back the last committed release: it is run before anything starts
or changes (sdk start, the unit's start, deploy, rollback), and by the lease's holder when its
deployer goes away.
"""

from __future__ import annotations

import json
import os
import stat as statmod
import time
from pathlib import Path

from sdk.durable import fsync_dir, open_new
from sdk.errors import ReleaseError
from sdk.release import MANIFEST, RELEASE_ID, RESERVED_PREFIX
from sdk.store.faults import point
from sdk.store.lease import boot_id, check_token, read_lease
from sdk.store.verify import NotRegular, read_text

STATE_FILE = "state.json"
TRIAL_FILE = "trial.json"
LAST_TRIAL_FILE = "last_trial.json"
ANY_TOKEN = object()
# Trials whose owner holds no lease: Mender's update module starts a trial in one invocation
# (ArtifactInstall) and commits or rolls it back in another (ArtifactCommit, ArtifactRollback), with
# no process in between. Such a trial lives until its deadline or the next boot, whatever the lease says.
MENDER_OWNER = "mender"
UNLEASED_OWNERS = (MENDER_OWNER,)
TRASH = ".trash"  # releases being pruned: out of reach first, deleted afterwards
TMP_PREFIX = RESERVED_PREFIX  # the same prefix a release file may not start with (sdk/release.py)
UPLOAD_PREFIX = ".upload-"  # kept across crashes: an interrupted upload resumes from its length
IF_DAMAGED = ("previous", "refuse")  # when the committed release fails its check at a start (sdk/store/startable.py)


def previous_of(state: dict) -> str | None:
    """The committed release before the current committed one (what `rollback` goes back to)."""
    history, committed = state["history"], state["committed"]
    if committed not in history:
        return None
    index = history.index(committed)
    return history[index - 1] if index >= 1 else None


def _valid_state(data: object) -> dict | None:
    """state.json's content when it is what this store writes: a committed release id (or null) and a list of ids."""
    if not isinstance(data, dict) or not isinstance(data.get("history", []), list):
        return None
    committed = data.get("committed")
    if committed is not None and not (isinstance(committed, str) and RELEASE_ID.match(committed)):
        return None
    history = [r for r in data.get("history") or [] if isinstance(r, str) and RELEASE_ID.match(r)]
    if len(history) != len(data.get("history") or []):
        return None
    state = {"committed": committed, "history": history}
    if data.get("if_damaged") in IF_DAMAGED:
        state["if_damaged"] = data["if_damaged"]
    floors = data.get("floors")  # per pipeline, the newest signed version committed here (sdk/store/trust.py)
    if isinstance(floors, dict):
        state["floors"] = {str(k): int(v) for k, v in floors.items() if isinstance(v, int) and not isinstance(v, bool)}
    if data.get("signatures_required") is True:  # once a key was trusted: a deleted key never turns the check off
        state["signatures_required"] = True
    if isinstance(data.get("rolled_back"), str) and RELEASE_ID.match(data["rolled_back"]):
        state["rolled_back"] = data["rolled_back"]  # the release `sdk rollback` chose, older than the floor on purpose
    return state


KEPT = ("if_damaged", "floors", "signatures_required", "rolled_back")  # carried from one state to the next


def state_record(state: dict, **changes) -> dict:
    """The state to write: committed, history and what is kept (`KEPT`), with `changes` (a None removes a kept key;
    never the "damaged" note)."""
    record = {"committed": state["committed"], "history": state["history"]}
    record.update({key: state[key] for key in KEPT if state.get(key) is not None})
    for key, value in changes.items():
        if value is None and key in KEPT:
            record.pop(key, None)
        else:
            record[key] = value
    return record


class Activation:
    """The pointer half of ReleaseStore (sdk/store/objects.py): needs its root, releases, objects, locked()."""

    # Pointers ------------------------------------------------------------------------------
    # state.json is the truth: {"committed": the last release that passed its health check, "history":
    # committed releases, oldest first}. One atomic write changes both, so no kill leaves them apart.
    # The links are derived from it (and from a trial): `committed`, `previous`, and `current`, which
    # names the trial while one runs and the committed release otherwise. `recover()` re-derives them.
    def current(self) -> str | None:
        return self._link_target("current")

    def _link_target(self, name: str) -> str | None:
        """The release a pointer names, only when it is exactly the link this store makes (`releases/<id>`):
        a directory, a file or a link to anywhere else in its place is no pointer (None), and is replaced."""
        try:
            text = os.readlink(self.root / name)
        except OSError:
            return None
        release = text.removeprefix("releases/")
        return release if text.startswith("releases/") and RELEASE_ID.match(release) else None

    def link_damage(self, name: str) -> str | None:
        """What is wrong with a pointer, in words; None when it is a link of this store's own kind, or absent."""
        path = self.root / name
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:
            return None
        except OSError as exc:
            return f"`{name}` cannot be read ({exc.strerror})"
        if statmod.S_ISLNK(mode):
            return None if self._link_target(name) else f"`{name}` is a link to {os.readlink(path)!r}, not to a release of this store"
        return f"`{name}` is a {'directory' if statmod.S_ISDIR(mode) else 'file'} where a link belongs"

    def state(self) -> dict:
        """{"committed", "history"} from state.json; when that file is damaged, rebuilt from the `committed` and
        `previous` links (derived from it, so never ahead of it) with "damaged" saying what was wrong."""
        try:
            text = read_text(self.root / STATE_FILE)  # never through a link, never blocking on a FIFO
        except FileNotFoundError:
            text = None
        except OSError as exc:
            return self._state_from_links(f"{STATE_FILE} cannot be read ({exc.strerror})")
        if text is not None:
            try:
                data = json.loads(text)
            except ValueError:
                data = None
            state = _valid_state(data)
            if state is None:
                return self._state_from_links(f"{STATE_FILE} is damaged (not a state this store writes)")
            return state
        # A store written before state.json: `current` was the committed release unless a trial ran.
        trial = self.trial()
        committed = trial.get("fallback") if trial else self.current()
        history = [r for r in self._read_json("history.json") or [] if isinstance(r, str) and RELEASE_ID.match(r)]
        if trial:
            history = [r for r in history if r != trial.get("release")]
        return {"committed": committed, "history": history}

    def _state_from_links(self, damage: str) -> dict:
        committed, previous = self._link_target("committed"), self._link_target("previous")
        history = [r for r in (previous, committed) if r is not None and (self.release_dir(r) / MANIFEST).is_file()]
        committed = committed if committed in history else None
        return {"committed": committed, "history": history, "damaged": damage}

    def committed(self) -> str | None:
        return self.state()["committed"]

    def history(self) -> list[str]:
        return self.state()["history"]

    def previous(self) -> str | None:
        return previous_of(self.state())

    def trial(self) -> dict | None:
        trial = self._read_json(TRIAL_FILE)
        return trial if isinstance(trial, dict) and isinstance(trial.get("release"), str) else None

    def _sync_links(self, state: dict, step: str, current: str | None = None) -> None:
        """Point `committed`, `current` (the trial's release, or the committed one) and `previous` where they belong."""
        for name, release in (("committed", state["committed"]), ("current", current or state["committed"]), ("previous", previous_of(state))):
            if self._link_target(name) == release:
                continue
            if release is None:
                self._set_aside(name)
                (self.root / name).unlink(missing_ok=True)
                fsync_dir(self.root)
            else:
                self._switch_link(name, release)
            point(f"{step}.{name}-linked")

    def _require_assembled(self, release_id: str) -> Path:
        folder = self.release_dir(release_id)
        if not (folder / MANIFEST).is_file():
            raise ReleaseError(f"release {release_id} is not assembled on the target")
        return folder

    def _fence(self, token: int | None) -> None:
        if token is not None:
            check_token(self.root, token)

    # The trial --------------------------------------------------------------------------
    def begin_trial(self, release_id: str, *, token: int | None, owner: str, deadline_s: float) -> dict:
        """Record the trial (who, which token, this boot, a deadline), then point `current` at it."""
        self._fence(token)
        self._require_assembled(release_id)
        self.recover()
        if self.trial() is not None:
            raise ReleaseError(f"another release ({self.trial()['release']}) is on trial on the target", hint="wait for that deploy to finish")
        state = self.state()
        if state["committed"] == release_id:
            raise ReleaseError(f"release {release_id} is already the committed release; nothing to try")
        record = {
            "release": release_id,
            "fallback": state["committed"],
            "owner": owner,
            "token": token,
            "boot": boot_id(),
            "deadline": time.monotonic() + deadline_s,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "state": "running",
        }
        self._write_json(TRIAL_FILE, record)
        point("trial.record-written")
        self._switch_link("current", release_id)
        point("trial.current-switched")
        return record

    def mark_passed(self, *, token: int | None, health: dict, commit_within_s: float) -> None:
        self._fence(token)
        trial = self.trial()
        if trial is None or trial.get("token") != token:
            raise ReleaseError("the trial of this deploy is no longer on the target (it was rolled back)")
        self._write_json(TRIAL_FILE, {**trial, "state": "passed", "health": health, "deadline": time.monotonic() + commit_within_s})
        point("trial.passed-recorded")

    def commit(self, *, token: int | None, if_damaged: str | None = None) -> str:
        """The release on trial passed its health check: it becomes the committed release. `if_damaged` (the
        pipeline's service.if_damaged) says what a start does when its bytes no longer check (sdk/store/startable.py)."""
        self._fence(token)
        trial = self.trial()
        if trial is None or trial.get("token") != token:
            raise ReleaseError("there is no trial of this deploy to commit on the target (it was rolled back)")
        release = trial["release"]
        if trial.get("state") != "passed":
            raise ReleaseError(f"release {release} has not passed its health check; it is not committed")
        from sdk.store.verify import verify_release

        verify_release(self._require_assembled(release))  # the bytes that passed, unchanged since
        state = self.state()
        history = [r for r in state["history"] if r != release] + [release]
        floors = self._floors_after(release, state)
        state = state_record(state, committed=release, history=history, if_damaged=if_damaged or "previous", floors=floors, rolled_back=None)
        self._write_json(STATE_FILE, state)
        point("commit.state-written")
        self._sync_links(state, "commit")
        self._end_trial("commit", release, "committed", "passed its health check")
        return release

    def _floors_after(self, release: str, state: dict) -> dict | None:
        """The floors once `release` is committed: its signed version for its pipeline, when higher (sdk/store/trust.py)."""
        from sdk.store.trust import statement_of

        floors = dict(state.get("floors") or {})
        statement = statement_of(self.release_dir(release)) or {}
        if isinstance(statement.get("version"), int) and isinstance(statement.get("pipeline"), str):
            pipeline = statement["pipeline"]
            floors[pipeline] = max(floors.get(pipeline, 0), statement["version"])
        return floors or None

    def abort_trial(self, reason: str, *, token: int | None | object = ANY_TOKEN) -> str | None:
        """Put the committed release back in place of an unfinished trial; returns the release rolled back.
        With `token`, only that deploy's own trial (never one another deploy started since)."""
        trial = self.trial()
        if trial is None or (token is not ANY_TOKEN and trial.get("token") != token):
            return None
        state = self.state()
        if state["committed"] == trial["release"]:  # killed after the commit's state write: the commit stands
            self._sync_links(state, "commit")
            self._end_trial("commit", trial["release"], "committed", "passed its health check")
            return None
        self._sync_links(state, "abort")
        self._end_trial("abort", trial["release"], "rolled back", reason)
        return trial["release"]

    def _end_trial(self, step: str, release: str, outcome: str, reason: str) -> None:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self._write_json(LAST_TRIAL_FILE, {"release": release, "outcome": outcome, "reason": reason, "at": when})
        (self.root / TRIAL_FILE).unlink(missing_ok=True)
        fsync_dir(self.root)
        point(f"{step}.trial-removed")

    def trial_liveness(self, trial: dict) -> str | None:
        """None while the trial may go on; otherwise why it must be rolled back."""
        if trial.get("boot") != boot_id():
            return "the device restarted during the trial"
        deadline = trial.get("deadline")
        if not isinstance(deadline, (int, float)) or time.monotonic() > deadline:
            return "the trial ran past its deadline"
        if trial.get("owner") in UNLEASED_OWNERS and trial.get("token") is None:
            return None  # judged by its boot and its deadline only (see MENDER_OWNER)
        lease = read_lease(self.root)
        if lease is None or lease.token != trial.get("token") or not lease.live():
            return "the deploy that started it is gone (its lease ended)"
        return None

    def recover(self) -> str | None:
        """Run before anything starts or changes: roll back a trial that can no longer finish (past its
        deadline, from an earlier boot, or whose deployer's lease ended; a Mender trial has no lease to
        end), finish a commit that was cut short, and point the links at the committed release.
        Returns the release rolled back, if any."""
        trial = self.trial()
        if trial is not None:
            if self.state()["committed"] != trial["release"]:
                reason = self.trial_liveness(trial)
                if reason is None:
                    return None  # a live trial of a deploy that still holds the lease: leave it alone
                return self.abort_trial(reason)
            self.abort_trial("")  # the commit had been written: it stands
        elif (self.root / TRIAL_FILE).exists():  # a damaged trial record: its trial is over, `current` goes back below
            self._end_trial("abort", "unknown", "rolled back", f"{TRIAL_FILE} was damaged")
        state = self.state()
        if "damaged" in state or (not (self.root / STATE_FILE).exists() and (state["committed"] or state["history"])):
            self._write_json(STATE_FILE, state_record(state))  # rebuilt from the links (damaged, or a store of an earlier SDK)
        self._sync_links(state, "recover")
        self._empty_trash()
        return None

    def committed_dir(self) -> Path | None:
        """After recovery: the folder of the release that may run (the last that passed), or None."""
        self.recover()
        committed = self.committed()
        return self.release_dir(committed) if committed else None

    def rollback(self, *, token: int | None = None) -> str:
        """Go back one committed release, after checking every byte of it; returns the release now committed."""
        self._fence(token)
        self.recover()
        if self.trial() is not None:
            raise ReleaseError(f"release {self.trial()['release']} is on trial on the target", hint="wait for that deploy to finish")
        state = self.state()
        committed, history = state["committed"], state["history"]
        if committed is None:
            raise ReleaseError("no release is committed on the target", hint="deploy one first")
        index = history.index(committed) if committed in history else len(history)
        if index < 1:
            raise ReleaseError(
                f"release {committed} is the only committed release on the target: there is no earlier one to go back to",
                hint="deploy the pipeline you want to run instead",
            )
        back = history[index - 1]
        from sdk.store.verify import verify_release

        try:
            verify_release(self.release_dir(back))
        except ReleaseError as exc:
            detail = exc.message.removeprefix(f"release {back}: ")
            raise ReleaseError(f"cannot go back to release {back}: {detail}; nothing was changed", hint="deploy that pipeline again") from None
        try:
            self.verify_signature(back, stage="rollback")  # the key, the binding, and root's floor (the store's is the login's)
        except ReleaseError as exc:
            raise ReleaseError(f"cannot go back to release {back}: {exc.message}; nothing was changed", hint=exc.hint) from None
        point("rollback.verified")
        state = state_record(state, committed=back, history=history[:index], rolled_back=back)  # chosen on purpose: may be below the floor
        self._write_json(STATE_FILE, state)
        point("rollback.state-written")
        self._sync_links(state, "rollback")
        return back

    def _write_json(self, name: str, value: object) -> None:
        temporary = self.root / f"{TMP_PREFIX}{name}-{os.getpid()}"
        try:
            with open_new(temporary) as handle:  # a name planted here is removed, never written through
                json.dump(value, handle)
                handle.flush()
                os.fsync(handle.fileno())
        except OSError:
            temporary.unlink(missing_ok=True)  # a full disk keeps nothing of the try (no empty .tmp- file per start)
            raise
        point("record.temporary-written")
        os.replace(temporary, self.root / name)
        fsync_dir(self.root)
        point("record.replaced")

    def _read_json(self, name: str):
        try:
            return json.loads(read_text(self.root / name))
        except (FileNotFoundError, NotRegular, ValueError):  # a link or a FIFO in its place: damage
            return None

    def _set_aside(self, name: str) -> None:
        """A directory where a pointer belongs (damage, or a hand-made copy) is renamed out of the way, never
        followed or deleted: the next sweep of temporaries removes it."""
        path = self.root / name
        if path.is_dir() and not path.is_symlink():
            os.replace(path, self.root / f"{TMP_PREFIX}damaged-{name}-{os.getpid()}")

    def _switch_link(self, name: str, release_id: str) -> None:
        temporary = self.root / f"{TMP_PREFIX}{name}-{os.getpid()}"
        temporary.unlink(missing_ok=True)
        os.symlink(f"releases/{release_id}", temporary)
        point("link.temporary-made")
        self._set_aside(name)
        os.replace(temporary, self.root / name)
        fsync_dir(self.root)
        point("link.switched")
