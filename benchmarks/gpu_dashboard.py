"""The dashboard's interactions on a GPU machine without a browser: both boards, over the Bokeh
protocol and server-side, the 20-session load and the 200-session soak, and cuxfilter == default.

On the H200 (from the repository root, after the cuDF pack is loaded; ``../shared/gpu/README.md``)::

    python3 .gpupack/meta/load.py && . .gpupack/meta/env.sh &&
    PYTHONPATH=.:$PYTHONPATH python3 -m benchmarks.gpu_dashboard --out $OUT

    # 200M samples (~1M beats), server-side brushes only (a separate command of < 10 minutes):
    PYTHONPATH=.:$PYTHONPATH python3 -m benchmarks.gpu_dashboard --scale --out $OUT

Each step prints ``PASS``/``FAIL``/``SKIP`` with its time; the whole run keeps to ``--budget-s``
(default 540 s: steps that no longer fit are skipped and say so). For each board (``bokeh``, the
default, and ``cuxfilter``) it starts ``panel serve dashboard/app.py --args --device gpu --board …``
on the 20M-sample default (the first start runs the pipeline; the run is cached in ``--runs``) and
measures through protocol sessions (:mod:`tests.support.bokeh_session`):

- **session open**: websocket connect → document pulled (the server builds the page on connect);
- **brush**: the brush sent (``Brush.bounds`` on the default board; the box selection's
  ``selectiongeometry`` event on cuxfilter's charts) → the last patch of the answer received
  (the version marker changed and the server then stayed quiet for 0.25 s);
- **zoom/pan**: the recording's ``x_range`` start and end sent together → the last patch (the
  raster, or the raw samples, of the new window);
- on the default board, **20 sessions** brushing at once (p95 against one session, failures,
  each session's count against what its own brushes select);

then, in this process on the same run, the **server-side** time of each interaction (property
change → patch serialized, :mod:`benchmarks.inprocess`) for both boards, and checks that the
cuxfilter board shows the same counts as the default board for the same brushes; last, on the
default board's server (kept running), a **soak** of up to 200 sessions opened, brushed once and
closed, with the server's RSS after every 10 (short ``--unused-session-lifetime``, so closed
sessions go within seconds; as many cycles as the budget leaves). ``--scale``
instead runs the pipeline on a 200M-sample recording (tiled, ``benchmarks.recordings``;
``--scale-epochs`` VAE epochs, since a brush's cost does not depend on how well the model is
trained) and times server-side brushes on it (target: p95 ≤ 100 ms).

It ends with a compact table and writes ``gpu_dashboard.json`` (or ``gpu_dashboard_scale.json``)
to ``--out``. Without a GPU, ``--device cpu --boards bokeh`` runs the same plumbing on the CPU.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import stats  # noqa: E402
from benchmarks.inprocess import LINKED, run_beats  # noqa: E402

# Every session here is a protocol session, created when its websocket connects, so a short lifetime
# discards only closed ones (a browser's session would count as unused while its page loads).
SESSION_LIFETIME_MS = 500
# Protocol sessions per load-test process: a process applies every patch of each of its sessions,
# and meanwhile its other sessions' answers wait to be read, so the fewer it holds, the less it
# delays its own readings (the `stalls` summary names the processes of the slow brushes).
SESSIONS_PER_CLIENT = 2
SERVE_ARGS = ["--check-unused-sessions", str(SESSION_LIFETIME_MS), "--unused-session-lifetime", str(SESSION_LIFETIME_MS)]
TARGETS_H200 = {"brush end to end p95": 50.0, "brush server-side p95": 20.0, "zoom/pan p95": 150.0,
                "session open": 3000.0, "scale brush server-side p95": 100.0}
RESULTS: dict = {"steps": {}}
FAILED: list[str] = []


# --------------------------------------------------------------------------- steps and the budget
class StepTimeout(Exception):
    pass


@contextlib.contextmanager
def deadline(seconds: float):
    """Raise StepTimeout in the main thread after ``seconds`` (SIGALRM)."""
    def expire(signum, frame):
        raise StepTimeout(f"step took longer than {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 1))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class Budget:
    def __init__(self, seconds: float):
        self.end = time.perf_counter() + seconds

    def left(self) -> float:
        return self.end - time.perf_counter()


RESULTS_FILE: list[Path] = []   # where save() writes (set by main)


def save() -> None:
    """Write what has been measured so far: a run stopped from outside (its command's time limit)
    keeps every step that finished."""
    RESULTS["failed"], RESULTS["targets_h200"] = FAILED, TARGETS_H200
    for path in RESULTS_FILE:
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(RESULTS, indent=1, default=str))


def step(name: str, budget: Budget, limit: float, needs: float = 10.0):
    """Decorator: run now within min(limit, what the budget has left), print PASS/FAIL/SKIP."""
    def run(fn):
        allowed = min(limit, budget.left() - 5)
        if allowed < needs:
            print(f"SKIP {name}: {budget.left():.0f} s of the budget left, it needs ~{needs:.0f} s", flush=True)
            RESULTS["steps"][name] = {"ok": None, "skipped": "budget"}
            return None
        started = time.perf_counter()
        print(f"---- {name}", flush=True)
        try:
            with deadline(allowed):
                value = fn()
            seconds = time.perf_counter() - started
            detail = f" — {value}" if isinstance(value, str) else ""
            print(f"PASS {name} ({seconds:.1f} s){detail}", flush=True)
            RESULTS["steps"][name] = {"ok": True, "seconds": round(seconds, 2)}
            return value if value is not None else True
        except BaseException as err:  # noqa: BLE001 - report everything, keep going
            seconds = time.perf_counter() - started
            print(f"FAIL {name} ({seconds:.1f} s): {type(err).__name__}: {err}", flush=True)
            traceback.print_exc()
            sys.stdout.flush()
            RESULTS["steps"][name] = {"ok": False, "seconds": round(seconds, 2), "error": f"{type(err).__name__}: {err}"}
            FAILED.append(name)
            if isinstance(err, KeyboardInterrupt):
                raise
            return None
        finally:
            save()
    return run


def expect(condition, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def ms(values_s) -> dict:
    return stats.summary([v * 1000 for v in values_s])


# --------------------------------------------------------------------------- protocol interactions
async def protocol_interactions(url: str, board: str, shared_like, args) -> dict:
    """Session opens, brushes (and clears) and zoom/pan gestures through protocol sessions."""
    from benchmarks import inprocess
    from tests.support.bokeh_session import ProtocolSession, SessionError

    opens = []
    for i in range(args.opens + 1):              # the first one warms up
        session = ProtocolSession(url)
        try:
            timing = await session.open(120)
        finally:
            await session.close()
        if i:
            opens.append(timing)
    session = ProtocolSession(url)
    await session.open(120)
    rng = np.random.default_rng(args.seed)
    out: dict[str, list] = {}
    brushes_in_order = []                       # (clock, ms): when the slow ones fall
    try:
        failures = []

        async def timed(kind: str | None, gesture) -> None:
            """Run one gesture; keep its time under ``kind`` (None: a warm-up). A gesture the
            server never answers is noted and the run goes on."""
            try:
                seconds = await gesture
            except SessionError as err:
                failures.append(f"{kind or 'warm-up'}: {err}")
                return
            if kind:
                out.setdefault(kind, []).append(seconds)
            if kind and kind.startswith("brush"):
                brushes_in_order.append((time.perf_counter(), round(seconds * 1e3, 1)))

        for view in LINKED:                       # untimed warm-up
            await timed(None, protocol_brush(session, board, view, inprocess.brush_bounds(shared_like.beats, view, rng)))
            await timed(None, protocol_brush(session, board, view, None))
        for i in range(args.brushes):
            for view in LINKED:
                bounds = inprocess.brush_bounds(shared_like.beats, view, rng)
                await timed(f"brush {view}", protocol_brush(session, board, view, bounds))
            if i % 10 == 9 or i == args.brushes - 1:
                for view in LINKED:
                    await timed("clear", protocol_brush(session, board, view, None))
        for kind, lo, hi in inprocess.zoom_plan(shared_like.duration_s, args.gestures, rng):
            await timed(kind, protocol_zoom(session, lo, hi))
        errors = list(session.errors) + failures
    finally:
        await session.close()
    result = {kind: ms(v) for kind, v in out.items()}
    result["all brushes"] = ms([x for k, v in out.items() if k.startswith("brush") for x in v])
    result["all zoom/pan"] = ms([x for k, v in out.items() if k in ("zoom in", "pan", "zoom out") for x in v])
    result["session open"] = ms([o["total_s"] for o in opens])
    result["document"] = {"models": opens[0]["models"] if opens else None,
                          "bytes": opens[0]["bytes"] if opens else None}
    result["errors"] = errors
    first = brushes_in_order[0][0] if brushes_in_order else 0.0
    result["brushes_in_order"] = [[round(t - first, 2), took] for t, took in brushes_in_order]
    return result


async def protocol_brush(session, board: str, view: str, bounds) -> float:
    """A brush (or a clear, ``bounds=None``) over the protocol; seconds to the last patch."""
    before = session.version
    sent = time.perf_counter()
    if board == "cuxfilter":
        if bounds is None:
            await session.send_event(session.reset(view))
        else:
            y = tuple(bounds[2:]) if len(bounds) == 4 else (0.0, 1.0)
            await session.send_event(session.selection_geometry(view, tuple(bounds[:2]), y))
    else:
        brush = session.brush_model(view)
        async with session.change():
            brush.bounds = bounds
    # cuxfilter's charts may answer in several patches: wait longer before calling the answer complete.
    quiet = 0.3 if board == "cuxfilter" else 0.1
    waited = await session.wait_for(lambda: session.version != before, sent, 30, quiet=quiet)
    return waited.last_at - sent


async def protocol_zoom(session, lo: float, hi: float) -> float:
    """The recording's window moved to [lo, hi] over the protocol; seconds to the last patch."""
    x_range = session.by_name("ecg-signal").x_range
    raster = session.by_name("ecg-raster")
    # the raw samples: one line per lead (their times are the same)
    lines = next(r for r in session.by_name("ecg-signal").renderers if type(r.glyph).__name__ == "MultiLine")
    tol = 1e-6 * (hi - lo)

    def shown() -> bool:
        # a raster not drawn yet (Datashader still compiling) has no columns at all
        x, dw = raster.data.get("x", ()), raster.data.get("dw", ())
        if len(x) and abs(x[0] - lo) <= tol and abs(x[0] + dw[0] - hi) <= tol:
            return True
        ts = lines.data_source.data.get("t", ())
        t = ts[0] if len(ts) else []
        return len(t) > 0 and t[0] <= lo + tol and t[-1] >= hi - tol

    sent = time.perf_counter()
    async with session.change():
        x_range.update(start=lo, end=hi)
    waited = await session.wait_for(shown, sent, 30, quiet=0.1)
    return waited.last_at - sent


class BeatsOnly:
    """What :func:`benchmarks.inprocess.brush_bounds` and the zoom plan read: the beats and the length."""

    def __init__(self, beats, duration_s: float):
        self.beats, self.duration_s = beats, duration_s


# --------------------------------------------------------------------------- load and soak
def load_test(url: str, beats, n_sessions: int, brushes: int, seed: int, timeout_s: float,
              in_turn: bool = False) -> dict:
    """``n_sessions`` protocol sessions brushing at once, driven from worker processes of
    ``SESSIONS_PER_CLIENT`` sessions each: one Python process reading and applying every session's
    patches (~160 KB each) was itself the slowest part of a 20-session test, and counted its own
    queue as the server's latency (see ``SESSIONS_PER_CLIENT``). Once every session is open, each
    brushes one chart: first all of them at the same instant (the burst, reported on its own as
    ``burst_ms``: one server works through them in turn), then ``brushes`` times each after a
    user's pause (``brush_ms``, the load figure). Its count is checked against what its own
    brushes select. ``in_turn``: the same sessions and brushes, but one session brushes at a time
    (all of its brushes, then the next session's), the load test's reference without the load."""
    import concurrent.futures
    import multiprocessing

    groups = [list(g) for g in np.array_split(np.arange(n_sessions), -(-n_sessions // SESSIONS_PER_CLIENT))]
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, \
            concurrent.futures.ProcessPoolExecutor(len(groups), mp_context=context) as pool:
        opened = manager.Barrier(len(groups))     # every session open before any brushes
        turn = manager.Lock() if in_turn else None     # held by the session brushing now
        jobs = [(url, beats, group, brushes, seed, timeout_s, opened, turn) for group in groups]
        parts = list(pool.map(_load_client, jobs))
    merged = {key: [x for part in parts for x in part[key]] for key in ("failed", "errors", "mismatches")}
    brushes_timed = [(client, *b) for client, part in enumerate(parts) for b in part["brushes"]]
    paced = [b for b in brushes_timed if b[2] > 0]
    opened = sum(part["opened"] for part in parts)
    return {"sessions": n_sessions, "opened": opened, "clients": len(groups), "brush_ms": ms([b[4] for b in paced]),
            "burst_ms": ms([b[4] for b in brushes_timed if b[2] == 0]),
            "failed": merged["failed"], "errors": merged["errors"], "independent": opened - len(merged["mismatches"]),
            "mismatches": merged["mismatches"], "stalls": stalls([(c, k, t0, s) for c, k, _, t0, s in paced]),
            "brushes": [[c, k, i, round(t0, 4), round(s * 1e3, 1)] for c, k, i, t0, s in brushes_timed]}


def stalls(brushes: list, factor: float = 4.0) -> dict:
    """Whose slow brushes (over ``factor`` × the median) they were: if the server paused, the
    brushes of other client processes in flight at that time were slow too; if one client process
    paused (its own interpreter applying patches), theirs were not. ``brushes``: (client, session,
    start wall-clock s, seconds)."""
    if not brushes:
        return {}
    limit = factor * float(np.median([b[3] for b in brushes]))
    slow = [b for b in brushes if b[3] > limit]
    others_slow = others_fast = 0
    for client, _, t0, took in slow:
        for c, _, u0, u in brushes:
            if c != client and u0 < t0 + took and t0 < u0 + u:     # in flight at the same time
                others_slow += u > limit
                others_fast += u <= limit
    return {"limit_ms": round(limit * 1e3, 1), "slow": len(slow), "clients_of_slow": sorted({b[0] for b in slow}),
            "overlapping_other_clients_slow": others_slow, "overlapping_other_clients_fast": others_fast}


def _load_client(job) -> dict:
    """One worker process of :func:`load_test`: its sessions ``ks`` (global numbers: each picks its
    chart and random brushes from its number)."""
    url, beats, ks, brushes, seed, timeout_s, opened, turn = job
    return asyncio.run(_load_sessions(url, beats, [int(k) for k in ks], brushes, seed, timeout_s, opened, turn))


async def _load_sessions(url: str, beats, ks: list, brushes: int, seed: int, timeout_s: float, opened_all,
                         turn=None) -> dict:
    from benchmarks import inprocess, interaction
    from tests.support.bokeh_session import ProtocolSession, SessionError

    sessions = {k: ProtocolSession(url) for k in ks}
    opened = await asyncio.gather(*(s.open(timeout_s) for s in sessions.values()), return_exceptions=True)
    failures = [f"open: {type(o).__name__}: {o}" for o in opened if isinstance(o, BaseException)]
    live = [(k, s) for (k, s), o in zip(sessions.items(), opened) if not isinstance(o, BaseException)]
    timed, mine = [], {k: {} for k in ks}
    # The brushes start together once every client's sessions are open: brushes sent while other
    # clients' sessions are still being built would wait for those builds and time session opens.
    await asyncio.get_running_loop().run_in_executor(None, opened_all.wait, timeout_s)
    for _, session in live:
        session.defer_patches()

    async def brushing(k, session):
        rng = np.random.default_rng([seed, k])
        view = LINKED[k % len(LINKED)]             # one chart per session: its count stays informative
        for i in range(brushes + 1):               # 0: the burst, every session at once
            bounds = inprocess.brush_bounds(beats, view, rng)
            try:
                started = time.time()
                timed.append((k, i, started, await protocol_brush(session, "bokeh", view, bounds)))
                mine[k][view] = bounds
            except SessionError as err:
                failures.append(f"session {k}: {err}")
            await asyncio.sleep(float(rng.uniform(0.2, 0.8)))   # a user looks before brushing again

    async def in_turn(k, session):               # every client's sessions, one after another
        got = await asyncio.get_running_loop().run_in_executor(None, turn.acquire, True, timeout_s)
        try:
            if got:
                await brushing(k, session)
        finally:
            if got:
                turn.release()

    try:
        work = in_turn if turn is not None else brushing
        await asyncio.wait_for(asyncio.gather(*(work(k, s) for k, s in live)), timeout_s)
    except asyncio.TimeoutError:
        failures.append(f"stopped at the {timeout_s:.0f} s bound")
    await asyncio.sleep(1.0)
    for _, session in live:
        session.apply_deferred()
    mismatches = []
    for k, session in live:
        shown, want = interaction.shown_count(session), interaction.expected_count(beats, mine[k])
        if shown != want:
            mismatches.append(f"session {k}: shows {shown}, its own brushes select {want}")
    errors = [f"session {k}: {e}" for k, s in sessions.items() for e in s.errors]
    for s in sessions.values():
        await s.close()
    return {"opened": len(live), "brushes": timed, "failed": failures, "errors": errors, "mismatches": mismatches}


async def soak_test(server, beats, cycles: int, seed: int, seconds: float) -> dict:
    """Open, brush once and close up to ``cycles`` sessions, within ``seconds`` (the cycles done
    are reported when time runs out); the server's RSS after every 10."""
    from benchmarks import inprocess
    from tests.support.bokeh_session import ProtocolSession

    rng = np.random.default_rng(seed)
    shared_like = BeatsOnly(beats, 0.0)
    settle = 2 * SESSION_LIFETIME_MS / 1000 + 1.0
    rss, failures = [{"sessions": 0, "rss_bytes": server.rss_bytes()}], []
    deadline = time.perf_counter() + seconds
    for i in range(1, cycles + 1):
        if i % 10 == 1 and time.perf_counter() > deadline:
            break
        session = ProtocolSession(server.url)
        try:
            await session.open(120)
            view = LINKED[i % len(LINKED)]
            await protocol_brush(session, "bokeh", view, inprocess.brush_bounds(shared_like.beats, view, rng))
        except Exception as err:   # noqa: BLE001
            failures.append(f"cycle {i}: {type(err).__name__}: {err}")
        finally:
            await session.close()
        if i % 10 == 0:
            await asyncio.sleep(settle)
            rss.append({"sessions": i, "rss_bytes": server.rss_bytes()})
    after_10 = next((r["rss_bytes"] for r in rss if r["sessions"] == 10), None)
    return {"cycles": rss[-1]["sessions"], "asked": cycles, "rss": rss, "failures": failures, "server_options": SERVE_ARGS,
            "growth_after_first_10": (rss[-1]["rss_bytes"] - after_10) / after_10 if after_10 else None}


# --------------------------------------------------------------------------- cuxfilter == default
def compare_boards(shared, n: int = 6, seed: int = 0) -> dict:
    """Brush the cuxfilter board (its charts' selection stream) and the default board (the Brush
    models) the same way, in two sessions on one run, and compare what they show: the selected
    count, cuxfilter's own filtered frame against the default board's count, and the default board's
    histogram bars against a histogram of cuxfilter's filtered beats."""
    from benchmarks import inprocess
    from dashboard.spec import VIEWS

    rng = np.random.default_rng(seed)
    shared.extras["board"] = "cuxfilter"
    cux = inprocess.InProcessSession(shared)
    shared.extras["board"] = "bokeh"
    ref = inprocess.InProcessSession(shared)
    checks = []
    try:
        for i in range(n):
            view = LINKED[i % len(LINKED)]
            cux.brush(view, inprocess.brush_bounds(shared.beats, view, rng))
            brush = dict(cux.store.brush)                       # what the cuxfilter charts selected
            for name in LINKED:
                bounds = [v for c in VIEWS[name].brush for v in brush.get(c, ())] or None
                ref.brush(name, bounds)
            expect(ref.store.brush == brush, f"default board brush {ref.store.brush} != cuxfilter's {brush}")
            count, filtered = ref.store.selection.count, cux.board.filtered_count()
            expect(cux.store.selection.count == count, f"{view}: counts {cux.store.selection.count} vs {count}")
            expect(filtered == count, f"{view}: cuxfilter's charts show {filtered} beats, the default board {count}")
            frame = cux.board.dashboard._query(cux.board.dashboard._generate_query_str()).to_pandas()
            for name in (n for n in ("lengths", "scores") if n != view):
                chart = ref.board.charts[name]
                edges = chart.bins.edges[0]
                column = VIEWS[name].x
                values = np.clip(frame[column].to_numpy(dtype=np.float64), edges[0], edges[-1])
                want = np.histogram(values, bins=edges)[0]
                got = np.nan_to_num(chart.source.data["selected"]).astype(np.int64)
                if len(brush) == 1:   # one brush: the other charts show exactly the filtered beats
                    expect(np.array_equal(got, want), f"{view} brush: the {name} bars differ from cuxfilter's beats")
            checks.append({"brush": {c: list(b) for c, b in brush.items()}, "count": count})
    finally:
        cux.close()
        ref.close()
    return {"checks": checks}


# --------------------------------------------------------------------------- main
def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu_dashboard", description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, help="synthetic recording length (default: the GPU default, 20M)")
    p.add_argument("--epochs", type=int, help="VAE epochs (default: the pipeline's)")
    p.add_argument("--runs", default="runs-gpu", help="run cache folder, shared by the servers and this process")
    p.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for the JSON (default $OUT or .)")
    p.add_argument("--boards", default="bokeh,cuxfilter", help="boards to measure (default bokeh,cuxfilter)")
    p.add_argument("--brushes", type=int, default=50, help="brushes per linked chart (default 50)")
    p.add_argument("--gestures", type=int, default=24, help="zoom/pan changes of the recording (default 24)")
    p.add_argument("--opens", type=int, default=5, help="timed session opens (default 5)")
    p.add_argument("--server-n", type=int, default=50, help="server-side repeats per kind (default 50)")
    p.add_argument("--sessions", type=int, default=20, help="load test sessions, default board (0: off)")
    p.add_argument("--load-brushes", type=int, default=10)
    p.add_argument("--soak", type=int, default=200, help="soak cycles, default board (0: off)")
    p.add_argument("--scale", action="store_true", help="200M samples: server-side brushes only")
    p.add_argument("--scale-samples", type=int, default=200_000_000)
    p.add_argument("--scale-epochs", type=int, default=3)
    p.add_argument("--budget-s", type=float, default=540, help="the whole run's time (default 540 s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="gpu", help=argparse.SUPPRESS)     # cpu: a dry run of the plumbing
    args = p.parse_args(argv)
    args.boards = [b.strip() for b in args.boards.split(",") if b.strip()]
    bad = set(args.boards) - {"bokeh", "cuxfilter"}
    if bad:
        p.error(f"--boards: unknown {', '.join(sorted(bad))} (known: bokeh, cuxfilter)")
    return args


def environment(args, budget) -> None:
    @step("environment", budget, 120)
    def env():
        import bokeh
        import panel

        from benchmarks.interaction import machine as describe

        info = {"python": sys.version.split()[0], "panel": panel.__version__, "bokeh": bokeh.__version__}
        info["machine"] = {k: v for k, v in describe().items() if k != "versions"} if args.device == "cpu" else None
        if args.device == "gpu":
            import cudf
            import cupy

            from benchmarks.measure import describe_machine, machine_name
            from pipeline.backend import has_gpu

            machine = describe_machine(gpu=True)
            machine["name"] = machine_name(machine)
            info.update(cudf=cudf.__version__, cupy=cupy.__version__, gpu=machine.get("gpu"), has_gpu=has_gpu(),
                        machine=machine)
            expect(info["has_gpu"], "pipeline.backend.has_gpu() is False")
            if "cuxfilter" in args.boards:
                import cuxfilter

                from dashboard.cuxfilter_board import _node_major, use_node

                node = use_node()
                info.update(cuxfilter=cuxfilter.__version__, node=node, node_major=_node_major(node) if node else 0)
                expect(info["node_major"] >= 18, f"Node.js >= 18 needed for cuxfilter's Bokeh model; got {node!r}")
        RESULTS["environment"] = info
        return f"{info.get('gpu') or 'no GPU (dry run)'} · panel {info['panel']} · bokeh {info['bokeh']}"


def app_args(args, board: str, samples=None, epochs=None, input_path=None) -> list[str]:
    out = ["--device", args.device, "--board", board, "--out", args.runs]
    if samples or args.samples:
        out += ["--samples", str(samples or args.samples)]
    if epochs or args.epochs:
        out += ["--epochs", str(epochs or args.epochs)]
    if input_path:
        out += ["--input", str(input_path)]
    return out


def served_board(args, budget, board: str, log_dir: Path, keep: bool = False):
    """Start a server for ``board``: protocol interactions, and on the default board the load test.
    Returns the running server when ``keep`` (for the soak at the end), else stops it."""
    from benchmarks.interaction import run_path_from_log
    from tests.support.served import Server

    section = RESULTS.setdefault("boards", {}).setdefault(board, {})
    state = {}

    @step(f"{board}: server start → ready", budget, 900, needs=60)
    def start():
        server = Server(app_args(args, board), log_dir / f"server-{board}.log", serve_args=SERVE_ARGS)
        state["server"] = server
        ready = server.wait_ready(budget.left() - 20)
        log = server.log()
        run_path = run_path_from_log(log)
        beats = run_beats(run_path)
        report = json.loads((run_path / "report.json").read_text())
        state["shared_like"] = BeatsOnly(beats, report["input"]["duration_s"])
        section["server_ready_s"] = round(ready, 2)
        section["run"] = {"path": str(run_path), "beats": len(beats), "n_samples": report["input"]["n_samples"],
                          "cached": "cached run" in log}
        return f"ready after {ready:.1f} s, {len(beats):,} beats ({'cached run' if 'cached run' in log else 'pipeline ran'})"

    server = state.get("server")
    try:
        if "shared_like" not in state:
            return None

        @step(f"{board}: protocol sessions: open, {args.brushes} brushes per chart, {args.gestures} zoom/pan", budget,
              300, needs=40)
        def interactions():
            result = asyncio.run(protocol_interactions(server.url, board, state["shared_like"], args))
            section["protocol"] = result
            expect(not result["errors"], f"session errors: {result['errors'][:3]}")
            b, z, o = result["all brushes"], result["all zoom/pan"], result["session open"]
            return (f"brush median {b['median']:.0f} / p95 {b['p95']:.0f} ms · zoom/pan p95 {z['p95']:.0f} ms · "
                    f"open median {o['median']:.0f} ms")

        if board == "bokeh" and args.sessions:
            @step(f"{board}: load test, {args.sessions} sessions × {args.load_brushes} brushes", budget, 360, needs=60)
            def load():
                beats = state["shared_like"].beats
                # Each part starts once the sessions closed before it are discarded: their discard
                # pauses the server (a full garbage collection), a session's end rather than a brush's cost.
                wait_s = server.discard_s()
                time.sleep(wait_s)
                single = load_test(server.url, beats, 1, args.load_brushes, args.seed + 1, 120)
                time.sleep(wait_s)
                # The load's own reference: its sessions and brushes (the same seed), one session
                # brushing at a time. One session's ten brushes of one chart are fewer (their p95
                # is nearly their maximum) and of one chart where the load brushes four.
                in_turn = load_test(server.url, beats, args.sessions, args.load_brushes, args.seed + 2, 300,
                                    in_turn=True)
                time.sleep(wait_s)
                many = load_test(server.url, beats, args.sessions, args.load_brushes, args.seed + 2, 180)
                ratio = stats.p95_ratio(many["brush_ms"], single["brush_ms"])
                ratio_in_turn = stats.p95_ratio(many["brush_ms"], in_turn["brush_ms"])
                section["load"] = {"single": single, "in_turn": in_turn, "concurrent": many, "p95_ratio": ratio,
                                   "p95_ratio_in_turn": ratio_in_turn, "waited_for_discards_s": 3 * wait_s}
                expect(not many["failed"] and not many["errors"], f"failures: {(many['failed'] + many['errors'])[:3]}")
                expect(not many["mismatches"], f"selections mixed up: {many['mismatches'][:3]}")
                return (f"p95 {many['brush_ms']['p95']:.0f} ms vs {single['brush_ms']['p95']:.0f} ms alone "
                        f"({ratio:.2f}×), {in_turn['brush_ms']['p95']:.0f} ms for the same brushes in turn "
                        f"({ratio_in_turn:.2f}×); all {args.sessions} at the same instant: the last answered after "
                        f"{many['burst_ms']['max']:.0f} ms; slow brushes: {many['stalls']}")

    finally:
        if server is not None and not (keep and "shared_like" in state):
            section["server_log_tail"] = server.log()[-3000:]
            server.stop()
    if server is not None and keep and "shared_like" in state:
        server.beats = state["shared_like"].beats
        return server
    return None


def soak_step(args, budget, server) -> None:
    """The soak on the default board's server (started first and kept), as long as the budget allows."""
    section = RESULTS["boards"]["bokeh"]
    try:
        @step(f"bokeh: soak, up to {args.soak} sessions opened, brushed and closed", budget, 400, needs=60)
        def soak():
            result = asyncio.run(soak_test(server, server.beats, args.soak, args.seed + 3, budget.left() - 20))
            section["soak"] = result
            growth = result["growth_after_first_10"]
            expect(not result["failures"], f"failed cycles: {result['failures'][:3]}")
            expect(growth is not None, f"only {result['cycles']} cycles fitted in the budget")
            return (f"{result['cycles']} cycles: RSS {result['rss'][1]['rss_bytes'] / 2**20:.0f} → "
                    f"{result['rss'][-1]['rss_bytes'] / 2**20:.0f} MiB ({growth:+.1%} after the first 10)")
    finally:
        section["server_log_tail"] = server.log()[-3000:]
        server.stop()


def in_process(args, budget) -> None:
    """Server-side times of both boards on the run the servers used, and cuxfilter == default."""
    from benchmarks import inprocess

    state = {}

    @step("in-process: load the run and prepare the boards", budget, 300, needs=30)
    def load():
        run, shared = inprocess.load_shared(app_args(args, args.boards[0]))
        if "cuxfilter" in args.boards:
            from dashboard import cuxfilter_board

            cuxfilter_board.prepare(shared)
        state["shared"] = shared
        return f"{len(run.beats):,} beats"

    shared = state.get("shared")
    if shared is None:
        return
    for board in args.boards:
        @step(f"{board}: server-side, {args.server_n} per kind", budget, 240, needs=30)
        def server_side():
            shared.extras["board"] = board
            result = inprocess.measure(shared, args.server_n, max(args.server_n // 2, 10), n_sessions=3, seed=args.seed)
            expect(result["board"] == board, f"measured the {result['board']} board")
            kinds = server_kinds(result)
            RESULTS.setdefault("boards", {}).setdefault(board, {})["server_side"] = {"kinds": kinds,
                                                                                     "details": result["details"]}
            brushes = kinds["all brushes"]
            return f"brush median {brushes['median']:.1f} / p95 {brushes['p95']:.1f} ms"

    if "cuxfilter" in args.boards:
        @step("cuxfilter board shows the same counts as the default board", budget, 180, needs=20)
        def same():
            result = compare_boards(shared, seed=args.seed)
            RESULTS["cuxfilter_equals_default"] = result
            return f"{len(result['checks'])} brushes, counts and bars equal"


def server_kinds(result: dict) -> dict:
    """Statistics per interaction kind of an in-process measurement, and of all brushes together."""
    seconds = result["seconds"]
    kinds = {k: ms(v) for k, v in seconds.items()}
    kinds["all brushes"] = ms([x for k, v in seconds.items() if k.startswith("brush") for x in v])
    return kinds


def scale(args, budget) -> None:
    from benchmarks import inprocess, recordings

    state = {}

    @step(f"scale: {args.scale_samples:,}-sample recording (tiled CSV)", budget, 300, needs=30)
    def recording():
        made = recordings.recording_csv(args.scale_samples, Path(args.runs) / "inputs")
        state["path"] = made.path
        return f"{made.path.name}: {made.nbytes / 1e9:.2f} GB, {made.method}"

    if "path" not in state:
        return

    @step(f"scale: pipeline ({args.scale_epochs} epochs) and the default board's shared data", budget, 400, needs=60)
    def load():
        started = time.perf_counter()
        run, shared = inprocess.load_shared(app_args(args, "bokeh", epochs=args.scale_epochs, input_path=state["path"]))
        state["shared"] = shared
        RESULTS["scale"] = {"beats": len(run.beats), "n_samples": run.report["input"]["n_samples"],
                            "stages_s": run.report.get("stages_s"), "load_s": round(time.perf_counter() - started, 1)}
        return f"{len(run.beats):,} beats from {run.report['input']['n_samples']:,} samples"

    shared = state.get("shared")
    if shared is None:
        return
    for board in args.boards:
        @step(f"scale: {board} board, server-side brushes", budget, 240, needs=30)
        def brushes():
            if board == "cuxfilter":
                from dashboard import cuxfilter_board

                cuxfilter_board.prepare(shared)
            shared.extras["board"] = board
            result = inprocess.measure(shared, args.server_n, 10, n_sessions=2, seed=args.seed)
            kinds = server_kinds(result)
            RESULTS["scale"].setdefault("boards", {})[board] = {"kinds": kinds, "details": result["details"]}
            b = kinds["all brushes"]
            return f"brush median {b['median']:.1f} / p95 {b['p95']:.1f} ms (target p95 ≤ 100 ms)"


def summary_table() -> str:
    lines = [f"{'board':<10}{'interaction':<34}{'n':>5}{'median':>10}{'p95':>10}{'max':>10}"]

    def add(board, label, s):
        if s and s.get("n"):
            lines.append(f"{board:<10}{label:<34}{s['n']:>5}{s['median']:>8.1f}ms{s['p95']:>8.1f}ms{s['max']:>8.1f}ms")

    for board, section in RESULTS.get("boards", {}).items():
        proto = section.get("protocol", {})
        for kind in ("session open", "all brushes", "clear", "all zoom/pan"):
            add(board, f"protocol {kind}", proto.get(kind))
        server = section.get("server_side", {}).get("kinds", {})
        for kind in ("session open", "all brushes", "clear", "zoom in", "pan", "zoom out"):
            add(board, f"server {kind}", server.get(kind))
        load = section.get("load")
        if load:
            add(board, "load 1 session brush", load["single"]["brush_ms"])
            if "in_turn" in load:
                add(board, f"load {load['in_turn']['sessions']} sessions in turn", load["in_turn"]["brush_ms"])
            add(board, f"load {load['concurrent']['sessions']} sessions brush", load["concurrent"]["brush_ms"])
            if "burst_ms" in load["concurrent"]:
                add(board, f"load {load['concurrent']['sessions']} brushes at once", load["concurrent"]["burst_ms"])
        soak = section.get("soak")
        if soak and soak.get("growth_after_first_10") is not None:
            lines.append(f"{board:<10}soak {soak['cycles']} sessions: RSS growth after the first 10 "
                         f"{soak['growth_after_first_10']:+.1%}")
    for board, section in RESULTS.get("scale", {}).get("boards", {}).items():
        add(board, f"scale {RESULTS['scale']['beats']:,} beats: server brush", section["kinds"]["all brushes"])
    lines.append("")
    for board, name, value, limit, unit in target_rows():
        status = "–" if value is None else "met" if value <= limit else f"missed by {value / limit - 1:.0%}"
        shown = "not measured" if value is None else f"{value:.1f}{unit}" if unit != "%" else f"{value:+.1%}"
        lines.append(f"{board:<10}{name:<44}{shown:>14}  (≤ {limit if unit != '%' else f'{limit:.0%}'}{unit if unit != '%' else ''})  {status}")
    return "\n".join(lines)


def target_rows() -> list[tuple]:
    """(board, target, measured, limit, unit) for the issue's H200 targets."""
    rows = []
    for board, section in RESULTS.get("boards", {}).items():
        proto, server = section.get("protocol", {}), section.get("server_side", {}).get("kinds", {})
        rows += [(board, "brush, end to end p95", proto.get("all brushes", {}).get("p95"), 50.0, " ms"),
                 (board, "brush, server-side p95", server.get("all brushes", {}).get("p95"), 20.0, " ms"),
                 (board, "zoom/pan → new raster p95", proto.get("all zoom/pan", {}).get("p95"), 150.0, " ms"),
                 (board, "session open (protocol) median", proto.get("session open", {}).get("median"), 3000.0, " ms")]
        if section.get("load"):
            rows.append((board, "20 sessions: p95 / single p95", section["load"].get("p95_ratio"), 2.0, "×"))
            if "p95_ratio_in_turn" in section["load"]:
                rows.append((board, "20 sessions: p95 / same brushes in turn", section["load"]["p95_ratio_in_turn"],
                             2.0, "×"))
        if section.get("soak"):
            rows.append((board, "soak: RSS growth after the first 10", section["soak"].get("growth_after_first_10"),
                         0.05, "%"))
    for board, section in RESULTS.get("scale", {}).get("boards", {}).items():
        rows.append((board, "scale: brush server-side p95", section["kinds"]["all brushes"].get("p95"), 100.0, " ms"))
    return [(b, n, (None if v is None or v != v else v), limit, unit) for b, n, v, limit, unit in rows]


def main(argv=None) -> int:
    os.chdir(ROOT)                   # the servers and the run cache paths are relative to the repository
    args = parse_args(argv)
    budget = Budget(args.budget_s)
    RESULTS["args"] = vars(args)
    Path(args.runs).mkdir(parents=True, exist_ok=True)
    RESULTS_FILE[:] = [Path(args.out) / ("gpu_dashboard_scale.json" if args.scale else "gpu_dashboard.json")]
    log_dir = Path(tempfile.mkdtemp(prefix="ecg-gpu-dashboard-"))
    environment(args, budget)
    if args.scale:
        scale(args, budget)
    else:
        # Order of priority within the budget: the default board, then cuxfilter, then the in-process
        # numbers and the equality check, then the soak on the default board's server (kept running).
        kept = None
        for board in args.boards:
            server = served_board(args, budget, board, log_dir, keep=board == "bokeh" and args.soak > 0)
            kept = kept or server
        try:
            in_process(args, budget)
        finally:
            if kept is not None:
                soak_step(args, budget, kept)
    save()
    print(f"wrote {RESULTS_FILE[0]}")
    print("\n" + summary_table())
    print("==== " + ("ALL PASS" if not FAILED else f"{len(FAILED)} FAIL: " + "; ".join(FAILED)), flush=True)
    return 0 if not FAILED else 1


if __name__ == "__main__":
    sys.exit(main())
