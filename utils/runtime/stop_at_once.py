"""The stop of a command whose work can be dropped at any point and redone.

`prepare_corpus.py` is one: a unit of work not published is done again by the next run, so a stop
needs no update boundary (utils/runtime/stop_signals.py's graceful stop waits for one).
`raise_on_stop_signals` has the first stop signal raise `StopSignal` in the main thread, so that
every `finally` on its way removes what is half-written, and the command ends with
`ran_until_stopped`'s line and the graceful stop's status (75). A second signal during that
clean-up ends the process at once (128 + its number).
"""

import contextlib
import signal

from utils.runtime import stop_signals


class StopSignal(BaseException):
  """A stop signal, raised in the main thread by `raise_on_stop_signals`' handler.

  A BaseException, like KeyboardInterrupt: no `except Exception` takes it for a failure of the
  work, while each `finally` and `except BaseException` on its way cleans up.
  """

  def __init__(self, signum):
    super(StopSignal, self).__init__(stop_signals.signal_name(signum))
    self.signum = signum


@contextlib.contextmanager
def raise_on_stop_signals(signals=stop_signals.STOP_SIGNALS):
  """Context (main thread): the first of `signals` raises `StopSignal` there; the signals' default
  actions are then back, so a second one ends the process at once (128 + its number). Python runs
  the handler between two bytecodes of the main thread: a native call in progress (a vocabulary
  trained in Rust) finishes first. The previous handlers come back at the end.

  Yields:
    None.
  """
  previous = {}

  def raise_stop(signum, frame):
    del frame  # unused
    for other in previous:
      signal.signal(other, signal.SIG_DFL)
    raise StopSignal(signum)

  for signum in signals:
    previous[signum] = signal.signal(signum, raise_stop)
  try:
    yield
  finally:
    for signum, handler in previous.items():
      signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def ran_until_stopped(program, stop):
  """The line a command that `raise_on_stop_signals` stopped ends with, e.g. "prepare_corpus.py:
  stopped by SIGTERM: the work in progress removed; run the same command to continue"."""
  return ("%s: stopped by %s: the work in progress removed; run the same command to continue"
          % (program, stop_signals.signal_name(stop.signum)))
