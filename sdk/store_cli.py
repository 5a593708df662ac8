"""`python -m sdk store OP ...`: the release store operated on the device, one JSON line out.

The host drives a remote target through these operations over SSH (every argument quoted),
so the code that checks hashes, renames and switches `current` on a vehicle is the same
`ReleaseStore` the local target uses and the tests exercise.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sdk.release import ReleaseManifest
from sdk.store import ReleaseStore


def _object_spec(text: str) -> tuple[str, int]:
    sha256, _, size = text.partition(":")
    return sha256, int(size)


def _hold_while_heartbeats(lease: float) -> None:
    """Return when the host closes the channel, or sends nothing for `lease` seconds (a pulled cable:
    the SSH session itself may take minutes to notice)."""
    import select

    stdin = sys.stdin.buffer.raw if hasattr(sys.stdin.buffer, "raw") else sys.stdin.buffer
    while True:
        ready, _, _ = select.select([stdin], [], [], lease)
        if not ready or not stdin.read(4096):
            return


def main(argv: list[str]) -> dict:
    parser = argparse.ArgumentParser(prog="python -m sdk store")
    parser.add_argument("--root", type=Path, required=True)
    ops = parser.add_subparsers(dest="op", required=True)
    have = ops.add_parser("have", help="which objects (SHA:SIZE) the store holds intact")
    have.add_argument("objects", nargs="*", type=_object_spec)
    install = ops.add_parser("install", help="verify uploaded temporary objects and publish them")
    install.add_argument("sha256", nargs="+")
    assemble = ops.add_parser("assemble", help="build a release from a manifest file")
    assemble.add_argument("manifest", type=Path)
    activate = ops.add_parser("activate")
    activate.add_argument("release")
    activate.add_argument("--trial", action="store_true")
    env = ops.add_parser("env", help="build the release's offline environment from its wheels; print its python")
    env.add_argument("release")
    ops.add_parser("commit")
    ops.add_parser("recover")
    ops.add_parser("rollback")
    prune = ops.add_parser("prune")
    prune.add_argument("--keep", type=int, default=3)
    ops.add_parser("status")
    hold = ops.add_parser("hold-lock", help="hold the deploy lock while the host's heartbeats (lines on stdin) keep coming")
    hold.add_argument("owner")
    hold.add_argument("--lease", type=float, default=30.0, help="seconds without a heartbeat after which the host is taken for dead")
    hold.add_argument("--wait", type=float, default=0.0, help="seconds to wait for a busy lock")
    clear = ops.add_parser("clear-run", help="remove a run's output folder")
    clear.add_argument("name")
    ops.add_parser("prepare", help="create the folders, sweep crash leftovers, recover a trial; report free space")
    args = parser.parse_args(argv)

    store = ReleaseStore(args.root)
    if args.op == "hold-lock":
        handle = store.acquire(args.owner, wait_s=args.wait)
        sys.stdout.write(json.dumps({"locked": args.owner}) + "\n")
        sys.stdout.flush()
        _hold_while_heartbeats(args.lease)
        handle.close()
        return {"unlocked": args.owner}
    with store.locked():
        if args.op == "prepare":
            store.sweep_temporaries(keep_uploads=True)
            recovered = store.recover()
            return {"recovered": recovered, "free_bytes": store.free_bytes(), **store.status()}
        if args.op == "have":
            return {"present": [f"{sha}:{size}" for sha, size in args.objects if store.has_object(sha, size, verify=True)]}
        if args.op == "install":
            for sha256 in args.sha256:
                store.install_object(store.upload_path(sha256), sha256)
            return {"installed": args.sha256}
        if args.op == "assemble":
            manifest = ReleaseManifest.from_json(args.manifest.read_text())
            folder = store.assemble(manifest)
            args.manifest.unlink(missing_ok=True)
            return {"release": manifest.release_id, "folder": str(folder)}
        if args.op == "clear-run":
            store.clear_run(args.name)
            return {"cleared": args.name}
        if args.op == "env":
            python = store.build_env(args.release)
            return {"python": str(python) if python else None}
        if args.op == "activate":
            store.activate(args.release, trial=args.trial)
        elif args.op == "commit":
            store.commit()
        elif args.op == "recover":
            return {"recovered": store.recover(), **store.status()}
        elif args.op == "rollback":
            store.rollback()
        elif args.op == "prune":
            return {"removed": store.prune(args.keep), **store.status()}
        return store.status()


def run(argv: list[str]) -> int:
    from sdk.errors import SdkError

    try:
        result = main(argv)
    except SdkError as exc:
        sys.stderr.write(f"error: {exc.message}\nhint: {exc.hint}\n")
        return exc.exit_code
    sys.stdout.write(json.dumps(result) + "\n")
    return 0
