"""The error family of the SDK: every user-facing failure is an SdkError.

The library raises; only a CLI prints. Each class carries a hint for the user and the
exit code the CLI maps it to, so there is exactly one place (the CLI boundary) that
turns errors into text.
"""

from __future__ import annotations

# Exit codes (documented in README): verdicts and error kinds never share a code.
EXIT_PASS = 0
EXIT_USER_ERROR = 1
EXIT_USAGE = 2
EXIT_BUDGET_FAIL = 3
EXIT_INCONCLUSIVE = 4


class SdkError(Exception):
    """Base of every error a user can cause or fix."""

    exit_code = EXIT_USER_ERROR
    default_hint = "see README.md"

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint or self.default_hint

    def __str__(self) -> str:
        return self.message


class ConfigError(SdkError):
    """A pipeline or target file is invalid."""

    default_hint = "fix the file at the place named above; docs/reference/pipeline.md documents every key"


class SourceError(SdkError):
    """A camera or replay source cannot be opened or read."""

    default_hint = "check the source URI in the pipeline file and that the device or file exists"


class ModelError(SdkError):
    """A model cannot be prepared or loaded, or its tensors do not match the pipeline."""

    default_hint = "check model.path and model.prepare in the pipeline file"


class BackendError(SdkError):
    """An inference backend is missing or failed."""

    default_hint = "install the backend's extra (see README.md) or choose another backend"


class TargetError(SdkError):
    """A target is unknown, unreachable or refuses the release."""

    default_hint = "list the known targets with `sdk targets list`"


class ReleaseError(SdkError):
    """A release cannot be staged or activated; the running release is untouched."""

    default_hint = "the previous release is still current; fix the cause and deploy again"


class EngineBuildError(SdkError):
    """A TensorRT engine cannot be built for the target."""


class LatencyBudgetError(SdkError):
    """A run measured latencies over the pipeline's budgets."""

    exit_code = EXIT_BUDGET_FAIL
    default_hint = "see the report's budget checks; report.json names every measured value"


class MissingDependencyError(SdkError):
    """An optional heavy dependency is not installed."""

    default_hint = "install it as the message says"


def missing_dependency(module: str, install: str) -> MissingDependencyError:
    """The module and the Python that lacks it; in a release's offline environment, the device Python it was made
    from (sdk.store.offline_env), which is where a package must be installed for the release to see it."""
    import os
    import sys

    where = f"for {sys.executable}"
    try:
        with open(os.path.join(sys.prefix, ".created-by"), encoding="utf-8") as made:
            where = f"in the release's environment {sys.prefix}, made from the device's Python {made.read().strip()}"
            install = f"{install} for that Python (the release's environment sees its packages)"
    except OSError:
        pass
    return MissingDependencyError(f"the Python module {module!r} is not installed {where}", hint=f"install it with: {install}")
