"""Errors that name the problem and the fix."""


class PeagleError(ValueError):
    """A user-facing error: the message says what is wrong and what to do."""


def require(module: str, install: str):
    """Import an optional dependency or fail with the command that installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"peagle-lab needs the optional package '{module}' for this step. "
            f"Install it with: {install}"
        ) from exc
