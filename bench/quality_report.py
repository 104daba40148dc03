"""What bench/quality.py computes from its curves and prints: minutes to the target loss, whether
a curve still falls at its end, the speed-up's median and range, the tables (variants, ablations,
the plan), the figure of evaluation loss against minutes, and the result's figures (`summarize`)."""

import math
import statistics

# A curve still falls at its end when a least-squares line through its last quarter drops by at
# least this fraction of the loss (the line's value at the quarter's start).
STILL_FALLING_DROP = 0.01


def first_reached(points, target):
  """Where the curve `points` [(x, loss), ...] (x in increasing order: minutes or updates) first
  reaches `target`, linear between points; None when it never does."""
  previous = None
  for x, loss in points:
    if loss <= target:
      if previous is None or previous[1] == loss:
        return x
      fraction = (previous[1] - target) / (previous[1] - loss)
      return previous[0] + fraction * (x - previous[0])
    previous = (x, loss)
  return None


def last_quarter_drop(points):
  """The fraction of the loss a least-squares line through the last quarter of `points`
  [(minutes, loss), ...] (its last ceil(n / 4) points, at least 2) drops over that quarter:
  (line at the quarter's first minute - line at its last) / line at its first."""
  tail = points[-max(2, int(math.ceil(len(points) / 4.0))):]
  xs, ys = [m for m, _ in tail], [l for _, l in tail]
  mean_x, mean_y = statistics.mean(xs), statistics.mean(ys)
  spread = sum((x - mean_x) ** 2 for x in xs)
  slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / spread if spread else 0.0
  first = mean_y + slope * (xs[0] - mean_x)
  return -slope * (xs[-1] - xs[0]) / first


def still_falling(points):
  """{"falling": whether last_quarter_drop >= STILL_FALLING_DROP, "drop": the fraction}."""
  drop = last_quarter_drop(points)
  return {"falling": drop >= STILL_FALLING_DROP, "drop": round(drop, 4)}


def _ranked(values):
  """`values` in order with None (a job that never reached the target, so took longer than any
  that did) after every number."""
  return sorted(values, key=lambda v: (v is None, v or 0.0))


def _median(values):
  """The median of `values` ranked by _ranked; None when a job that never reached it is at the
  middle (half or more of them never did)."""
  ranked = _ranked(values)
  middle = ranked[(len(ranked) - 1) // 2:len(ranked) // 2 + 1]
  return None if None in middle else statistics.mean(middle)


def spread(values):
  """{"median", "min", "max", "values"} of numbers, None where a job never reached the target.

  Such a job ran its whole budget without reaching it, so it ranks after every job that did: the
  median counts it (None when it is at the middle), and so does the range, whose end it leaves
  open ("max" None). Leaving it out would take the median of the faster jobs only."""
  known = [v for v in values if v is not None]
  median = _median(values)
  return {"median": None if median is None else round(median, 4),
          "min": round(min(known), 4) if known else None,
          "max": round(max(known), 4) if len(known) == len(values) else None,
          "values": values}


def speedup(original_minutes, minutes):
  """How many times sooner than the original a variant reaches the target: {"median": median of
  the original's minutes / median of the variant's, "min", "max": the extreme ratios of one
  original repeat to one of the variant's} (medians and ends as spread() takes them); None when
  either median is not reached. An end a repeat that never reached leaves open is None: "min"
  when one of the variant's never did, "max" when one of the original's never did."""
  base_median, ours_median = _median(original_minutes), _median(minutes)
  if base_median is None or ours_median is None:
    return None
  # The ends as spread() gives them: "max" None where a repeat never reached the target.
  base, ours = spread(original_minutes), spread(minutes)
  return {"median": round(base_median / ours_median, 2),
          "min": None if ours["max"] is None else round(base["min"] / ours["max"], 2),
          "max": None if base["max"] is None else round(base["max"] / ours["min"], 2)}


def figure(path, curves, target, title):
  """Draws evaluation MLM loss against minutes into the PNG `path`: one colour per variant (the
  part of a curve name before "_seed"), every repeat drawn, the target dashed. `curves`:
  {name: [(minutes, loss), ...]}; returns nothing."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, axes = plt.subplots(figsize=(8, 5))
  colours = {}
  for name, points in curves.items():
    variant = name.split("_seed")[0]
    first = variant not in colours
    colour = colours.setdefault(variant, "C%d" % (len(colours) % 10))
    axes.plot([m for m, _ in points], [l for _, l in points], marker=".", color=colour,
              label=variant if first else None, alpha=0.8, linewidth=1)
  axes.axhline(target, linestyle="--", color="grey", label="target %.3f" % target)
  axes.set_xlabel("minutes since the job's start (start-up included)")
  axes.set_ylabel("evaluation masked-LM loss")
  # The first minute's fall from ln(vocab) would flatten the part where the jobs differ.
  lowest = min(l for points in curves.values() for _, l in points)
  axes.set_ylim(min(lowest, target) - 0.1, max(target, lowest) + 1.5)
  axes.set_title(title)
  axes.legend(fontsize=8)
  axes.grid(alpha=0.3)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def _cell(summary, digits=2, open_end="not reached"):
  """"median (min-max)" of a spread() or speedup() dict, `open_end` for an end a job that never
  reached the target leaves open; "not reached" when the median is."""
  if summary is None or summary["median"] is None:
    return "not reached"
  number = lambda v: open_end if v is None else "%.*f" % (digits, v)
  return "%s (%s-%s)" % (number(summary["median"]), number(summary["min"]),
                         number(summary["max"]))


def print_plan(plan):
  """Prints the plan (quality.py's plan dict: budgets, updates, passes, estimated minutes)."""
  print("\nPlan: the original's budget B = %.2f minutes (%s); estimated %.1f minutes in all "
        "(%s)\n" % (plan["budget_minutes"], plan["budget_reason"],
                    plan["estimated_minutes"]["total"],
                    ", ".join("%s %.1f" % kv for kv in plan["estimated_minutes"].items()
                              if kv[0] != "total")))
  print("| variant | budget (minutes) | repeats | updates | sequences/update | fraction of "
        "its training split |")
  print("|---|---|---|---|---|---|")
  for name, job in plan["jobs"].items():
    print("| %s | %.2f | %d | %d | %.1f | %.3f |" % (
        name, job["budget_minutes"], job["seeds"], job["updates"], job["sequences_per_update"],
        job["pass_fraction"]))
  print(flush=True)


def print_tables(result):
  """Prints, in Markdown, each variant's minutes to the target, final loss, speed-up and
  fine-tuned dev accuracy, then the ablation table (each choice: what fast loses without it), and
  the curves that no longer fall; returns nothing."""
  print("\nTarget: the original's final evaluation masked-LM loss, median of its repeats: %.4f\n"
        % result["target_loss"])
  print("| variant | budget (minutes) | minutes to target, median (min-max) | x original | "
        "updates to target, median | final eval MLM loss | fine-tuned dev accuracy, mean "
        "(min-max) |")
  print("|---|---|---|---|---|---|---|")
  for name, summary in result["variants"].items():
    ratio = result["speedups"].get(name)
    dev = result["final_dev_accuracy"].get(name)
    updates = summary["updates_to_target"]["median"]
    print("| %s | %.2f | %s | %s | %s | %s | %s |" % (
        name, summary["budget_minutes"], _cell(summary["minutes_to_target"]),
        "" if name == "original" else _cell(ratio, open_end="open"),
        "not reached" if updates is None else "%.0f" % updates,
        _cell(summary["final_loss"], 3),
        "" if dev is None else "%.3f (%.3f-%.3f)" % (dev["mean"], dev["min"], dev["max"])))
  print("\nAblations: fast without one of its choices (one repeat each; fast's median beside it)\n")
  print("| without | job | minutes to target | vs fast | final eval MLM loss | vs fast |")
  print("|---|---|---|---|---|---|")
  for row in result["ablations"]:
    print("| %s | %s | %s | %s | %.3f | %+.3f |" % (
        row["lever"], row["variant"],
        "not reached" if row["minutes_to_target"] is None else "%.2f" % row["minutes_to_target"],
        "" if row["minutes_vs_fast"] is None else "%+.2f" % row["minutes_vs_fast"],
        row["final_loss"], row["final_loss_vs_fast"]))
  flat = [name for name, s in result["still_falling"].items() if not s["falling"]]
  print("\nCurves still falling in their last quarter (>= %g%% of the loss): %d of %d%s\n" % (
      100 * STILL_FALLING_DROP, len(result["still_falling"]) - len(flat),
      len(result["still_falling"]), "; not: " + ", ".join(flat) if flat else ""))


def ablation_rows(ablations, variants):
  """The ablation table's rows: for each (name, lever) of `ablations`, its minutes to target and
  final loss (from `variants`, quality.py's {variant: summary}) and their differences from fast's
  medians."""
  fast = variants["fast"]
  rows = []
  for name, lever in ablations:
    summary = variants[name]
    minutes, loss = summary["minutes_to_target"]["median"], summary["final_loss"]["median"]
    fast_minutes = fast["minutes_to_target"]["median"]
    rows.append({"variant": name, "lever": lever, "minutes_to_target": minutes,
                 "minutes_vs_fast": (None if minutes is None or fast_minutes is None
                                     else round(minutes - fast_minutes, 2)),
                 "final_loss": loss,
                 "final_loss_vs_fast": round(loss - fast["final_loss"]["median"], 4)})
  return rows


def summarize(variants, jobs, evaluations, plan):
  """The result's figures (dict) from the jobs and their evaluations ({job name: [(minutes,
  update, metrics)]}, quality.evaluate_jobs): curves, the target (the original's median final
  loss), minutes and updates to it, per-variant summaries, speed-ups, still_falling, ablations.

  Updates to the target do not drift with the box's speed as minutes do: between variants of one
  cost (fast and an exploration of its rate, say) they compare what each update buys alone."""
  curves = {name: [(m, v["masked_lm_loss"]) for m, _, v in points]
            for name, points in evaluations.items()}
  by_variant = {v.name: [job["name"] for job in jobs if job["variant"] == v.name]
                for v in variants}
  final = {name: points[-1][2] for name, points in evaluations.items()}
  # Unrounded: the original's median repeat reaches it at its last checkpoint.
  target = statistics.median(final[n]["masked_lm_loss"] for n in by_variant["original"])
  to_target = {name: first_reached(points, target) for name, points in curves.items()}
  updates_to_target = {name: first_reached([(u, v["masked_lm_loss"]) for _, u, v in points],
                                           target)
                       for name, points in evaluations.items()}
  summaries = {}
  for variant in variants:
    names = by_variant[variant.name]
    summaries[variant.name] = {
        "budget_minutes": plan["jobs"][variant.name]["budget_minutes"],
        "minutes_to_target": spread([to_target[n] for n in names]),
        "updates_to_target": spread([updates_to_target[n] for n in names]),
        "final_loss": spread([final[n]["masked_lm_loss"] for n in names]),
        "final_accuracy": spread([final[n]["masked_lm_accuracy"]
                                                 for n in names])}
  speedups = {name: speedup(summaries["original"]["minutes_to_target"]["values"],
                                           s["minutes_to_target"]["values"])
              for name, s in summaries.items() if name != "original"}
  ablations = [(v.name, v.lever) for v in variants if v.lever is not None]
  return {
      "target_loss": round(target, 4),
      "curves": {n: [[round(m, 3), round(l, 4)] for m, l in points]
                 for n, points in curves.items()},
      "accuracy_curves": {n: [[round(m, 3), round(v["masked_lm_accuracy"], 4)]
                              for m, _, v in points] for n, points in evaluations.items()},
      "minutes_to_target_loss": {n: None if m is None else round(m, 3)
                                 for n, m in to_target.items()},
      "updates_to_target_loss": {n: None if u is None else round(u, 1)
                                 for n, u in updates_to_target.items()},
      "variants": summaries, "speedup": speedups.get("fast"), "speedups": speedups,
      "still_falling": {n: still_falling(points) for n, points in curves.items()},
      "ablations": (ablation_rows(ablations, summaries)
                    if ablations and "fast" in summaries else []),
  }
