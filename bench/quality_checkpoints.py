"""bench/quality.py's checkpoint keeper: every checkpoint a pretraining job writes, hard-linked
elsewhere as it appears, with the time it was written (the original release keeps only its last
5, and a curve needs all of them with their minutes)."""

import glob
import os
import re
import threading

CHECKPOINT_NAME = re.compile(r"^model\.ckpt-(\d+)\.index$")


class CheckpointKeeper(object):
  """Hard-links every checkpoint a job writes into `keep_dir` as it appears, with the time it was
  written: the original release keeps only its last 5.

  Use: keeper = CheckpointKeeper(job_dir, keep_dir, start); keeper.start(); ...; keeper.stop();
  keeper.kept: {update: seconds since `start` when its index file was written}.
  """

  def __init__(self, job_dir, keep_dir, start, poll_seconds=0.5):
    self._job_dir, self._keep_dir, self._start = job_dir, keep_dir, start
    self._poll_seconds = poll_seconds
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._run, daemon=True)
    self.kept = {}

  def start(self):
    os.makedirs(self._keep_dir, exist_ok=True)
    self._thread.start()

  def stop(self):
    self._stop.set()
    self._thread.join()
    self.poll()

  def _run(self):
    while not self._stop.wait(self._poll_seconds):
      self.poll()

  def poll(self):
    """Keeps the checkpoints whose index file is there (TensorFlow writes it after the data)."""
    names = os.listdir(self._job_dir) if os.path.isdir(self._job_dir) else []
    for name in names:
      match = CHECKPOINT_NAME.match(name)
      if not match or int(match.group(1)) in self.kept:
        continue
      update = int(match.group(1))
      prefix = os.path.join(self._job_dir, "model.ckpt-%d" % update)
      try:
        written = os.stat(prefix + ".index").st_mtime
        for path in glob.glob(prefix + ".*"):
          if ".tempstate" in path:
            continue
          target = os.path.join(self._keep_dir, os.path.basename(path))
          if not os.path.exists(target):
            os.link(path, target)
      except FileNotFoundError:  # deleted between the listing and the link: the next poll
        continue
      self.kept[update] = written - self._start
