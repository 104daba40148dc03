"""Checkpoints: what one holds and the role of each variable, reading and writing tensors
(`contents`), whether a checkpoint in --output_dir fits the model a run describes (`compat`), the
weights-only release bundle (`release`), the checkpoint to resume from and each save's health
(`recovery`), and the hand-off formats: Hugging Face directories (`huggingface`, on the numpy
readers and writers `safetensors` and `torch_pickle`), the encoder SavedModel (`saved_model`) and
directories written whole or not at all (`staging`). Imports `utils.core`, `utils.runtime`
(`disk_space`), `utils.model` and the release's modules.
"""
