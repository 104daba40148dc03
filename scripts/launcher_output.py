"""horovodrun's output without its own traceback: after a worker has ended the job with its one
line, horovodrun adds an 18-line Python traceback of its own ("RuntimeError: Horovod detected
that one or more processes exited with non-zero status ..."), which repeats what the worker said.

`LauncherOutput` passes every line on except such a traceback: horovodrun's own lines carry no
worker prefix ("[0]<stderr>:"), and its traceback is the last thing it prints, so a traceback
without the prefix is held, dropped at the end of the output when it is the report of a failed
worker, and passed on otherwise or should a worker's line follow it (then it was not horovodrun's
last word). `scripts/supervise.py` filters horovodrun's output with it;
`scripts/run_pretraining_lamb.sh` runs this file as a filter of horovodrun's stderr:

  horovodrun ... 2> >(python scripts/launcher_output.py >&2)

`--verbose` (of either) shows the traceback. Needs no TensorFlow.
"""

import re
import signal
import sys

# horovodrun's prefix of a worker's line: "[rank]<stdout>:" or "[rank]<stderr>:" (a timestamp may
# come first with --prefix-timestamp).
_WORKER_LINE = re.compile(r"^(?:[A-Z][a-z]{2} .{20})?\[\d+\]<std(?:out|err)>:")
TRACEBACK_START = "Traceback (most recent call last):"
# The exception horovodrun ends with after a worker's non-zero exit (Horovod 0.28.1); any other
# traceback of its own (a bad option, a host it cannot reach) is shown.
WORKER_FAILED = "Horovod detected that one or more processes exited with non-zero status"


class LauncherOutput(object):
  """Filters a launcher's output lines (see the module docstring).

  Feed it every line with `line(text)`, then `end()`; both return the lines to print, in order.
  """

  def __init__(self, verbose=False):
    self._verbose = verbose
    self._held = []

  def line(self, text):
    """Takes one output line (with its newline); returns the lines to print now."""
    if self._verbose:
      return [text]
    if self._held:
      if _WORKER_LINE.match(text):  # the job goes on: what was held was not the last word
        held, self._held = self._held, []
        return held + [text]
      self._held.append(text)
      return []
    if text.rstrip("\r\n") == TRACEBACK_START:
      self._held.append(text)
      return []
    return [text]

  def end(self):
    """The output has ended; returns what is still to print: a held traceback unless it is
    horovodrun's report of a failed worker (`WORKER_FAILED`), whose line said why already."""
    held, self._held = self._held, []
    if any(WORKER_FAILED in text for text in held):
      return []
    return held


def main(argv=None):
  """Copies stdin to stdout through `LauncherOutput`; argv: ["--verbose"] shows everything.

  SIGINT and SIGTERM are ignored: the filter ends when the launcher closes its output, so the
  lines of a job being stopped still get through.
  """
  argv = sys.argv[1:] if argv is None else argv
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  signal.signal(signal.SIGTERM, signal.SIG_IGN)
  output = LauncherOutput(verbose="--verbose" in argv)
  sys.stdin.reconfigure(errors="replace")
  out = sys.stdout
  for text in iter(sys.stdin.readline, ""):
    out.writelines(output.line(text))
    out.flush()
  out.writelines(output.end())
  out.flush()
  return 0


if __name__ == "__main__":
  sys.exit(main())
