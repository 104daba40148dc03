"""The lowest layer: what every other module may use.

Errors and exit codes (`errors`), argument checks (`checks`), files by path, local or scheme://
(`paths`), on/off environment variables (`env_flags`) and the graph tensor names producers and
readers share (`graph_names`). Imports the standard library, numpy and TensorFlow only, nothing of
the project.
"""
