"""``python -m dashboard.serve OPTIONS``: ``panel serve OPTIONS`` (what ``./run.sh`` starts), with
the pipeline's run started first, in a process of its own (:mod:`dashboard.pipeline_process`),
so that it runs while Panel, Bokeh's server and the dashboard's modules are imported; with
Python's cyclic garbage collector paused during those imports, and what they made frozen out of
its sight (:func:`dashboard.server_gc.imports_frozen`, whose module says why). ``panel serve
dashboard/app.py`` serves the same page without this.

Unlike ``panel serve``, it listens on 127.0.0.1 unless ``--address`` says otherwise (and then
lets pages at ``http://127.0.0.1:PORT`` and ``http://localhost:PORT`` connect): the dashboard has
no authentication of its own. Any other address is served with a warning (:data:`EXPOSED`).
"""
from __future__ import annotations

import argparse
import contextlib
import ipaddress
import os
import socket
import sys

LOOPBACK = "127.0.0.1"
EXPOSED = (
    "dashboard.serve: listening on {address!r}, so anyone who can reach port {port} of this machine "
    "gets the dashboard: its recordings, their labels (which they can change) and the server's "
    "processors. The dashboard has no authentication of its own. Put it behind one: Panel's "
    "--basic-auth PASSWORD_OR_FILE with --cookie-secret SECRET, or --oauth-provider NAME with "
    "--oauth-key, --oauth-secret and --cookie-secret; or leave it on 127.0.0.1 (the default) behind "
    "a reverse proxy that authenticates and terminates TLS. Pages at another address need "
    "--allow-websocket-origin HOST:PORT, as the browser names the server.")


def is_loopback(address: str) -> bool:
    """Whether ``address`` (an IP address or a host name) reaches this machine only; '' (every
    interface) and names that do not resolve count as exposed."""
    if address == "localhost":
        return True
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(address).is_loopback
    try:
        found = {info[4][0] for info in socket.getaddrinfo(address, None)}
    except (OSError, UnicodeError):
        return False
    return bool(found) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in found)


def serve_arguments(argv: list[str], warn=lambda text: print(text, file=sys.stderr, flush=True)) -> list[str]:
    """``panel serve`` options ``argv`` with this server's defaults: ``--address 127.0.0.1`` (and
    that address and localhost as websocket origins) when no address or socket is given; a
    warning through ``warn`` when the address given reaches beyond this machine and no
    authentication option is. Options read as ``panel serve`` reads them (its own parser); ones it
    refuses are left for it to report."""
    from panel.command.serve import Serve

    parser = argparse.ArgumentParser(prog="panel serve", add_help=False)
    Serve(parser=parser)
    try:
        with open(os.devnull, "w") as quiet, contextlib.redirect_stderr(quiet):
            options = parser.parse_args(argv)
    except SystemExit:
        return argv
    if options.unix_socket:
        return argv
    defaults = []
    address = options.address
    if address is None:
        address = LOOPBACK
        defaults += ["--address", address]
    if not is_loopback(address):
        if not (options.basic_auth or options.oauth_provider):
            warn(EXPOSED.format(address=address, port=options.port))
    elif options.allow_websocket_origin is None and options.port:
        hosts = dict.fromkeys([LOOPBACK, "localhost", *([address] if ":" not in address else [])])
        for host in hosts:
            defaults += ["--allow-websocket-origin", f"{host}:{options.port}"]
    return [*defaults, *argv]     # ahead of the app's file and of --args, which takes the rest


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--args" in argv:
        from dashboard import pipeline_process

        # The app's arguments, parsed once (the pages read the same settings); the run goes on
        # while the imports below are made.
        pipeline_process.start_early(argv[argv.index("--args") + 1:])
    from dashboard import server_gc

    with server_gc.imports_frozen():   # what they make lives as long as the process
        from panel.command import main as panel_main

        # The app's own imports, which the server's `--warm` run of dashboard/app.py makes next.
        from dashboard import archive, charts, data_store, page, review, spec, startup, views  # noqa: F401
    sys.argv = ["panel", "serve", *serve_arguments(argv)]
    return panel_main()


if __name__ == "__main__":
    sys.exit(main())
