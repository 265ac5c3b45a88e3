"""The README cannot drift from the product: its commands work as typed, its links lead somewhere,
and its text keeps the rules of a manual.

Commands. Every line of the README's ```bash, ```sh and ```console blocks (in a console block, the
lines that start with ``$ ``) is a command; a line ending in ``\\`` goes on with the next. They run
in README order, each with ``bash -c`` in one shared working folder, with the interpreter's bin
folder (the virtualenv's, where ``ecg`` is) first on PATH. The folder is a temporary mirror of the
repository: a symbolic link to each of its top-level entries, and ``../shared`` beside it, so that
what a command writes (``rec.csv``, ``runs/``, ``archive/``) lands in the mirror, never in the
repository. A command fails the test when its exit status is not 0. The rules, in this order:

1. **Skipped, by its tag**: a line whose trailing comment ends with one of :data:`SKIP_TAGS`
   (``# … (long)``, ``(GPU)``, ``(cluster)``, ``(exposed)``); the reason shows in ``pytest -rs``.
2. **Skipped, for what this machine lacks**: a line naming a file under ``../shared/data/`` that is
   absent (the MIT-BIH records are not shipped); a ``./run.sh`` or ``.venv`` line when the tests do
   not run from the project's set-up ``.venv`` (it would install one first).
3. **Tiny sizes**: every ``--samples N`` becomes ``--samples 30000``; ``synth``, and ``run`` or a
   server without an input, get ``--samples 30000`` when they have none; commands that train (run,
   batch, evaluate, a server) get ``--epochs 2`` when they have none. Nothing else is changed.
4. **Servers** (``./run.sh`` alone, ``./run.sh serve``, ``ecg serve``, ``python -m
   dashboard.serve``): started on a free port (``PORT=`` for ``./run.sh``, ``--port`` otherwise),
   they pass when ``http://127.0.0.1:PORT/app`` answers 200, and are then stopped.

Text: at most :data:`MAX_LINES` lines; no commit ids (7-40 hex characters that ``git cat-file -e``
resolves); no machine letters ("machine AK"); no line over :data:`MAX_WIDTH` characters outside
tables. Links: every relative link of the README and of ``docs/*.md`` names an existing file, and
an anchor into a Markdown file names one of its headings.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
BIN = Path(sys.executable).parent
MAX_LINES, MAX_WIDTH = 300, 200
SKIP_TAGS = {
    "(long)": "takes minutes (a whole data set, or the test suite itself)",
    "(GPU)": "needs a CUDA GPU",
    "(cluster)": "needs a Dask scheduler and machines of its own",
    "(exposed)": "would listen beyond this machine",
}
TINY_SAMPLES, TINY_EPOCHS = "30000", "2"
SHELLS = ("bash", "sh", "console", "shell")
FLAGS = {"--no-cache", "--quiet", "--no-neurokit", "--warm", "--show", "--help", "-h"}
SERVER_START_S = 240


# --------------------------------------------------------------------------- reading the README
@dataclass(frozen=True)
class Command:
    line: int          # 1-based line of the README where it starts
    text: str          # what the shell runs (the comment removed)
    comment: str

    @property
    def id(self) -> str:
        return f"L{self.line}:{self.text[:40]}"


def split_comment(line: str) -> tuple[str, str]:
    """``line`` as (command, trailing comment): the first ``#`` outside quotes that starts a word."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


def readme_commands(text: str) -> list[Command]:
    commands, block, pending, start = [], None, "", 0
    for number, line in enumerate(text.splitlines(), 1):
        fence = re.match(r"^\s*```\s*([\w+-]*)", line)
        if fence:
            block = (fence.group(1) or "text") if block is None else None
            continue
        if block not in SHELLS:
            continue
        if block == "console":
            if not (line.startswith("$ ") or pending):
                continue
            line = line[2:] if line.startswith("$ ") else line
        if not pending:
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        command, comment = split_comment(pending + line)
        pending = ""
        if command.strip():
            commands.append(Command(start, command.strip(), comment))
    return commands


COMMANDS = readme_commands(README.read_text())


# --------------------------------------------------------------------------- rewriting a command
OPERATORS = {"&&", "||", ";", "|", "&"}


def words_of(text: str) -> list[str]:
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


def shell_text(words: list[str]) -> str:
    return " ".join(w if w in OPERATORS else shlex.quote(w) for w in words)


def positionals(args: list[str]) -> list[str]:
    """The arguments that are not options nor their values (every option but FLAGS takes one)."""
    found, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg.startswith("-"):
            skip = arg not in FLAGS and "=" not in arg
        else:
            found.append(arg)
    return found


def has(args: list[str], option: str) -> bool:
    return any(a == option or a.startswith(option + "=") for a in args)


def kind_of(words: list[str]) -> tuple[str, int]:
    """What a simple command is ('run', 'synth', 'batch', 'evaluate', 'reference', 'serve' or
    'other') and where its own arguments start."""
    head = words[:3]
    if words[:1] == ["ecg"] or words[:2] == ["./run.sh", "ecg"]:
        at = 1 if words[0] == "ecg" else 2
        sub = words[at] if len(words) > at else "other"
        return (sub if sub in ("run", "synth", "batch", "evaluate", "reference", "serve") else "other"), at + 1
    if words[:2] == ["./run.sh", "pipeline"]:
        return (words[2] if len(words) > 2 else "run"), 3
    if words == ["./run.sh"] or words[:2] == ["./run.sh", "serve"]:
        return "serve-run.sh", 2
    if head[:1] in (["python"], ["python3"]) and head[1:3] == ["-m", "pipeline"]:
        return (words[3] if len(words) > 3 else "other"), 4
    if head[:1] in (["python"], ["python3"]) and head[1:3] == ["-m", "dashboard.serve"]:
        return "serve", 3
    return "other", len(words)


def rewrite(words: list[str], port: int) -> tuple[list[str], dict, bool]:
    """One simple command at tiny sizes: (words, extra environment, is a server)."""
    words = list(words)
    for i, word in enumerate(words[:-1]):
        if word == "--samples":
            words[i + 1] = TINY_SAMPLES
    kind, at = kind_of(words)
    args = words[at:]
    if kind == "run" and words[:2] == ["./run.sh", "pipeline"] and len(words) == 2:
        words.append("run")
    if kind in ("run", "synth") and not has(args, "--samples") and not (kind == "run" and positionals(args)):
        words += ["--samples", TINY_SAMPLES]
    if kind in ("run", "batch", "evaluate") and not has(args, "--epochs") and "--help" not in args:
        words += ["--epochs", TINY_EPOCHS]
    if kind == "serve-run.sh":
        if len(words) == 1:
            words.append("serve")
        return words + _app_sizes(words[2:]), {"PORT": str(port)}, True
    if kind == "serve" and "--help" not in args and "-h" not in args:
        if "--port" in words:
            i = words.index("--port")
            del words[i:i + 2]
        words[at:at] = ["--port", str(port)]
        if "--args" not in words:
            words.append("--args")
        return words + _app_sizes(words[words.index("--args") + 1:]), {}, True
    return words, {}, False


def _app_sizes(app_args: list[str]) -> list[str]:
    extra = []
    if not any(has(app_args, o) for o in ("--input", "--archive", "--samples")):
        extra += ["--samples", TINY_SAMPLES]
    if not has(app_args, "--epochs"):
        extra += ["--epochs", TINY_EPOCHS]
    return extra


def split_commands(words: list[str]) -> list[list[str]]:
    """Simple commands and the operators between them: [[words], ['&&'], [words], …]."""
    parts, current = [], []
    for word in words:
        if word in OPERATORS:
            parts += [current, [word]]
            current = []
        else:
            current.append(word)
    return parts + [current]


# --------------------------------------------------------------------------- running
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def venv_is_set_up() -> bool:
    """Whether ./run.sh would find its .venv ready (and so install nothing), as it decides."""
    import hashlib

    venv = REPO / ".venv"
    digest = hashlib.sha1((REPO / "pyproject.toml").read_bytes()).hexdigest()[:12]
    return (BIN.resolve() == (venv / "bin").resolve()
            and any(venv.glob(f".installed-*-{digest}")))


@pytest.fixture(scope="module")
def mirror(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("readme")
    repo = root / "repo"
    repo.mkdir()
    for entry in REPO.iterdir():
        if entry.name not in ("runs", "test-artifacts", ".git", "__pycache__"):
            (repo / entry.name).symlink_to(entry)
    if (REPO.parent / "shared").exists():
        (root / "shared").symlink_to(REPO.parent / "shared")
    return repo


def skip_reason(command: Command) -> str | None:
    for tag, why in SKIP_TAGS.items():
        if command.comment.endswith(tag):
            return f"README line {command.line}, tagged {tag}: {why}"
    for word in words_of(command.text):
        if "shared/data/" in word and not (REPO / word).exists():
            return f"README line {command.line}: {word} is not on this machine"
    if ("./run.sh" in command.text or ".venv" in command.text) and not venv_is_set_up():
        return f"README line {command.line}: the tests do not run from the project's set-up .venv"
    return None


def test_the_readme_has_commands():
    assert len(COMMANDS) >= 10, [c.text for c in COMMANDS]
    assert any(kind_of(words_of(c.text))[0].startswith("serve") for c in COMMANDS)
    for command in COMMANDS:
        for tag in re.findall(r"\([^()]*\)$", command.comment):
            assert tag in SKIP_TAGS or not re.fullmatch(r"\((long|gpu|GPU|cluster|exposed)\)", tag), command


@pytest.mark.slow
@pytest.mark.parametrize("command", COMMANDS, ids=[c.id for c in COMMANDS])
def test_readme_command_works_as_typed(command: Command, mirror: Path, tmp_path):
    reason = skip_reason(command)
    if reason:
        pytest.skip(reason)
    port = free_port()
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    parts, server = [], False
    for part in split_commands(words_of(command.text)):
        if part and part[0] not in OPERATORS:
            part, extra, is_server = rewrite(part, port)
            env.update(extra)
            server |= is_server
        parts += part
    text = shell_text(parts)
    if not server:
        done = subprocess.run(["bash", "-c", text], cwd=mirror, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, (f"README line {command.line}: `{command.text}` ran as `{text}` and exited "
                                      f"{done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return
    log_path = tmp_path / "server.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(["bash", "-c", text], cwd=mirror, env=env, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            status = answer(f"http://127.0.0.1:{port}/app", process)
        finally:
            stop(process)
    assert status == 200, (f"README line {command.line}: `{command.text}` ran as `{text}` and did not serve "
                           f"(status {status}, exit {process.returncode})\n{log_path.read_text()[-4000:]}")


def answer(url: str, process: subprocess.Popen) -> int | None:
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=20) as response:
                return response.status
        except OSError:
            time.sleep(0.5)
    return None


def stop(process: subprocess.Popen) -> None:
    """The server and everything it started (its pipeline's process among them)."""
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


# --------------------------------------------------------------------------- rewriting, checked
@pytest.mark.parametrize("typed, ran, server", [
    ("ecg run rec.csv", "ecg run rec.csv --epochs 2", False),
    ("ecg run --samples 300000 --device cpu", "ecg run --samples 30000 --device cpu --epochs 2", False),
    ("./run.sh pipeline", "./run.sh pipeline run --samples 30000 --epochs 2", False),
    ("ecg synth a.csv --seed 1", "ecg synth a.csv --seed 1 --samples 30000", False),
    ("./run.sh", "./run.sh serve --samples 30000 --epochs 2", True),
    ("ecg serve --port 5007 --args --input r.edf", "ecg serve --port PORT --args --input r.edf --epochs 2", True),
    ("ecg serve", "ecg serve --port PORT --args --samples 30000 --epochs 2", True),
    ("ecg serve --help", "ecg serve --help", False),
])
def test_rewriting(typed, ran, server):
    words, env, is_server = rewrite(words_of(typed), 1234)
    assert " ".join(words).replace("1234", "PORT") == ran and is_server == server
    assert env == ({"PORT": "1234"} if typed.startswith("./run.sh") and server else {})


def test_commands_are_read_with_their_comments():
    text = "```bash\nls 'a # b'   # lists (long)\necho a \\\n  b\n```\n```console\n$ echo c\nc\n```\n"
    assert [(c.text, c.comment) for c in readme_commands(text)] == [
        ("ls 'a # b'", "lists (long)"), ("echo a    b", ""), ("echo c", "")]


# --------------------------------------------------------------------------- the text
def test_readme_is_short_and_plain():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_LINES, f"the README has {len(lines)} lines; at most {MAX_LINES} (move detail to docs/)"
    wide = [f"{n}: {len(line)} characters" for n, line in enumerate(lines, 1)
            if len(line) > MAX_WIDTH and not line.lstrip().startswith("|")]
    assert not wide, f"lines over {MAX_WIDTH} characters outside tables: {wide}"
    machines = [f"{n}: {m.group(0)}" for n, line in enumerate(lines, 1)
                for m in re.finditer(r"\bmachines?\s+[A-Z]{1,3}\b", line)]
    assert not machines, f"machine letters belong in docs/performance-history.md: {machines}"


def test_readme_names_no_commit():
    if not (REPO / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout")
    tokens = sorted(set(re.findall(r"(?<![\w/.-])[0-9a-f]{7,40}(?![\w/-])", README.read_text())))
    commits = [t for t in tokens
               if subprocess.run(["git", "cat-file", "-e", t], cwd=REPO, capture_output=True).returncode == 0]
    assert not commits, f"commit ids in the README (history goes to docs/performance-history.md): {commits}"


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    text = re.sub(r"[`*_]|<[^>]+>", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    headings, fenced = [], False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"^#{1,6} ", line):
            headings.append(slug(line.lstrip("#")))
    return set(headings)


PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(REPO).as_posix() for p in PAGES])
def test_relative_links_lead_to_files(page: Path):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)   # code is not a link
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", text):
        if re.match(r"^[a-z][\w+.-]*:", target):        # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target} (no heading '{anchor}' in {file.name})")
    assert not broken, f"{page.relative_to(REPO)}: {broken}"
