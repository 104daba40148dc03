"""What bench/quality.py prints and draws from its result: the checkpoints' table, the
time-to-target table, the final checkpoints' fine-tuning table (packed comparisons) and the
figure of evaluation loss against minutes."""


def figure(path, curves, target, budget_minutes):
  """Draws evaluation MLM loss against minutes, one curve per job, the target loss dashed, into
  the PNG `path`. `curves`: {variant: [(minutes, loss), ...]}; returns nothing."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, axes = plt.subplots(figsize=(7, 4.2))
  for variant, points in curves.items():
    axes.plot([m for m, _ in points], [l for _, l in points], marker=".", label=variant)
  axes.axhline(target, linestyle="--", color="grey", label="target %.2f" % target)
  axes.set_xlabel("minutes since the job's start (start-up included)")
  axes.set_ylabel("evaluation masked-LM loss")
  axes.set_xlim(0, budget_minutes * 1.05)
  # The first minute's fall from ln(vocab) would flatten the part where the jobs differ.
  lowest = min(l for points in curves.values() for _, l in points)
  axes.set_ylim(min(lowest, target) - 0.05, max(target + 0.8, lowest + 0.8))
  axes.set_title("BERT-tiny on the demo corpus, %g-minute budget, 2 cores" % budget_minutes)
  axes.legend()
  axes.grid(alpha=0.3)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def print_tables(result):
  """Prints, in Markdown, the first job's checkpoints, the minutes to the target loss and (when
  the result has `final_dev_accuracy`) the final checkpoints' fine-tuning; returns nothing."""
  print("\n%s, %g-minute budget (unigram baseline accuracy %.4f)\n" % (
      result["variant"], result["budget_minutes"], result["unigram_accuracy"]))
  print("| checkpoint | update | minutes | eval MLM loss | MLM accuracy | NSP accuracy | "
        "dev accuracy, mean (min-max) over %d seeds |" % result["seeds"])
  print("|---|---|---|---|---|---|---|")
  for row in result["checkpoints"]:
    d = row["dev_accuracy"]
    print("| %d%% | %d | %.1f | %.3f | %.3f | %.3f | %.3f (%.3f-%.3f) |" % (
        round(row["fraction"] * 100), row["update"], row["minutes"], row["masked_lm_loss"],
        row["masked_lm_accuracy"], row["next_sentence_accuracy"], d["mean"], d["min"], d["max"]))
  print("| random weights | | | | | | %.3f |" % result["random_dev_accuracy"])
  print("\nMinutes to an evaluation MLM loss of %.2f:\n" % result["target_loss"])
  print("| job | rows/update | sequences/update | updates | updates/s | minutes to target | "
        "x original |")
  print("|---|---|---|---|---|---|---|")
  minutes = result["minutes_to_target_loss"]
  for job in result["jobs"]:
    m = minutes[job["variant"]]
    base = minutes.get("original")
    print("| %s | %d | %.1f | %d | %.2f | %s | %s |" % (
        job["variant"], job["rows_per_update"], job["sequences_per_update"], job["updates"],
        job["updates_per_s"], "not reached" if m is None else "%.1f" % m,
        "%.2f" % (base / m) if m and base else ""))
  if "final_dev_accuracy" in result:
    print_final_table(result)
  print()


def print_final_table(result):
  """Prints the fine-tuning of each job's final checkpoint (result["final_dev_accuracy"]), in
  Markdown: mean (min-max) over the same seeds; returns nothing."""
  print("\nFine-tuned from each job's final checkpoint, %d seeds each:\n" % result["seeds"])
  print("| job | final update | eval MLM loss | dev accuracy, mean (min-max) |")
  print("|---|---|---|---|")
  for job in result["jobs"]:
    d = result["final_dev_accuracy"][job["variant"]]
    print("| %s | %d | %.3f | %.3f (%.3f-%.3f) |" % (
        job["variant"], job["final_update"], job["final_mlm_loss"], d["mean"], d["min"],
        d["max"]))
