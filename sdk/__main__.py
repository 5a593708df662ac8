"""`python -m sdk COMMAND`: what a target runs. Each command imports only what it needs, so that
`store` and `probe` work on a device that has nothing but Python (before the first release)."""

import json
import sys

USAGE = """usage: python -m sdk COMMAND ...
  run (--release DIR | --pipeline FILE --artifacts DIR) --report-dir DIR   run a pipeline and report
  profile (--release DIR | --pipeline FILE --artifacts DIR) --out DIR      per-layer times of the model on this backend
  store --root DIR OP ...                                                 operate the release store
  probe [ROOT]                                                            print the device fingerprint
  serve --release DIR --status-dir DIR                                    run a release as a service
  supervise --release DIR --status-dir DIR                                serve under a supervisor (no systemd)
  selftest --release DIR [--tests BUNDLE]                                 hardware checks of a release on this device (+ gpu tests)
  service --root DIR (start|stop|status|logs|unit|install)                the service of the current release
  engine build --plan FILE --model FILE --out DIR [...]                   build a TensorRT engine here
"""


def main(argv: list[str]) -> int:
    """The device's one error boundary: every command raises (an SdkError, or the device's own OSError), and only here
    is it printed, as one `error:` line and one `hint:` line with the error's exit code; never a traceback."""
    from sdk.errors import SdkError

    command = argv[0] if argv else "sdk"
    try:
        if root_step(argv):
            from sdk.rootsafe import confine_imports

            confine_imports()  # as root: root's own sdk, and nothing imported from a folder another user controls
        code = dispatch(argv)
        sys.stdout.flush()  # a reader that went away is reported here, not as an exception at the interpreter's exit
        return code
    except SdkError as exc:
        sys.stderr.write(f"error: {exc.message}\nhint: {exc.hint}\n")
        return exc.exit_code
    except BrokenPipeError:  # the output's reader is gone (the host's SSH session closed): nothing wrong on the device
        return output_reader_gone(command)
    except OSError as exc:  # the device's own file system: one line
        sys.stderr.write(f"error: `{command}` failed on this device: {exc.strerror or exc} ({exc.filename or '-'})\n")
        sys.stderr.write("hint: check the device's file system (a full or read-only disk, a folder's permissions)\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        return 130


def output_reader_gone(command: str) -> int:
    """Standard output's reader closed its end (the host's SSH session, a `| head`): say so on stderr where that is
    still open, and leave nothing for the interpreter to flush at exit. Exit code 141, as a shell reports SIGPIPE."""
    import os

    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    try:
        sys.stderr.write(f"error: `{command}`: the reader of its output went away before the end (a closed pipe or SSH session)\n")
        sys.stderr.write("hint: nothing on the device needs checking; run it again with its output read to the end\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # stderr went with it
    return 141


def root_step(argv: list[str]) -> bool:
    """The steps made to run as root (the service's install, the trust policy's): `python -m sdk service --root R
    install`, `python -m sdk store --root R trust FILE`. Root's own copy of the SDK confines every command."""
    return len(argv) >= 4 and argv[1] == "--root" and (argv[0], argv[3]) in (("service", "install"), ("store", "trust"))


def dispatch(argv: list[str]) -> int:
    command = argv[0] if argv else None
    if command == "run":
        from sdk.runtime.cli import run

        return run(argv[1:])
    if command == "profile":
        from sdk.profiling.cli import main as profile

        return profile(argv[1:])
    if command == "store" and len(argv) == 4 and argv[1] == "--root" and argv[3] == "serve":
        from pathlib import Path

        from sdk.agent.serve import serve  # the device agent: only what it needs (the store's operations load lazily)

        return serve(Path(argv[2]))
    if command == "store":
        from sdk.store.cli import run as store

        return store(argv[1:])
    if command == "serve":
        from sdk.service.serve import serve

        return serve(argv[1:])
    if command == "supervise":
        from sdk.service.supervisor import supervise

        return supervise(argv[1:])
    if command == "service":
        from sdk.service.control import main as service

        return service(argv[1:])
    if command == "selftest":
        from sdk.selftest import main as selftest

        return selftest(argv[1:])
    if command == "probe":
        from sdk.probe import fingerprint

        sys.stdout.write(json.dumps(fingerprint(argv[1] if len(argv) > 1 else None), sort_keys=True) + "\n")
        return 0
    if command == "engine":
        from sdk.engine.build_cli import main as engine

        return engine(argv[1:])
    sys.stderr.write(USAGE)
    return 2


if __name__ == "__main__":  # `python -m sdk`, or runpy with run_name="__main__"; importing it runs nothing
    sys.exit(main(sys.argv[1:]))
