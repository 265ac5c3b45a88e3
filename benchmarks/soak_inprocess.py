"""What holds a server's memory after its sessions are gone: the soak test with the server in this
process, so that the objects left behind can be counted and traced.

    python -m benchmarks.soak_inprocess [--samples N] [--cycles 60] [--runs runs] [--json out.json]

It serves ``dashboard/app.py`` exactly as ``panel serve`` does (Panel's script handler, the same
``--args``), with Bokeh's unused-session check and lifetime at 1 s, in a thread of this process;
then opens, brushes once and closes ``--cycles`` protocol sessions one after another
(:mod:`tests.support.bokeh_session`). After the first 10 and after the last, once the closed sessions
have been discarded and garbage collected, it counts the live objects by type (the census) and
notes Python's traced allocations by line (tracemalloc). Types whose number grows with the sessions
are what the sessions leave behind; for the dashboard's own per-session objects (``DataStore``,
``Document``) it prints the chain of referrers from one left-behind object of an early session up
to a module or a long-lived object: what keeps it alive.

Not a test; a diagnosis for the soak test of :mod:`benchmarks.interaction`.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import json
import sys
import time
import tracemalloc
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support.served import free_port, process_rss_bytes  # noqa: E402

LIFETIME_MS = 1000
WATCHED = ("DataStore", "Document", "DocumentModelManager", "Brush", "Selection", "LatentChart", "App", "ServerSession")


def serve_in_thread(app_args: list[str], port: int):
    """``panel serve dashboard/app.py --args …`` in a thread of this process: (server, thread)."""
    import panel as pn
    from panel.io.application import build_single_handler_application

    application = build_single_handler_application(str(ROOT / "dashboard" / "app.py"), argv=app_args)
    server = pn.serve({"app": application}, port=port, address="127.0.0.1", show=False, threaded=True,
                      websocket_origin=[f"127.0.0.1:{port}"], check_unused_sessions_milliseconds=LIFETIME_MS,
                      unused_session_lifetime_milliseconds=LIFETIME_MS, start=True)
    return server


def drop_dead_links() -> int:
    """Remove ``panel.links.Callback.registry`` entries whose source widget is shown in no document
    any more (its ``_models`` are gone once its session was cleaned up). Returns how many."""
    from panel.links import Callback

    dead = [source for source in list(Callback.registry.keys()) if not getattr(source, "_models", True)]
    for source in dead:
        Callback.registry.pop(source, None)
    return len(dead)


def census() -> collections.Counter:
    gc.collect()
    return collections.Counter(type(o).__name__ for o in gc.get_objects())


def _describe(obj) -> str:
    if isinstance(obj, types.ModuleType):
        return f"module {obj.__name__}"
    if isinstance(obj, dict):
        return f"dict({len(obj)} keys: {', '.join(map(str, list(obj)[:4]))}…)"
    if isinstance(obj, (list, tuple, set)):
        return f"{type(obj).__name__}(len {len(obj)})"
    if isinstance(obj, types.FrameType):
        return f"frame {obj.f_code.co_name}"
    if isinstance(obj, types.FunctionType):
        return f"function {obj.__module__}.{obj.__qualname__}"
    if isinstance(obj, types.MethodType):
        return f"bound method {obj.__qualname__}"
    if isinstance(obj, types.CellType):
        return "closure cell"
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def reverse_references() -> dict[int, list]:
    """``{id(object): [objects that refer to it]}`` over every object the collector tracks, built
    once (asking ``gc.get_referrers`` per step would scan every object each time)."""
    gc.collect()
    referrers: dict[int, list] = collections.defaultdict(list)
    for obj in gc.get_objects():
        for ref in gc.get_referents(obj):
            referrers[id(ref)].append(obj)
    return referrers


def referrer_chain(target, referrers: dict[int, list], ignore=(), depth: int = 60) -> list[str]:
    """The shortest chain of referrers from ``target`` up to a module or a class (a root that lives
    as long as the process), breadth first; frames and the ``ignore`` containers are skipped."""
    seen = {id(target)} | {id(x) for x in ignore}
    parent = {id(target): None}
    objects = {id(target): target}
    frontier = [target]
    for _ in range(depth):
        following = []
        for obj in frontier:
            for ref in referrers.get(id(obj), ()):
                if id(ref) in seen or isinstance(ref, types.FrameType):
                    continue
                seen.add(id(ref))
                parent[id(ref)], objects[id(ref)] = id(obj), ref
                if isinstance(ref, (types.ModuleType, type)):
                    chain, at = [], id(ref)
                    while at is not None:
                        chain.append(_describe(objects[at]))
                        at = parent[at]
                    return chain[::-1]
                following.append(ref)
        if not following:
            break
        frontier = following
    return [_describe(target), "(no module or class reaches it)"]


async def cycles(url: str, beats, n: int, on_tenth) -> list[str]:
    from benchmarks import inprocess
    from tests.support.bokeh_session import ProtocolSession
    from benchmarks.interaction import LINKED, brush_over_protocol

    rng = np.random.default_rng(0)
    failures = []
    for i in range(1, n + 1):
        session = ProtocolSession(url)
        try:
            await session.open(120)
            view = LINKED[i % len(LINKED)]
            await brush_over_protocol(session, view, inprocess.brush_bounds(beats, view, rng), 60.0)
        except Exception as err:   # noqa: BLE001
            failures.append(f"cycle {i}: {type(err).__name__}: {err}")
        finally:
            await session.close()
        if i % 10 == 0:
            await asyncio.sleep(2 * LIFETIME_MS / 1000 + 1.0)
            on_tenth(i)
    return failures


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="python -m benchmarks.soak_inprocess", description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=2_000_000)
    p.add_argument("--epochs", type=int)
    p.add_argument("--runs", default="runs")
    p.add_argument("--cycles", type=int, default=60)
    p.add_argument("--tracemalloc", action="store_true", help="also compare traced allocations by line (slow)")
    p.add_argument("--drop-dead-links", action="store_true",
                   help="experiment: before each reading, drop panel.links.Callback.registry entries of widgets "
                        "no live document shows (what the growth is once that reference is cut)")
    p.add_argument("--json")
    args = p.parse_args(argv)
    app_args = ["--device", "cpu", "--samples", str(args.samples), "--out", args.runs]
    if args.epochs:
        app_args += ["--epochs", str(args.epochs)]

    from dashboard import startup

    port = free_port()
    server = serve_in_thread(app_args, port)
    url = f"http://127.0.0.1:{port}/app"
    import urllib.request

    deadline = time.time() + 120
    while True:                                  # the first session starts the job
        try:
            with urllib.request.urlopen(url, timeout=120) as response:
                response.read()
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.5)
    job = startup._JOB
    progress = job.wait(1800)
    if progress.state != "ready":
        raise SystemExit(f"error: the pipeline failed: {progress.error}")
    beats = job.result.beats
    if args.tracemalloc:
        tracemalloc.start(8)
    readings, snapshots, censuses, early = [], {}, {}, {}

    def on_tenth(i: int) -> None:
        if args.drop_dead_links:
            dropped = drop_dead_links()
            print(f"       dropped {dropped} Callback.registry entries of widgets no document shows", flush=True)
        counts = census()
        readings.append({"sessions": i, "rss_bytes": process_rss_bytes(__import__("os").getpid()),
                         "watched": {k: counts.get(k, 0) for k in WATCHED}})
        print(f"{i:>4} sessions: RSS {readings[-1]['rss_bytes'] / 2**20:.0f} MiB, "
              + ", ".join(f"{k} {v}" for k, v in readings[-1]["watched"].items()), flush=True)
        if i == 10:
            censuses["first"] = counts
            if args.tracemalloc:
                snapshots["first"] = tracemalloc.take_snapshot()
            from dashboard.data_store import DataStore

            early["stores"] = [o for o in gc.get_objects() if isinstance(o, DataStore)]
        censuses["last"] = counts

    failures = asyncio.run(cycles(url, beats, args.cycles, on_tenth))
    if args.tracemalloc:
        snapshots["last"] = tracemalloc.take_snapshot()
    growth = {k: censuses["last"][k] - censuses["first"].get(k, 0) for k in censuses["last"]}
    grown = sorted(((v, k) for k, v in growth.items() if v > 0), reverse=True)[:25]
    print("\nobject types that grew between 10 and", args.cycles, "sessions:")
    for v, k in grown:
        print(f"  {k:<40}{v:>+8}")
    top = snapshots["last"].compare_to(snapshots["first"], "lineno")[:15] if args.tracemalloc else []
    if top:
        print("\nallocations that grew (tracemalloc, by line):")
    for stat in top:
        print(f"  {stat}")
    chains = {}
    # A session of this soak brushed once; the warm-up's store (app.warm_up) ends without a brush.
    stores = [s for s in early.get("stores", []) if s.brush]
    referrers = reverse_references() if stores else {}
    for k, store in enumerate(stores[:3]):
        chain = referrer_chain(store, referrers, ignore=(early, early["stores"], stores, referrers))
        chains[f"DataStore {k}"] = chain
        print(f"\nwhat keeps the DataStore of an early session ({k}) alive:\n  " + "\n  <- ".join(chain))
    result = {"readings": readings, "failures": failures, "grown_types": [[k, v] for v, k in grown],
              "allocations_grown": [str(s) for s in top], "referrer_chains": chains}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    server.stop()
    return result


if __name__ == "__main__":
    main()
