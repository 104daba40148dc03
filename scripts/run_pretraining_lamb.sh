#!/usr/bin/env bash
# Two-phase BERT pretraining with LAMB (phase 1: short sequences; phase 2: long sequences, started
# from phase 1's last checkpoint), launched with horovodrun, mpirun or as one process.
#
#   scripts/run_pretraining_lamb.sh --config bert_configs/base.json \
#       --phase1_data /data/seq128 --phase2_data /data/seq512 --output_dir /results \
#       --np 8 --hosts node1:4,node2:4 [--launcher horovodrun|mpirun|srun|none] [--dry_run]
#
# Every option has a default (NVIDIA's recipe, scaled per worker) and `--help` lists them. Batch
# sizes and learning rates are PER WORKER: the global batch is batch x accumulation x workers and
# run_pretraining.py multiplies the learning rate by the number of workers. The python and the
# horovodrun are the project's environment's (scripts/env.sh) unless --python / --horovodrun name
# others; mpirun is the one on PATH unless --mpirun names one. The launcher says which it uses.
# `--launcher srun` runs inside a Slurm allocation (scripts/slurm/pretrain.sbatch): srun starts the
# --np workers itself, wired to MPI through --srun_mpi (pmix by default).
#
# Packed sequences (docs/TRAINING.md, "Packed sequences"): --phase2_data (or --phase1_data) may
# hold packed records (pack_pretraining_data.py); run_pretraining.py reads from them that they are
# packed, nothing else changes here. Keep --phase2_pred at the unpacked records' value. A packed
# row holds several sequences and the batch sizes count rows: to keep the recipe's global batch in
# sequences, divide --phase2_accum (or --phase2_batch) by the average sequences per row that the
# packer's last line prints; leave the learning rate, warmup and steps as they are. The start line
# then says "rows per update (packed: up to K sequences per row)" and the log's throughput_train
# counts sequences.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

declare -A opt=(
  [python]="" [horovodrun]="" [mpirun]=mpirun [srun_mpi]=pmix [config]="$here/bert_configs/base.json" [output_dir]="$here/output/pretraining"
  [phase1_data]="" [phase2_data]="" [eval_data]="" [launcher]=horovodrun [np]=1 [hosts]=""
  [precision]=fp32 [xla]=false [phases]=1,2 [optimizer]=lamb
  [phase1_seq]=128 [phase1_pred]=20 [phase1_batch]=64 [phase1_accum]=128 [phase1_lr]=7.5e-4
  [phase1_steps]=7038 [phase1_warmup]=2000
  [phase2_seq]=512 [phase2_pred]=80 [phase2_batch]=8 [phase2_accum]=512 [phase2_lr]=5e-4
  [phase2_steps]=1563 [phase2_warmup]=200
  [save_checkpoints_secs]=900 [save_checkpoints_steps]="" [display_loss_steps]=1 [dry_run]=false
  [verbose]=false [extra]=""
)
# The recipe's levers (docs/TRAINING.md, "Recipe levers"), both phases; empty: not passed, the
# release's recipe. --warmup_fraction replaces --phase1_warmup / --phase2_warmup.
opt+=([pretraining_dropout]="" [next_sentence_loss]=true [lr_schedule]="" [warmup_fraction]=""
      [adam_beta2]="" [adam_epsilon]="")
# Records without masks (create_pretraining_data.py --dynamic_masking): the vocabulary their masks
# are drawn with, the training rate and its options; empty / false: not passed.
opt+=([vocab_file]="" [masked_lm_prob]="" [whole_word_masking]=false [mask_token_only]=false)

# What an empty default means, for --help.
declare -A default_note=(
  [python]="(the environment's python: scripts/env.sh)"
  [horovodrun]="(the horovodrun next to --python, else the one on PATH)"
  [save_checkpoints_steps]="(none: checkpoints every --save_checkpoints_secs)"
)

usage() {
  echo "usage: $0 [--name value ...]  (flags: --dry_run, --xla, --verbose; 'true' for the others)"
  echo "options and defaults:"
  for key in $(printf '%s\n' "${!opt[@]}" | sort); do
    printf '  --%-24s %s\n' "$key" "${opt[$key]:-${default_note[$key]:-}}"
  done
}

# Whether --save_checkpoints_secs was given (it excludes --save_checkpoints_steps).
secs_given=false
for arg in "$@"; do
  case "$arg" in --save_checkpoints_secs|--save_checkpoints_secs=*) secs_given=true ;; esac
done

while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --dry_run|--xla|--verbose) opt[${1#--}]=true; shift ;;
    --*=*) key="${1%%=*}"; key="${key#--}"; value="${1#*=}"; shift
           [ -n "${opt[$key]+set}" ] || { echo "$0: unknown option --$key" >&2; usage >&2; exit 2; }
           opt[$key]="$value" ;;
    --*) key="${1#--}"
         [ -n "${opt[$key]+set}" ] || { echo "$0: unknown option --$key" >&2; usage >&2; exit 2; }
         [ $# -ge 2 ] || { echo "$0: --$key needs a value" >&2; exit 2; }
         opt[$key]="$2"; shift 2 ;;
    *) echo "$0: unexpected argument $1" >&2; usage >&2; exit 2 ;;
  esac
done

case "${opt[precision]}" in
  fp32) precision_flags=() ;;
  fp16) precision_flags=(--manual_fp16) ;;
  amp) precision_flags=(--amp) ;;
  bf16) precision_flags=(--bf16) ;;
  # The faster of fp32 and bf16 on the workers' machine, measured by rank 0 (once per machine,
  # cached: utils/runtime/bf16_probe.py); the start line says which and why.
  auto) precision_flags=(--precision=auto) ;;
  *) echo "$0: --precision must be fp32, fp16, amp, bf16 or auto, got ${opt[precision]}" >&2; exit 2 ;;
esac
xla_flags=()
[ "${opt[xla]}" = true ] && xla_flags=(--use_xla)

# Checkpoints every --save_checkpoints_secs (a hard kill loses at most that much training), or every
# --save_checkpoints_steps updates when that is given instead (docs/LONG_RUNS.md).
if [ -n "${opt[save_checkpoints_steps]}" ]; then
  [ "$secs_given" = false ] || {
    echo "$0: --save_checkpoints_secs and --save_checkpoints_steps exclude each other: give one" >&2
    exit 2; }
  checkpoint_flags=(--save_checkpoints_steps="${opt[save_checkpoints_steps]}")
else
  checkpoint_flags=(--save_checkpoints_secs="${opt[save_checkpoints_secs]}")
fi

# The project's environment unless told otherwise (its path is the last line env.sh prints).
if [ -z "${opt[python]}" ]; then
  opt[python]="$("$here/scripts/env.sh" | tail -n 1)" \
    || { echo "$0: the environment could not be created (scripts/env.sh)" >&2; exit 1; }
fi
[ -x "${opt[python]}" ] || command -v "${opt[python]}" >/dev/null \
  || { echo "$0: --python ${opt[python]} is not an executable" >&2; exit 2; }
if [ -z "${opt[horovodrun]}" ]; then
  opt[horovodrun]="$(dirname "$(command -v "${opt[python]}")")/horovodrun"
  [ -x "${opt[horovodrun]}" ] || opt[horovodrun]=horovodrun
fi

# resolve TOOL OPTION: the tool's path, or exit 2 naming the option.
resolve() {
  command -v "$1" 2>/dev/null \
    || { echo "$0: $1 not found: install it or name it with --$2" >&2; exit 2; }
}

launch=()
launcher_path=""
case "${opt[launcher]}" in
  horovodrun)
    launcher_path="$(resolve "${opt[horovodrun]}" horovodrun)"
    launch=("${opt[horovodrun]}" -np "${opt[np]}")
    [ -n "${opt[hosts]}" ] && launch+=(-H "${opt[hosts]}")
    horovod=(--horovod) ;;
  mpirun)
    launcher_path="$(resolve "${opt[mpirun]}" mpirun)"
    launch=("${opt[mpirun]}" -np "${opt[np]}" --bind-to none --map-by slot -x PATH -x LD_LIBRARY_PATH)
    [ -n "${opt[hosts]}" ] && launch+=(-H "${opt[hosts]}")
    [ "$(id -u)" = 0 ] && launch+=(--allow-run-as-root)
    horovod=(--horovod) ;;
  srun)
    launcher_path="$(resolve srun launcher)"
    [ -n "${SLURM_JOB_ID:-}" ] \
      || { echo "$0: --launcher srun runs inside a Slurm allocation (sbatch or salloc)" >&2; exit 2; }
    # A worker's non-zero exit leaves the others to end themselves (a graceful stop exits 75 on
    # every worker after one checkpoint; srun killing the rest at the first 75 would cut it short).
    launch=(srun --mpi="${opt[srun_mpi]}" --ntasks="${opt[np]}" --kill-on-bad-exit=0)
    horovod=(--horovod) ;;
  none) horovod=() ;;
  *) echo "$0: --launcher must be horovodrun, mpirun, srun or none, got ${opt[launcher]}" >&2; exit 2 ;;
esac

echo "using python ${opt[python]}${launcher_path:+, launcher $launcher_path}" >&2

# --verbose: every log line of the workers, and horovodrun's own traceback after a failed worker's
# line (left out otherwise: it repeats that line in 18 more; scripts/launcher_output.py).
verbose_flags=()
[ "${opt[verbose]}" = true ] && verbose_flags=(--verbose)

run() {
  echo "+ $*" >&2
  [ "${opt[dry_run]}" = true ] && return 0
  [ "${opt[launcher]}" = horovodrun ] || { "$@"; return; }
  local status=0
  "$@" 2> >("${opt[python]}" "$here/scripts/launcher_output.py" "${verbose_flags[@]}" >&2) \
    || status=$?
  wait $!  # the filter's last lines come before whatever the script prints next
  return "$status"
}

phase() {  # phase N [init_checkpoint]
  local n="$1" init="${2:-}"
  local data="${opt[phase${n}_data]}"
  [ -n "$data" ] || { echo "$0: --phase${n}_data is required for phase $n" >&2; exit 2; }
  local warmup=(--num_warmup_steps="${opt[phase${n}_warmup]}")
  [ -z "${opt[warmup_fraction]}" ] || warmup=()
  local args=(--bert_config_file="${opt[config]}" --input_files_dir="$data"
              --output_dir="${opt[output_dir]}/phase_$n" --do_train
              --optimizer_type="${opt[optimizer]}"
              --max_seq_length="${opt[phase${n}_seq]}"
              --max_predictions_per_seq="${opt[phase${n}_pred]}"
              --train_batch_size="${opt[phase${n}_batch]}"
              --num_accumulation_steps="${opt[phase${n}_accum]}" --allreduce_post_accumulation
              --learning_rate="${opt[phase${n}_lr]}"
              --num_train_steps="${opt[phase${n}_steps]}"
              "${warmup[@]}"
              "${checkpoint_flags[@]}"
              --display_loss_steps="${opt[display_loss_steps]}")
  local key
  for key in pretraining_dropout lr_schedule warmup_fraction adam_beta2 adam_epsilon vocab_file \
             masked_lm_prob; do
    [ -z "${opt[$key]}" ] || args+=(--"$key"="${opt[$key]}")
  done
  [ "${opt[next_sentence_loss]}" = true ] || args+=(--nonext_sentence_loss)
  for key in whole_word_masking mask_token_only; do
    [ "${opt[$key]}" != true ] || args+=(--"$key")
  done
  [ -n "$init" ] && args+=(--init_checkpoint="$init")
  [ -n "${opt[eval_data]}" ] && args+=(--do_eval --eval_files_dir="${opt[eval_data]}")
  # shellcheck disable=SC2206
  local extra=(${opt[extra]})
  run "${launch[@]}" "${opt[python]}" "$here/run_pretraining.py" "${horovod[@]}" \
      "${precision_flags[@]}" "${xla_flags[@]}" "${verbose_flags[@]}" "${args[@]}" "${extra[@]}"
}

IFS=, read -r -a phases <<< "${opt[phases]}"
for n in "${phases[@]}"; do
  case "$n" in
    1) phase 1 ;;
    2) phase 2 "${opt[output_dir]}/phase_1/model.ckpt-${opt[phase1_steps]}" ;;
    *) echo "$0: --phases takes 1, 2 or 1,2, got ${opt[phases]}" >&2; exit 2 ;;
  esac
done
