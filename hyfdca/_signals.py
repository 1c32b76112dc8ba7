"""Ctrl-C and SIGTERM for long runs: stop after the current round, keep the work."""

import os
import signal
import sys

EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}  # 128 + the signal's number


class Terminated(KeyboardInterrupt):
    """SIGTERM outside a :class:`GracefulStop` block, or a second one inside it (exit code
    143)."""


def raise_terminated(signum, frame):
    raise Terminated()


class GracefulStop:
    """Within the block, the first SIGINT or SIGTERM asks the run to stop after its
    current round (``stop()`` turns True and ``signal`` records which); a second one
    aborts at once. With ``abort_notice`` (terminated -> text) the abort prints that text
    and ends the process with the signal's exit code there and then: raising from the
    handler lands wherever the main thread is, inside Numba's compiler too, which then
    crashed the process (SIGSEGV) instead of exiting 143; a checkpoint is written
    atomically, so nothing saved is lost. Without it the second signal raises
    KeyboardInterrupt (:class:`Terminated` for SIGTERM)."""

    def __init__(self, abort_notice=None):
        self.signal = None
        self.abort_notice = abort_notice
        self._previous = {}

    def __call__(self):
        return self.signal is not None

    def _handle(self, signum, frame):
        if self.signal is not None:
            if self.abort_notice is None:
                raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
            try:   # a print can fail (a reentrant write, a closed pipe): exit regardless
                sys.stdout.flush()
                print(self.abort_notice(signum == signal.SIGTERM), file=sys.stderr,
                      flush=True)
            finally:
                os._exit(EXIT_CODES[signum])
        self.signal = signal.Signals(signum)
        print(f"\n{self.signal.name}: stopping after this round to save the work "
              f"(send it again to abort at once)", file=sys.stderr, flush=True)

    def __enter__(self):
        for signum in EXIT_CODES:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        return False

    @property
    def exit_code(self):
        return EXIT_CODES[self.signal]
