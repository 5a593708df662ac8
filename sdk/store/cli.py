"""`python -m sdk store OP ...`: the release store operated on the device, one JSON line out.

The host drives a remote target through these operations over SSH (every argument quoted),
so the code that checks hashes, renames and switches `current` on a vehicle is the same
`ReleaseStore` the local target uses and the tests exercise.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

from sdk.release import ReleaseManifest
from sdk.store.activation import IF_DAMAGED
from sdk.store.objects import ReleaseStore
from sdk.store.trial import HealthPolicy, end_lease, run_trial

OPS = (
    *("have", "install", "assemble", "trial", "env", "commit", "rollback", "prune", "recover", "status"),
    *("hold-lock", "clear-run", "prepare", "trust", "partials", "startable"),
)


def _object_spec(text: str) -> tuple[str, int]:
    sha256, _, size = text.partition(":")
    return sha256, int(size)


def _hold_while_heartbeats(holder, lease: float) -> str:
    """Renew the lease at every line the host sends; return when the host closes the channel, or sends
    nothing for `lease` seconds (a pulled cable: the SSH session itself may take minutes to notice)."""
    import select

    stdin = sys.stdin.buffer.raw if hasattr(sys.stdin.buffer, "raw") else sys.stdin.buffer
    while True:
        ready, _, _ = select.select([stdin], [], [], lease)
        if not ready:
            return f"no heartbeat from the host for {lease:g} s"
        if not stdin.read(4096):
            return "the host closed the lock"
        holder.renew()


def main(argv: list[str]) -> dict:
    args = _parser().parse_args(argv)
    return _run_op(args)


@functools.cache
def _parser() -> argparse.ArgumentParser:
    """Built once per process: the device agent parses every store request with it."""
    parser = argparse.ArgumentParser(prog="python -m sdk store")
    parser.add_argument("--root", type=Path, required=True)
    ops = parser.add_subparsers(dest="op", required=True)
    have = ops.add_parser("have", help="which objects (SHA:SIZE) the store holds intact")
    have.add_argument("objects", nargs="*", type=_object_spec)
    install = ops.add_parser("install", help="verify uploaded temporary objects and publish them")
    install.add_argument("sha256", nargs="+")
    assemble = ops.add_parser("assemble", help="build a release from a manifest file")
    assemble.add_argument("manifest", type=Path)
    assemble.add_argument("--signature", type=Path, help="the manifest's signature (manifest.json.sig), checked when the device trusts a key")
    trial = ops.add_parser("trial", help="switch to a release on trial, run its health check here, record a pass or roll back")
    trial.add_argument("release")
    trial.add_argument("--owner", required=True)
    trial.add_argument("--target", default="local")
    trial.add_argument("--min-frames", type=int, default=HealthPolicy.min_frames)
    trial.add_argument("--timeout", type=float, default=HealthPolicy.timeout_s)
    env = ops.add_parser("env", help="build the release's offline environment from its wheels; print its python")
    env.add_argument("release")
    mutating = {"trial": trial}
    helps = {"commit": "commit the release on trial (it passed)", "rollback": "go back one committed release", "prune": "remove old releases"}
    for name, text in helps.items():
        mutating[name] = ops.add_parser(name, help=text)
    mutating["prune"].add_argument("--keep", type=int, default=3)
    mutating["commit"].add_argument("--if-damaged", choices=IF_DAMAGED, default=None, help="what a start does when this release fails its check")
    for op in mutating.values():
        op.add_argument("--token", type=int, required=True, help="the deploy lease's fencing token (from hold-lock)")
    ops.add_parser("recover", help="roll back a trial that can no longer finish; point the links at the committed release")
    ops.add_parser("status")
    ops.add_parser("startable", help="the release a start would run: found by reading, repaired where the disk allows, verified")
    hold = ops.add_parser("hold-lock", help="hold the deploy lock while the host's heartbeats (lines on stdin) keep coming")
    hold.add_argument("owner")
    hold.add_argument("--lease", type=float, default=30.0, help="seconds without a heartbeat after which the host is taken for dead")
    hold.add_argument("--wait", type=float, default=0.0, help="seconds to wait for a busy lock")
    clear = ops.add_parser("clear-run", help="remove a run's output folder")
    clear.add_argument("name")
    ops.add_parser("prepare", help="create the folders, sweep crash leftovers, recover a trial; report free space")
    trust = ops.add_parser("trust", help="what this device trusts: a JSON request file (status, add, revoke, install-policy), removed")
    trust.add_argument("request", type=Path)
    partials = ops.add_parser("partials", help="keep the partial uploads of these objects (SHA:SIZE), remove every other one")
    partials.add_argument("objects", nargs="*", type=_object_spec)
    return parser


def _run_op(args: argparse.Namespace) -> dict:
    store = ReleaseStore(args.root)
    if args.op == "hold-lock":
        holder = store.acquire(args.owner, wait_s=args.wait, lease_s=args.lease)
        sys.stdout.write(json.dumps({"locked": args.owner, "token": holder.token}) + "\n")
        sys.stdout.flush()
        why = _hold_while_heartbeats(holder, args.lease)
        return {"unlocked": args.owner, "rolled_back": end_lease(store, holder, why)}
    if args.op == "startable":  # needs no write and no mutex: a full or read-only store still answers
        from sdk.store.startable import resolve_startable

        return resolve_startable(store).describe()
    if args.op == "env":  # an environment already built needs no write and no mutex
        from sdk.store.offline_env import existing_env

        ready, python = existing_env(store.release_dir(args.release), store.env_dir(args.release))
        if ready:
            return {"python": str(python) if python else None}
    if args.op == "trial":
        policy = HealthPolicy(min_frames=args.min_frames, timeout_s=args.timeout)
        return run_trial(store, args.release, token=args.token, owner=args.owner, target=args.target, policy=policy)
    with store.locked():
        if args.op == "prepare":
            store.sweep_temporaries(keep_uploads=True)
            recovered = store.recover()
            return {"recovered": recovered, "free_bytes": store.free_bytes(), **store.status()}
        if args.op == "have":
            return {"present": [f"{sha}:{size}" for sha, size in args.objects if store.has_object(sha, size, verify=True)]}
        if args.op == "partials":
            return store.partials(dict(args.objects))
        if args.op == "install":
            for sha256 in args.sha256:
                store.install_object(store.upload_path(sha256), sha256)
            return {"installed": args.sha256}
        if args.op == "assemble":
            manifest = ReleaseManifest.from_json(args.manifest.read_text())
            try:
                folder = store.assemble(manifest, args.signature.read_text() if args.signature else None)
            finally:
                args.manifest.unlink(missing_ok=True)
                if args.signature:
                    args.signature.unlink(missing_ok=True)
            return {"release": manifest.release_id, "folder": str(folder)}
        if args.op == "trust":
            from sdk.store.trust_admin import administer

            try:
                request = json.loads(args.request.read_text())
            except ValueError:
                request = None
            finally:
                args.request.unlink(missing_ok=True)
            return administer(store, request if isinstance(request, dict) else {})
        if args.op == "clear-run":
            store.clear_run(args.name)
            return {"cleared": args.name}
        if args.op == "env":
            python = store.build_env(args.release)
            return {"python": str(python) if python else None}
        if args.op == "commit":
            store.commit(token=args.token, if_damaged=args.if_damaged)
        elif args.op == "recover":
            return {"recovered": store.recover(), **store.status()}
        elif args.op == "rollback":
            store.rollback(token=args.token)
        elif args.op == "prune":
            return {"removed": store.prune(args.keep, token=args.token), **store.status()}
        return store.status()


def run(argv: list[str]) -> int:
    """`python -m sdk store ...`: the answer as one JSON line; errors raised for the device's one boundary (sdk/__main__.py)."""
    from sdk.errors import ReleaseError

    try:
        result = main(argv)
    except OSError as exc:  # the device's own file system: said for the step it stopped
        import errno

        op = next((a for a in argv if not a.startswith("-") and a in OPS), "store")
        if exc.errno == errno.ENOSPC:
            hint = "free space on the target; the committed release is untouched"
            raise ReleaseError(f"disk full on the target during `store {op}`", hint=hint) from None
        message = f"`store {op}` failed on the target: {exc.strerror or exc} ({exc.filename or '-'})"
        raise ReleaseError(message, hint="check the target's file system") from None
    sys.stdout.write(json.dumps(result) + "\n")
    return 0
