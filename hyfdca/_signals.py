"""Ctrl-C and SIGTERM for long runs: stop after the current round, keep the work."""

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
    aborts at once (KeyboardInterrupt, :class:`Terminated` for SIGTERM)."""

    def __init__(self):
        self.signal = None
        self._previous = {}

    def __call__(self):
        return self.signal is not None

    def _handle(self, signum, frame):
        if self.signal is not None:
            raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
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
