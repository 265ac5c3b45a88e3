"""Benchmarks: the GPU pipeline, the CPU pipeline and NeuroKit2 side by side on the same recordings.

``python -m benchmarks.run`` writes ``benchmarks/results/<machine>-<date>.{json,md,png}``; see
:mod:`benchmarks.run` for the options and the method.

Modules
-------
recordings   the seeded synthetic recording of each size, written once as CSV and reused
contenders   what each contender times (load, segmentation, VAE, end to end), GPU imports lazy
measure      warm-up, device-synchronised clocks, repeats under a budget, peak memory, the machine
report       ratios, log-log slopes, targets; the JSON, Markdown and plot
run          the command line and the loop over sizes and contenders
"""
