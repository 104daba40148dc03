"""Draws a run log (`DLLL {json}` lines) as a PNG: loss, learning rate and throughput against step,
and, when the log has them, the gradient norm and the loss scale (with the skipped updates).

  plot.plot_log(log_path, png_path)     # `python -m utils.plot_log LOG PNG` is its command line
 Per-step lines (an integer "step") give the
curves; a summary line's `throughput_train` (the throughput average) is drawn as a dashed line.
Lines that are not `DLLL` records (e.g. other output mixed into the file) are skipped.
"""

import math
import os

from matplotlib import figure
from matplotlib import ticker
from matplotlib.backends import backend_agg

from utils.runlog import dllogger_setup

# Loss curves, in drawing order.
LOSS_KEYS = ("total_loss", "mlm_loss", "nsp_loss", "avg_loss_step")
# Figure size (inches, at 100 dpi) with the three panels every log has; each optional panel (the
# gradient norm, the loss scale) adds EXTRA_PANEL_HEIGHT.
FIGURE_SIZE = (9, 10)
EXTRA_PANEL_HEIGHT = 3


def _as_float(value):
  """`value` as a float; None when missing, not numeric (learning rates may be strings) or an
  integer beyond the range of a float."""
  if value is None or isinstance(value, bool):
    return None
  try:
    return float(value)
  except (TypeError, ValueError, OverflowError):
    return None


def series(steps, key):
  """The points of one metric.

  Args:
    steps: list of (step, data dict) from `dllogger_setup.read_log`.
    key: metric name.

  Returns:
    (xs, ys): steps and float values of the records that have a numeric `key`.
  """
  xs, ys = [], []
  for step, data in steps:
    value = _as_float(data.get(key))
    if value is not None:
      xs.append(step)
      ys.append(value)
  return xs, ys


def _draw_or_say_empty(axes, points, label):
  """Plots `points` (xs, ys) on `axes`; returns False when there are none."""
  xs, ys = points
  if not xs:
    return False
  axes.plot(xs, ys, marker="." if len(xs) < 50 else None, label=label)
  return True


def _no_data(axes, what):
  """Writes "no <what> in the log" in the middle of empty axes."""
  axes.text(0.5, 0.5, "no %s in the log" % what, transform=axes.transAxes, ha="center",
            va="center", color="gray")


def _draw_global_norm(axes, points):
  """The finite gradient norms, and a vertical line at each update whose norm is not finite (an
  update that was skipped)."""
  xs, ys = points
  finite = [(x, y) for x, y in zip(xs, ys) if math.isfinite(y)]
  if finite:
    axes.plot(*zip(*finite), marker="." if len(finite) < 50 else None,
              label="global_norm (before clipping)")
  for index, x in enumerate(x for x, y in zip(xs, ys) if not math.isfinite(y)):
    axes.axvline(x, color="red", alpha=0.4,
                 label="non-finite (update skipped)" if index == 0 else None)
  axes.legend(loc="best")
  axes.set_ylabel("gradient norm")


def _draw_loss_scale(axes, points, skipped_points):
  """The loss scale on a log2 axis; the skipped-update count, when logged, on a second axis."""
  _draw_or_say_empty(axes, points, "loss_scaler")
  axes.set_yscale("log", base=2)
  axes.set_ylabel("loss scale")
  handles, labels = axes.get_legend_handles_labels()
  if skipped_points[0]:
    count_axes = axes.twinx()
    count_axes.step(*skipped_points, where="post", color="red", label="skipped_updates")
    count_axes.set_ylabel("skipped updates")
    count_axes.yaxis.set_major_locator(ticker.MaxNLocator(integer=True))
    more_handles, more_labels = count_axes.get_legend_handles_labels()
    handles, labels = handles + more_handles, labels + more_labels
  axes.legend(handles, labels, loc="best")


def plot_log(log_path, out_path, title=None):
  """Draws loss, learning rate, gradient norm and loss scale (when logged), throughput against
  step into a PNG.

  Args:
    log_path: the run log (`DLLL {json}` lines).
    out_path: PNG file to write; its directory is created.
    title: figure title; the log file name by default.

  Returns:
    `out_path`.

  Raises:
    OSError: when the log cannot be read or the PNG not written.
    ValueError: naming the file, when the log has no per-step line.
  """
  steps, summaries = dllogger_setup.read_log(log_path)
  norm_points = series(steps, "global_norm")
  scale_points = series(steps, "loss_scaler")
  optional = [points for points in (norm_points, scale_points) if points[0]]
  fig = figure.Figure(
      figsize=(FIGURE_SIZE[0], FIGURE_SIZE[1] + EXTRA_PANEL_HEIGHT * len(optional)), dpi=100)
  backend_agg.FigureCanvasAgg(fig)
  all_axes = list(fig.subplots(3 + len(optional), 1, sharex=True))
  loss_axes, lr_axes = all_axes[:2]
  throughput_axes = all_axes[-1]
  optional_axes = all_axes[2:-1]
  if norm_points[0]:
    _draw_global_norm(optional_axes.pop(0), norm_points)
  if scale_points[0]:
    _draw_loss_scale(optional_axes.pop(0), scale_points, series(steps, "skipped_updates"))

  drawn = [_draw_or_say_empty(loss_axes, series(steps, key), key) for key in LOSS_KEYS]
  if any(drawn):
    loss_axes.legend(loc="best")
  else:
    _no_data(loss_axes, "loss")
  loss_axes.set_ylabel("loss")

  if not _draw_or_say_empty(lr_axes, series(steps, "learning_rate"), "learning_rate"):
    _no_data(lr_axes, "learning_rate")
  lr_axes.set_ylabel("learning rate")
  lr_axes.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))

  if _draw_or_say_empty(throughput_axes, series(steps, "throughput_train"), "per update"):
    averages = [_as_float(s.get("throughput_train")) for s in summaries]
    averages = [a for a in averages if a is not None and math.isfinite(a)]
    if averages:
      throughput_axes.axhline(averages[-1], linestyle="--", color="black",
                              label="average, warm-up excluded: %.1f" % averages[-1])
    throughput_axes.legend(loc="best")
  else:
    _no_data(throughput_axes, "throughput_train")
  throughput_axes.set_ylabel("throughput (sequences/s)")
  throughput_axes.set_xlabel("step")
  throughput_axes.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))

  for axes in all_axes:
    axes.grid(True, alpha=0.3)
  fig.suptitle(title or os.path.basename(log_path))
  fig.tight_layout()
  parent = os.path.dirname(out_path)
  if parent:
    os.makedirs(parent, exist_ok=True)
  fig.savefig(out_path, format="png")
  return out_path
