#!/usr/bin/env bash
# prepare_corpus.py on a Slurm cluster: submits one job per stage (extract, shard, vocab, records,
# pack with --pack), each an array of tasks sharing the stage's units and starting once the stage
# before ended well, then a single job that checks the whole output. Run it where you run sbatch,
# with the flags you would give prepare_corpus.py (docs/DATA.md, "From raw text"):
#
#   scripts/slurm/prepare_corpus.sh --input=/shared/enwiki-latest-pages-articles.xml.bz2 \
#       --output_dir=/shared/corpus [flags of prepare_corpus.py ...] [--dry_run]
#
# Settings: the EDIT lines below, each also taken from the environment (e.g. `TASKS=64
# scripts/slurm/prepare_corpus.sh ...`). Every job runs scripts/slurm/prepare_corpus.sbatch;
# sbatch's own environment variables (SBATCH_PARTITION, SBATCH_ACCOUNT, SBATCH_QOS, ...) apply to
# every job.
#
# What happens:
# - The flags are checked and the stages' units counted first (`prepare_corpus.py
#   --count_units`): a wrong flag or a missing input stops here (exit 2), nothing submitted.
# - Stage S is `sbatch --array=0-(N-1) --dependency=afterok:<the job of the stage before>
#   --kill-on-invalid-dep=yes scripts/slurm/prepare_corpus.sbatch --stage=S FLAGS`, N = the
#   stage's units, TASKS at most: task i does the units whose index is i mod N that the manifest
#   does not show done. The check (`--stage=check`) is one job after the last stage.
# - A task Slurm requeues (a lost node, a preemption, `scontrol requeue`) redoes only its own units
#   that are not done; the stage after it waits for it. A task that fails (a bad input: exit 2)
#   cancels the jobs of the later stages: submit the same command again, done units are kept.
#   Do not submit it again while its jobs run: two tasks would work on the same units.
# - `--dry_run` prints the sbatch commands (the job ids of the stages as <stage>) and submits
#   nothing.

# EDIT: the tasks of a stage at most (they run at once when the cluster has room for them), each
# task's CPUs (its --num_workers) and time limit (the longest stage's share: a dump's extract is
# one unit), where the jobs' output files go, the project's python (default: its environment,
# scripts/env.sh).
TASKS="${TASKS:-16}"
CPUS_PER_TASK="${CPUS_PER_TASK:-8}"
TIME_LIMIT="${TIME_LIMIT:-24:00:00}"
LOG_DIR="${LOG_DIR:-$PWD}"
PYTHON="${PYTHON:-}"

name="$(basename "${BASH_SOURCE[0]}")"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BATCH_SCRIPT="$REPO/scripts/slurm/prepare_corpus.sbatch"
usage_error() { echo "$name: $*" >&2; exit 2; }

dry_run=0
args=()
for arg in "$@"; do
  case "$arg" in
    -h|--help)
      sed -n '2,/^PYTHON=/p' "${BASH_SOURCE[0]}"
      echo
      echo "Arguments go to prepare_corpus.py (\`python prepare_corpus.py --help\` lists them), except the ones this script sets: --stage, --task_index, --num_tasks, --count_units."
      exit 0 ;;
    --dry_run) dry_run=1 ;;
    --stage*|--task_index*|--num_tasks*|--count_units*|--nocount_units)
      usage_error "${arg%%=*} is set by this script (a job per stage, an array task per share of its units): give the other flags of prepare_corpus.py" ;;
    *) args+=("$arg") ;;
  esac
done
[[ "$TASKS" =~ ^[1-9][0-9]*$ ]] || usage_error "TASKS must be a positive integer, got '$TASKS'"
[[ "$CPUS_PER_TASK" =~ ^[1-9][0-9]*$ ]] || usage_error "CPUS_PER_TASK must be a positive integer, got '$CPUS_PER_TASK'"
[ -d "$LOG_DIR" ] || usage_error "LOG_DIR: $LOG_DIR is not a directory"
LOG_DIR="$(cd "$LOG_DIR" && pwd)"
if [ -z "$PYTHON" ]; then
  PYTHON="$("$REPO/scripts/env.sh" | tail -n 1)" || { echo "$name: no python: scripts/env.sh failed (set PYTHON)" >&2; exit 2; }
fi

# "STAGE UNITS" lines, in the order the stages run; prepare_corpus.py names a bad flag itself.
units="$("$PYTHON" "$REPO/prepare_corpus.py" --count_units "${args[@]}")" || exit $?

# Shows a command as a shell would read it: arguments with other characters than these quoted.
plain='^[A-Za-z0-9_./:=,@%+-]+$'
show() {
  local out="+" arg
  for arg in "$@"; do
    if [[ "$arg" =~ $plain ]]; then out+=" $arg"; else out+=" '${arg//\'/\'\\\'\'}'"; fi
  done
  echo "$out"
}

submitted=()
# Cancels the jobs submitted so far (a chain cut short would run without its end) and exits 1.
abandon() {
  echo "$name: sbatch failed for the stage $1 (its error is above)" >&2
  if [ "${#submitted[@]}" -gt 0 ]; then
    echo "$name: cancelling the jobs submitted before it: ${submitted[*]}" >&2
    scancel "${submitted[@]}"
  fi
  exit 1
}

export REPO PYTHON
previous=""
while read -r stage count; do
  [ -n "$stage" ] || continue
  sbatch_args=(--parsable --job-name="prepare-corpus-$stage" --cpus-per-task="$CPUS_PER_TASK"
               --time="$TIME_LIMIT")
  if [ "$stage" = check ]; then
    tasks=1
    sbatch_args+=(--output="$LOG_DIR/prepare-corpus-$stage-%j.out")
  else
    tasks=$((count < TASKS ? count : TASKS))
    [ "$tasks" -ge 1 ] || tasks=1
    sbatch_args+=(--array="0-$((tasks - 1))" --output="$LOG_DIR/prepare-corpus-$stage-%A_%a.out")
  fi
  [ -n "$previous" ] && sbatch_args+=(--dependency="afterok:$previous" --kill-on-invalid-dep=yes)
  command=(sbatch "${sbatch_args[@]}" "$BATCH_SCRIPT" --stage="$stage" "${args[@]}")
  if [ "$dry_run" = 1 ]; then
    show "${command[@]}"
    job="<$stage>"
  else
    job="$("${command[@]}" </dev/null)" || abandon "$stage"
    job="${job%%;*}"
    submitted+=("$job")
  fi
  echo "$name: $stage: job $job, $tasks task(s) for $count unit(s)"
  previous="$job"
done <<< "$units"

if [ "$dry_run" = 1 ]; then
  echo "$name: a dry run: nothing submitted"
else
  echo "$name: the check job $previous ends COMPLETED once every unit is done and every file is as recorded; output files: $LOG_DIR/prepare-corpus-*.out"
fi
