"""Markdown and a terminal table of :mod:`benchmarks.interaction`'s results (and of
:mod:`benchmarks.gpu_dashboard`'s, which share the shape of the per-kind summaries)."""
from __future__ import annotations

import math


def _ms(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value / 1000:.2f} s" if value >= 10_000 else f"{value:.0f} ms" if value >= 100 else f"{value:.1f} ms"


def _row(label: str, s: dict) -> str:
    return f"| {label} | {s['n']} | {_ms(s['median'])} | {_ms(s['p95'])} | {_ms(s['max'])} |"


def _measured(row: dict) -> str:
    value = row.get("measured")
    if value is None:
        return "–"
    unit = row.get("unit")
    if unit == "ms":
        return _ms(value)
    if unit == "fraction":
        return f"{value:+.1%}"
    return f"{value:.2f}{unit or ''}"


def _limit(row: dict) -> str:
    unit = row.get("unit")
    if unit == "ms":
        return f"≤ {_ms(row['limit'])}"
    if unit == "fraction":
        return f"≤ {row['limit']:.0%}"
    return f"≤ {row['limit']}{unit or ''}"


def machine_line(m: dict) -> str:
    memory = f", {m['memory_bytes'] / 2**30:.0f} GiB RAM" if m.get("memory_bytes") else ""
    gpu = f"; GPU {m['gpu']}" if m.get("gpu") else "; no GPU"
    v = m.get("versions", {})
    libs = ", ".join(f"{k} {v[k]}" for k in ("panel", "bokeh", "datashader", "playwright") if k in v)
    browser = f"; {m['chromium']}" if m.get("chromium") else ""
    return f"{m.get('cpu')}, {m.get('cpu_cores_usable')} usable cores{memory}{gpu}; python {m.get('python')}, {libs}{browser}"


def measured_line(section: dict, cores: int) -> str:
    """When and how a section was measured, and how busy the machine was meanwhile."""
    m = section.get("measured")
    if not m:
        return ""
    load = m["load_average"]
    options = f" (server options `{' '.join(m['server_options'])}`)" if m.get("server_options") else ""
    text = (f"Measured {m['date'].replace('T', ' ')} by `{m['command']}`{options}; 1-minute load average "
            f"meanwhile: mean {load['mean']}, max {load['max']} on {cores} cores.")
    if m.get("disturbed"):
        text += (" **Disturbed**: other work kept the machine busier than its core count (it is shared and was "
                 "not reserved), so these times are what a user of a busy machine feels, not an idle one's.")
    return text


def invocations_lines(report: dict) -> list[str]:
    lines = []
    for inv in report.get("invocations", []):
        load = inv.get("load_average") or {}
        line = (f"- `{inv['command']}` at {inv['date'].replace('T', ' ')}: load average mean {load.get('mean')}, "
                f"max {load.get('max')} (start {load.get('start')}, end {load.get('end')})")
        loop = inv.get("python_loop_ms")
        if loop:
            line += (f"; the cores' speed (a fixed Python loop, `benchmarks.measure.python_loop_ms`, lower is "
                     f"faster): {loop['start']} ms at the start, {loop['end']} ms at the end")
        if inv.get("problems"):
            line += "; **problems**: " + "; ".join(inv["problems"])
        lines.append(line)
    return lines


def markdown(report: dict) -> str:
    run = report.get("run", {})
    cores = report["machine"].get("cpu_cores_usable")
    lines = [f"# Interaction benchmark: {report['machine'].get('name')}, {report['date'][:10]}", "",
             f"- Machine: {machine_line(report['machine'])}"]
    if run:
        lines.append(f"- Run: {run['n_samples']:,} samples, {run['beats']:,} beats, device {run['device']}, "
                     f"board {run['board']}; server ready after {run['server_ready_s']:.1f} s "
                     f"({'cached run' if run.get('cached') else 'pipeline ran at start'})")
    lines += ["- Server: `panel serve dashboard/app.py`, one process, as `./run.sh` serves it (Bokeh's session "
              "defaults) unless a section says otherwise; the soak test has a server of its own (below)",
              "- Runs of the benchmark that wrote this file (each section says which one measured it):",
              *invocations_lines(report), ""]
    lines += ["## Targets", "", "| target | measured | limit | status | note |", "| --- | --- | --- | --- | --- |"]
    for row in report.get("targets", []):
        limit = _limit(row) if row.get("unit") else "–"
        lines.append(f"| {row['target']} | {_measured(row)} | {limit} | {row['status']} | {row.get('note', '')} |")
    lines.append("")

    browser = report.get("browser", {})
    if browser:
        lines += ["## In Chromium, one session", "",
                  "Each time runs in the page's own clock (`performance.now()`), from the input event's "
                  "timestamp to two animation frames after the result arrived. "
                  + measured_line(browser, cores), "",
                  "| interaction | n | median | p95 | max |", "| --- | --- | --- | --- | --- |"]
        for label, s in browser.get("session open", {}).get("milestones_ms", {}).items():
            lines.append(_row(f"session open: navigation → {label}", s))
        for label, s in browser.get("brushes", {}).items():
            lines.append(_row(f"{label} → every view repainted" if label != "clear" else
                              "double-click clear → every view repainted", s))
        for label, s in browser.get("zoom", {}).items():
            lines.append(_row(f"{label} → new window's picture painted", s))
        lines.append("")
        selected = browser.get("brush_selected_beats")
        if selected and selected["n"]:
            lines += [f"Beats selected after a timed brush: median {selected['median']:,.0f} of {selected['of']:,}; "
                      f"{selected['empty']} of {selected['n']} brushes left none.", ""]
        failures = browser.get("brush_failures", []) + browser.get("zoom_failures", [])
        errors = browser.get("console_errors", []) + browser.get("session open", {}).get("console_errors", [])
        lines += [f"Failed gestures: {len(failures)}" + (f" ({'; '.join(failures[:5])})" if failures else "") +
                  f". Console errors: {len(errors)}" + (f" ({'; '.join(errors[:5])})" if errors else "") + ".", ""]

    server = report.get("server")
    if server:
        lines += [f"## Server side ({server['board']} board, in process)", "",
                  "From the property change the browser sends to the document patch serialized. "
                  + measured_line(server, cores), "",
                  "| interaction | n | median | p95 | max | patch (median) |", "| --- | --- | --- | --- | --- | --- |"]
        for kind, s in server["kinds"].items():
            d = server["details"].get(kind, {})
            patch = (f"{d['patch_bytes_median'] / 1024:.1f} KiB, {d['events_median']:.0f} events"
                     if "patch_bytes_median" in d else
                     f"{d.get('models', 0)} models, {d.get('document_bytes', 0) / 1024:.0f} KiB document")
            lines.append(f"{_row(kind, s)} {patch} |")
        lines.append("")

    load = report.get("load")
    if load:
        many, one = load["concurrent"], load["single"]
        lines += [f"## Load test: {many['sessions']} sessions at once ({many['client']})", "",
                  measured_line(load, cores), "",
                  "| sessions | opened | brushes | median | p95 | max | failed | console errors | selections independent |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in (one, load.get("in_turn"), many):
            if not r:
                continue
            s = r["brush_ms"]
            lines.append(f"| {r['sessions']} | {r['opened']} | {s['n']} | {_ms(s['median'])} | {_ms(s['p95'])} | "
                         f"{_ms(s['max'])} | {len(r['failed_interactions'])} | {len(r['console_errors'])} | "
                         f"{r['independent_sessions']}/{r['opened']} |")
        ratio, in_turn = load.get("p95_ratio"), load.get("p95_ratio_in_turn")
        lines += ["", f"p95 with {many['sessions']} sessions / p95 with one: "
                      f"{ratio:.2f}×" if ratio else "p95 ratio: not measured", ""]
        if in_turn:   # the second row: the same sessions and brushes, one session brushing at a time
            lines += [f"p95 with {many['sessions']} sessions / p95 of the same brushes one session at a time "
                      f"(the second row): {in_turn:.2f}×", ""]
        if many.get("burst_ms", {}).get("n"):   # reports from before the burst was counted apart lack it
            b = many["burst_ms"]
            lines += [f"Before those, every session brushed at the same instant once (the burst, not in the "
                      f"figures above): median {_ms(b['median'])}, the last answered after {_ms(b['max'])}.", ""]
        problems = many["failed_interactions"] + many["selection_mismatches"] + many["console_errors"]
        if problems:
            lines += ["Problems: " + "; ".join(problems[:10]), ""]

    soak = report.get("soak")
    if soak:
        growth = soak.get("growth_after_first_10")
        lines += [f"## Soak test: {soak['cycles']} sessions opened, brushed once and closed", "",
                  measured_line(soak, cores), "",
                  f"A server of its own with `{' '.join(soak['server_options'])}` (ms), so that Bokeh discards a "
                  "closed session within seconds (its default keeps it 15 s). Server RSS after every 10 sessions "
                  f"(each reading {soak['settle_s']:.0f} s after the last close); growth after the first 10: "
                  + (f"**{growth:+.1%}**" if growth is not None else "–")
                  + f"; failed cycles: {len(soak['failures'])}.", "",
                  "| sessions | RSS |", "| --- | --- |"]
        lines += [f"| {r['sessions']} | {r['rss_bytes'] / 2**20:.0f} MiB |" for r in soak["rss"]]
        lines.append("")
        if soak.get("culprit"):
            lines += ["What holds the memory: " + soak["culprit"], ""]
    return "\n".join(lines)


def table(report: dict) -> str:
    """A compact terminal table: one line per interaction kind, then the targets."""
    rows = [("kind", "n", "median", "p95", "max")]
    browser = report.get("browser", {})
    for label, s in browser.get("session open", {}).get("milestones_ms", {}).items():
        if label in ("first paint", "every view populated, painted"):
            rows.append((f"open → {label}", s["n"], _ms(s["median"]), _ms(s["p95"]), _ms(s["max"])))
    for group in ("brushes", "zoom"):
        for label, s in browser.get(group, {}).items():
            rows.append((f"browser {label}", s["n"], _ms(s["median"]), _ms(s["p95"]), _ms(s["max"])))
    for label, s in (report.get("server") or {}).get("kinds", {}).items():
        rows.append((f"server {label}", s["n"], _ms(s["median"]), _ms(s["p95"]), _ms(s["max"])))
    load = report.get("load")
    if load:
        for r, how in ((load["single"], ""), (load.get("in_turn"), " in turn"), (load["concurrent"], "")):
            if not r:
                continue
            s = r["brush_ms"]
            rows.append((f"load {r['sessions']} session(s){how} brush", s["n"], _ms(s["median"]), _ms(s["p95"]),
                         _ms(s["max"])))
    width = max(len(str(r[0])) for r in rows) + 2
    out = [f"{r[0]:<{width}}{r[1]:>5}{r[2]:>10}{r[3]:>10}{r[4]:>10}" for r in rows]
    out.append("")
    for row in report.get("targets", []):
        out.append(f"{row['status']:<16} {row['target']}: {_measured(row)}")
    out += invocations_lines(report)[-1:]
    return "\n".join(out)
