"""``python -m dashboard.serve OPTIONS``: ``panel serve OPTIONS`` (what ``./run.sh`` starts), with
the pipeline's run started first, in a process of its own (:mod:`dashboard.pipeline_process`),
so that it runs while Panel, Bokeh's server and the dashboard's modules are imported; with
Python's cyclic garbage collector paused during those imports, and what they made frozen out of
its sight.

Those imports create a few hundred thousand objects that live as long as the process, and each
full collection that they set off, and each after them, walked them all. Paused and frozen, a
cached start on two cores is usable after 2.73 s instead of 3.04 s (12 interleaved starts each; on
the H200, whose cores are faster, no difference shows within its start-to-start spread).
The collector runs again before the server starts; the app freezes its run and views in the same
way and sets its own thresholds (:mod:`dashboard.server_gc`). ``panel serve dashboard/app.py``
serves the same page without this.
"""
from __future__ import annotations

import gc
import os
import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--args" in argv:
        app_args = argv[argv.index("--args") + 1:]
        archive = any(arg.split("=")[0] == "--archive" for arg in app_args) or os.environ.get("ECG_ARCHIVE")
        if not archive:   # (an archive's server runs nothing at start)
            from dashboard import pipeline_process

            pipeline_process.start_early(app_args)   # the run goes on while the imports below are made
    gc.disable()
    try:
        from panel.command import main as panel_main

        # The app's own imports, which the server's `--warm` run of dashboard/app.py makes next.
        from dashboard import archive, data_store, page, review, server_gc, spec, startup, views  # noqa: F401
    finally:
        gc.freeze()    # what the imports made lives as long as the process: no collection need walk it
        gc.enable()
    sys.argv = ["panel", "serve", *argv]
    return panel_main()


if __name__ == "__main__":
    sys.exit(main())
