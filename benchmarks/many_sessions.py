"""The dashboard under load, over Bokeh's protocol against a served dashboard: the load test and the
soak test of ``benchmarks.interaction`` (``--sessions``, ``--soak``).

:func:`load_part`: one session's brushes, then ``--sessions`` sessions' brushes one session at a time
and all at once (the p95 against one session's and against the same brushes in turn), each session's
count checked against its own brushes. :func:`soak`: sessions opened, brushed and closed on a server
of its own, its memory every 10 sessions (the growth after the first 10). Targets and figures:
docs/benchmarking.md.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
import time

import numpy as np

from benchmarks import sessions
from benchmarks.measure import p95_ratio, summary
from benchmarks.sessions import LINKED
from tests.support.bokeh_session import ProtocolSession, SessionError
from tests.support.served import Server

# Servers that only protocol sessions use discard closed ones within a second (Bokeh keeps them 15 s);
# not browser pages' servers: a page's session is unused until its websocket connects, seconds later.
LIFETIME_MS = 500
SHORT_LIFETIME = ["--check-unused-sessions", str(LIFETIME_MS), "--unused-session-lifetime", str(LIFETIME_MS)]
# Protocol sessions per load-test process: the fewer it holds, the less its own patch work delays its readings.
SESSIONS_PER_CLIENT = 2
SEED = 0   # the interaction benchmark's random plans (interaction.py uses it too)


# --------------------------------------------------------------------------- load test
def load_part(args, server: Server, beats) -> dict:
    """One session, the sessions' brushes one session at a time, then all at once; each round after the
    sessions closed before it are discarded (a discard's full collection is not a brush's cost)."""
    wait_s = 0.0 if args.quick else server.discard_s()
    rounds = {}
    for name, n, seed, in_turn in (("single", 1, 1, False), ("in_turn", args.sessions, 2, True),
                                   ("concurrent", args.sessions, 2, False)):
        time.sleep(wait_s)
        print(f"load test: {n} session(s){' in turn' if in_turn else ''}, {args.load_brushes} brushes each", flush=True)
        rounds[name] = load_protocol(args, server.url, beats, n, SEED + seed, in_turn)
    many = rounds["concurrent"]
    return {**rounds, "waited_for_discards_s": 3 * wait_s,
            "p95_ratio": p95_ratio(many["brush_ms"], rounds["single"]["brush_ms"]),
            "p95_ratio_in_turn": p95_ratio(many["brush_ms"], rounds["in_turn"]["brush_ms"]),
            "problems": many["failed_interactions"] + many["console_errors"] + many["selection_mismatches"]}


def load_protocol(args, url: str, beats, n_sessions: int, seed: int, in_turn: bool = False) -> dict:
    """``n_sessions`` protocol sessions brushing at once from processes of ``SESSIONS_PER_CLIENT``
    (``in_turn``: one session's brushes after another's, the reference without the load)."""
    groups = [list(g) for g in np.array_split(np.arange(n_sessions), -(-n_sessions // SESSIONS_PER_CLIENT))]
    context, started = multiprocessing.get_context("spawn"), time.perf_counter()
    with context.Manager() as manager, \
            concurrent.futures.ProcessPoolExecutor(len(groups), mp_context=context) as pool:
        opened = manager.Barrier(len(groups))          # every session open before any brushes
        turn = manager.Lock() if in_turn else None     # held by the session brushing now
        parts = list(pool.map(_load_client, [(url, beats, g, args.load_brushes, seed, args.load_timeout, opened, turn)
                                             for g in groups]))
    merged = {key: [x for part in parts for x in part[key]] for key in ("failed", "errors", "mismatches")}
    timed = [b for part in parts for b in part["brushes"]]
    opened = sum(p["opened"] for p in parts)
    return {"client": "bokeh protocol", "sessions": n_sessions, "opened": opened, "clients": len(groups),
            "seconds": round(time.perf_counter() - started, 2),
            "brush_ms": summary([ms for i, ms in timed if i > 0]),
            "burst_ms": summary([ms for i, ms in timed if i == 0]),
            "failed_interactions": merged["failed"], "console_errors": merged["errors"],
            "selection_mismatches": merged["mismatches"], "independent_sessions": opened - len(merged["mismatches"])}


def _load_client(job) -> dict:
    """One process of :func:`load_protocol`, sessions ``ks``; their patches are applied only at the end
    (applying one costs this process milliseconds that a user's own browser would spend)."""
    url, beats, ks, brushes, seed, timeout_s, opened_all, turn = job

    async def run() -> dict:
        clients = {int(k): ProtocolSession(url) for k in ks}
        opened = await asyncio.gather(*(s.open(timeout_s) for s in clients.values()), return_exceptions=True)
        failures = [f"open: {type(o).__name__}: {o}" for o in opened if isinstance(o, BaseException)]
        live = [(k, s) for (k, s), o in zip(clients.items(), opened) if not isinstance(o, BaseException)]
        timed, mine, loop = [], {k: {} for k in clients}, asyncio.get_running_loop()
        # Brushes start once every session is open: they would otherwise wait for other sessions' builds.
        await loop.run_in_executor(None, opened_all.wait, timeout_s)
        for _, session in live:
            session.defer_patches()

        async def brushing(k, session):
            rng, view = np.random.default_rng([seed, k]), LINKED[k % len(LINKED)]   # one chart a session
            got = turn is None or await loop.run_in_executor(None, turn.acquire, True, timeout_s)
            try:
                for i in range(brushes + 1 if got else 0):    # 0: the burst, every session at once
                    bounds = sessions.brush_bounds(beats, view, rng)
                    try:
                        timed.append((i, 1e3 * await sessions.protocol_brush(session, view, bounds)))
                        mine[k][view] = bounds
                    except SessionError as err:
                        failures.append(f"session {k}: {err}")
                    await asyncio.sleep(float(rng.uniform(0.2, 0.8)))   # a user looks before brushing again
            finally:
                if turn is not None and got:
                    turn.release()

        try:
            await asyncio.wait_for(asyncio.gather(*(brushing(k, s) for k, s in live)), timeout_s)
        except asyncio.TimeoutError:
            failures.append(f"stopped at the {timeout_s:.0f} s bound")
        await asyncio.sleep(1.0)
        mismatches = []
        for k, session in live:
            session.apply_deferred()
            shown, want = sessions.shown_count(session), sessions.expected_count(beats, mine[k])
            if shown != want:
                mismatches.append(f"session {k}: shows {shown} beats, its own brushes select {want}")
        errors = [f"session {k}: {e}" for k, s in clients.items() for e in s.errors]
        for s in clients.values():
            await s.close()
        return {"opened": len(live), "brushes": timed, "failed": failures, "errors": errors, "mismatches": mismatches}

    return asyncio.run(run())


# --------------------------------------------------------------------------- soak test
def soak(args, bench, beats) -> dict:
    """Up to ``--soak`` sessions opened, brushed and closed on a server of its own; its RSS every 10.
    ``bench``: the interaction benchmark's ``Bench`` (its servers and budget)."""
    server, _ = bench.start("soak server", SHORT_LIFETIME)
    rng, settle, failures = np.random.default_rng(SEED + 3), 2 * LIFETIME_MS / 1000 + 1.0, []
    rss, started = [{"sessions": 0, "rss_bytes": server.rss_bytes()}], time.perf_counter()

    async def cycles() -> None:
        for i in range(1, args.soak + 1):
            if i % 10 == 1 and bench.budget.left() < 30:
                break
            check_alive(server, f"the soak, cycle {i}")
            session = ProtocolSession(server.url)
            try:
                await session.open(120)
                view = LINKED[i % len(LINKED)]
                await sessions.protocol_brush(session, view, sessions.brush_bounds(beats, view, rng))
            except Exception as err:   # noqa: BLE001 - a failed cycle is a result of the soak
                failures.append(f"cycle {i}: {type(err).__name__}: {err}")
            finally:
                await session.close()
            if i % 10 == 0:
                await asyncio.sleep(settle)
                check_alive(server, f"the soak, after cycle {i}")
                rss.append({"sessions": i, "rss_bytes": server.rss_bytes(),
                            "elapsed_s": round(time.perf_counter() - started, 1)})
                print(f"  {i:>4} sessions: server RSS {rss[-1]['rss_bytes'] / 2**20:.0f} MiB", flush=True)

    try:
        asyncio.run(cycles())
    finally:
        server.stop()
    after_10 = next((r["rss_bytes"] for r in rss if r["sessions"] == 10), None)
    growth = (rss[-1]["rss_bytes"] - after_10) / after_10 if after_10 else None
    return {"cycles": rss[-1]["sessions"], "asked": args.soak, "rss": rss, "failures": failures, "settle_s": settle,
            "server_options": SHORT_LIFETIME, "growth_after_first_10": growth,
            "problems": failures + ([] if growth is not None else ["fewer than 10 cycles fitted in the budget"])}


def check_alive(server: Server, during: str) -> None:
    """Fail loudly when the server stopped under the benchmark (a crash, or a signal from outside)."""
    if server.proc.poll() is not None:
        raise RuntimeError(f"the server stopped during {during} (exit status {server.proc.returncode}); see its "
                           "log:\n" + server.log()[-1500:])
