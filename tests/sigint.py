"""Ctrl-C in tests, whatever the test runner was started with: a background job of a
non-interactive shell (`pytest &`, a CI script's `... &`) starts with SIGINT ignored, the
ignoring is inherited by every process it starts, and a Python started so never installs
its KeyboardInterrupt handler. A test of what Ctrl-C does gives it back for its duration
(sigint_default) or to the child it starts (interruptible)."""

import contextlib
import signal
import subprocess


@contextlib.contextmanager
def sigint_default():
    """Python's own SIGINT handler (KeyboardInterrupt) in this process for the duration,
    the disposition before it restored after."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def interruptible(*args, **kwargs) -> subprocess.Popen:
    """Popen a child that a SIGINT reaches even when this process ignores SIGINT: a
    handler (unlike SIG_IGN) is reset to the default by exec."""
    with sigint_default():
        return subprocess.Popen(*args, **kwargs)
