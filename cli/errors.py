"""One error shape for every command line: `<prog>: error: <message>` on stderr, exit 2
for usage errors, 1 for everything else, 130 for Ctrl-C; never a traceback (set the
program's debug variable, e.g. ANNODB_DEBUG=1, to see it). When the reader of the output
goes away (`annodb query ... | head`), the command stops quietly with exit 0: it printed
what was wanted."""

from __future__ import annotations

import os
import sys

import click

from annodb.errors import AnnodbError


def fail(prog: str, message: str, code: int = 1):
    """Print `<prog>: error: message` on stderr and exit with `code`."""
    click.echo(f"{prog}: error: {message}", err=True)
    sys.exit(code)


class _ReaderGone(Exception):
    """Our output's reader went away: a BrokenPipeError, kept from click's own handler
    (which exits 1)."""


class ErrorGroup(click.Group):
    """A click group that turns every error into one line and an exit code. Subclasses set
    `prog`, `debug_env` and `expected` (the exception types whose message is the line)."""

    prog = "annodb"
    debug_env = "ANNODB_DEBUG"
    expected: tuple = (AnnodbError,)

    def make_context(self, *args, **kwargs):
        try:
            return super().make_context(*args, **kwargs)
        except BrokenPipeError as err:
            raise _ReaderGone from err

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BrokenPipeError as err:
            raise _ReaderGone from err

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True,
             **extra):
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            sys.stdout.flush()           # a closed pipe shows here, not at interpreter exit
        except click.UsageError as err:
            hint = f" (see '{err.ctx.command_path} --help')" if err.ctx is not None else ""
            fail(self.prog, f"{err.format_message()}{hint}", 2)
        except click.Abort as err:
            if isinstance(err.__context__, KeyboardInterrupt):    # click's own wrapping
                fail(self.prog, "interrupted", 130)
            fail(self.prog, "aborted", 1)
        except click.ClickException as err:
            fail(self.prog, err.format_message(), err.exit_code)
        except KeyboardInterrupt:
            fail(self.prog, "interrupted", 130)
        except self.expected as err:
            fail(self.prog, str(err), 1)
        except (_ReaderGone, BrokenPipeError):
            # the reader of our output went away (e.g. `| head`): stop quietly; what is
            # still buffered goes to /dev/null, not into an "Exception ignored" at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(0)
        except OSError as err:
            where = f"{err.filename}: " if err.filename else ""
            fail(self.prog, f"{where}{err.strerror or err}", 1)
        except Exception as err:
            if os.environ.get(self.debug_env):
                raise
            fail(self.prog, f"internal error: {type(err).__name__}: {err} (set "
                 f"{self.debug_env}=1 for the traceback, and please report it)", 1)
        sys.exit(code if isinstance(code, int) else 0)
