"""Tests of utils/runtime/stop_at_once.py: a stop signal raised in the main thread, once."""

import os
import signal
import time

import pytest

from utils.runtime import stop_at_once
from utils.runtime import stop_signals


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGUSR1])
def test_raise_on_stop_signals_raises_in_the_main_thread_once(signum):
  before = {s: signal.getsignal(s) for s in stop_signals.STOP_SIGNALS}
  stop, during = None, None
  with stop_at_once.raise_on_stop_signals():
    try:
      os.kill(os.getpid(), signum)
      time.sleep(10)  # interrupted: the handler raises at once
    except stop_at_once.StopSignal as e:
      stop = e
      # A second signal now ends the process at once: the default actions are back.
      during = {s: signal.getsignal(s) for s in stop_signals.STOP_SIGNALS}
  assert stop is not None and stop.signum == signum
  assert not isinstance(stop, Exception)  # no `except Exception` takes it for a failure
  assert during == {s: signal.SIG_DFL for s in stop_signals.STOP_SIGNALS}
  assert {s: signal.getsignal(s) for s in stop_signals.STOP_SIGNALS} == before
  assert stop_at_once.ran_until_stopped("prepare_corpus.py", stop) == (
      "prepare_corpus.py: stopped by %s: the work in progress removed; run the same command to "
      "continue" % signal.Signals(signum).name)
