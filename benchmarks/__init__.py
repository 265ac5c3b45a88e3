"""Benchmarks (measurements only; not shipped with the product), run from a checkout.

run, contenders, recordings   ``./run.sh bench``: CSV parse, segmentation, VAE, end to end, side by side
interaction                   the dashboard in Chromium or over Bokeh's protocol, server side, load, soak
many_sessions, server_side    interaction's load and soak tests; its server side, in process
serve_start                   fresh processes: the server to a usable dashboard, ``pipeline run``
train_speed, threads          VAE training steps: captured against plain, under CPU contention
archive                       batch throughput on synthetic archives, GPU busy time
detection, reference_dev      detection (EC57) and the calibrated score on DS1
sessions                      the one session harness: Chromium page, protocol gestures
measure, report               the one way to time, summarise and budget; the one results writer
"""
