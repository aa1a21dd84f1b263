#!/usr/bin/env python3
"""Checks the commands in the documents' ``bash`` code blocks against the code.

Usage:
    python tools/dev/check_docs.py [--run] [DOC.md ...]

Every command of every ```` ```bash ```` block (continuation lines joined,
``&&``/``;``/``|`` chains split) is checked as follows:

* ``python tools/X.py ...`` and ``python projects/multigrid/study.py ...``
  (also under ``torchrun``, ``srun`` or with ``VAR=value`` in front): the
  tool's own argument parser must accept the arguments, and every config they
  name (``--cfg``) must exist and load with the ``KEY VALUE`` overrides;
* with ``--run``, the commands that need no data, GPU, network or cluster and
  finish in seconds also run, from a scratch folder that links to the
  repository's code and configs: ``--help``, ``python -c``,
  ``plan_multigrid.py``, and ``study.py`` with ``--dry-run`` added (in this
  process: many studies, each built in a fraction of a second);
* the rest is skipped with its reason: installing (network), ``pytest`` (CI
  runs the suite), ``sbatch``/``squeue`` (a cluster), shell built-ins.

A command no rule knows fails the check, so a new kind of command in the
documents needs a rule here. Every relative link (``[text](path#anchor)``)
must name a file of the repository and, with an anchor into a Markdown file,
one of its headings (GitHub's anchors: lower case, punctuation dropped,
spaces as dashes). Exit status 0 when every command passes, 1
otherwise; each failure is one line naming the document, the line and why.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import glob
import importlib.util
import io
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = [
    "README.md",
    "INSTALL.md",
    "GETTING_STARTED.md",
    "docs/guide/configs.md",
    "docs/guide/training.md",
    "docs/guide/testing.md",
    "docs/guide/multigrid.md",
    "docs/guide/launching.md",
    "docs/guide/checkpoints.md",
    "docs/guide/kinetics.md",
    "docs/guide/mixed-precision.md",
    "docs/guide/troubleshooting.md",
    "DATASET.md",
    "projects/multigrid/README.md",
    "projects/extend_example/README.md",
    "docs/ARCHITECTURE.md",
    "docs/EXTENDING.md",
    "docs/BENCHMARKS.md",
    "docs/MODEL_ZOO.md",
    "docs/CONFIG_KEYS.md",
    "docs/GLOSSARY.md",
    "docs/HISTORY.md",
    "CHANGELOG.md",
    "CONTRIBUTING.md",
    "tools/dev/README.md",
] + sorted(
    os.path.relpath(path, ROOT)
    for path in glob.glob(os.path.join(ROOT, "docs", "benchmarks", "*.md"))
)
SHELL = {"cd", "ls", "cat", "echo", "export", "mkdir", "rm", "cp", "mv", "tail", "head"}
SHELL |= {"tree", "du", "wc", "grep", "source", ".", "nvidia-smi", "kill"}
SKIP = {
    "pip": "installs from the network",
    "bash": "installs from the network",
    "git": "needs the network",
    "ruff": "CI runs the linter",
    "sbatch": "needs a SLURM cluster",
    "squeue": "needs a SLURM cluster",
    "scancel": "needs a SLURM cluster",
    "ffmpeg": "an external program",
    "tensorboard": "a server",
}
# Tools that finish in seconds without data: run for real with --run.
QUICK = {"tools/plan_multigrid.py"}
RUN_TIMEOUT_S = 120


@dataclass
class Command:
    """One command of a document's ``bash`` block.

    Attributes:
        doc: the document, relative to the repository.
        line: the line of the block where the command starts (1-based).
        argv: the command's words, shell-split.
    """

    doc: str
    line: int
    argv: List[str]

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {shlex.join(self.argv)}"


def fenced_commands(doc: str) -> Iterator[Command]:
    """The commands of ``doc``'s ```` ```bash ```` (or ``sh``/``shell``) blocks."""
    with open(os.path.join(ROOT, doc)) as f:
        lines = f.read().splitlines()
    in_block, pending, start = False, "", 0
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            lang = stripped[3:].strip()
            in_block = not in_block and lang in ("bash", "sh", "shell", "console")
            continue
        if not in_block:
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        yield from _split(doc, start, pending + stripped)
        pending = ""


def _split(doc: str, line: int, text: str) -> Iterator[Command]:
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    words: List[str] = []
    for token in lexer:
        if token and set(token) <= set(";&|"):
            if words:
                yield Command(doc, line, words)
            words = []
        else:
            words.append(token)
    if words:
        yield Command(doc, line, words)


def _script(argv: List[str]) -> Optional[int]:
    """Index of the Python script in ``argv`` (after python/torchrun/srun), or None."""
    for i, word in enumerate(argv):
        if word.endswith(".py") and not word.startswith("-"):
            return i
    return None


@functools.lru_cache(maxsize=None)
def _load_module(path: str):
    name = "doc_tool_" + os.path.basename(path)[:-3]
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, path))
    assert spec is not None and spec.loader is not None  # a .py file's
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _parse(script: str, args: List[str]) -> argparse.Namespace:
    """The tool's own parser applied to ``args`` (SystemExit when it refuses)."""
    if script == "tools/run_net.py":
        from slowfast.launch.parser import parse_args

        return parse_args(args)
    module = _load_module(script)
    if not hasattr(module, "parse_args"):
        raise ValueError(f"{script} has no parse_args(argv) to check its arguments")
    return module.parse_args(args)


def _check_configs(namespace: argparse.Namespace) -> None:
    """Loads the configs named by the parsed arguments, with their overrides."""
    from slowfast.launch.config import load_run_config

    files = getattr(namespace, "cfg_files", None) or getattr(namespace, "cfg", None)
    if not files:
        return
    files = [files] if isinstance(files, str) else list(files)
    for path in files:
        if not os.path.isfile(os.path.join(ROOT, path)):
            raise ValueError(f"no config {path}")
    opts = list(getattr(namespace, "opts", None) or [])
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        load_run_config(files, opts)
    finally:
        os.chdir(cwd)


@contextlib.contextmanager
def _scratch() -> Iterator[str]:
    """A temporary folder with links to the repository's code, configs and data."""
    with tempfile.TemporaryDirectory() as scratch:
        for name in ("configs", "tools", "projects", "slowfast", "workshop", "data"):
            if os.path.exists(os.path.join(ROOT, name)):
                os.symlink(os.path.join(ROOT, name), os.path.join(scratch, name))
        yield scratch


def _run(argv: List[str]) -> None:
    """Runs ``argv`` from a scratch folder linking to the code and configs."""
    with _scratch() as scratch:
        env = dict(os.environ, PYTHONPATH=ROOT)
        argv = [sys.executable if w in ("python", "python3") else w for w in argv]
        done = subprocess.run(
            argv,
            cwd=scratch,
            env=env,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:]
            raise ValueError(f"exit status {done.returncode}: {' '.join(tail)}")


def _dry_run_study(args: List[str]) -> None:
    """``study.py ARGS --dry-run`` in this process, from a scratch folder.

    In this process rather than a new one: the dry run builds every run (configs,
    schedules, dataset sizes) in a fraction of a second, where a new process
    spends seconds importing PyTorch, for each of the documents' many studies.
    The study's command line itself runs as a process in its own tests. Unlike
    the commands run as processes, a dry run has no timeout.
    """
    study = _load_module("projects/multigrid/study.py")
    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    with _scratch() as scratch:
        os.chdir(scratch)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                status = study.main(args + ["--dry-run"])
        except SystemExit as exit_:  # argparse: its message is in ``err``
            status = exit_.code
        finally:
            os.chdir(cwd)
    if status != 0:
        tail = (err.getvalue() or out.getvalue()).strip().splitlines()[-1:]
        raise ValueError(f"exit status {status}: {' '.join(tail)}")


def check(command: Command, run: bool) -> str:
    """Checks one command; returns what was done (raises on a failure)."""
    argv = list(command.argv)
    while argv and "=" in argv[0] and not argv[0].startswith("-"):
        argv.pop(0)  # VAR=value in front
    if not argv:
        return "skipped: empty"
    program = os.path.basename(argv[0])
    if program in SKIP:
        return f"skipped: {SKIP[program]}"
    python = program in ("python", "python3")
    module = argv[2] if python and argv[1:2] == ["-m"] and len(argv) > 2 else None
    if module == "pytest":
        return "skipped: CI runs the test suite"
    if module in ("venv", "pip"):
        return "skipped: makes an environment or installs from the network"
    if python and argv[1:2] == ["-c"]:
        if run:
            _run(argv)
            return "ran"
        return "skipped: python -c runs with --run"
    index = _script(argv)
    if index is None:
        if program in SHELL:
            return "skipped: shell"
        raise ValueError(f"no rule for the program {argv[0]!r}")
    script, args = argv[index], argv[index + 1 :]
    if not os.path.isfile(os.path.join(ROOT, script)):
        raise ValueError(f"no script {script}")
    if "--help" in args or "-h" in args:
        if run:
            _run(argv)
            return "ran"
        return "skipped: --help runs with --run"
    _check_configs(_parse(script, args))
    if run and script == "projects/multigrid/study.py" and index == 1:
        _dry_run_study([a for a in args if a != "--dry-run"])
        return "arguments and configs checked, ran with --dry-run"
    if run and script in QUICK and index == 1:
        _run(argv)
        return "arguments and configs checked, ran"
    return "arguments and configs checked"


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading's text."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def headings(path: str) -> List[str]:
    """The anchors of a Markdown file's headings (fenced blocks left out)."""
    anchors, in_block = [], False
    seen: Dict[str, int] = {}
    with open(path) as f:
        for line in f:
            if line.lstrip().startswith("```"):
                in_block = not in_block
            elif not in_block and line.startswith("#"):
                name = anchor(line.lstrip("#"))
                count = seen.get(name, 0)
                seen[name] = count + 1
                anchors.append(name if count == 0 else f"{name}-{count}")
    return anchors


def broken_links(doc: str) -> Iterator[str]:
    """``doc``'s relative links whose file or heading does not exist."""
    path = os.path.join(ROOT, doc)
    with open(path) as f:
        text = re.sub(r"```.*?```", "", f.read(), flags=re.S)
    for target in LINK.findall(text):
        if "://" in target or target.startswith("mailto:"):
            continue
        file, _, name = target.partition("#")
        file = (
            os.path.normpath(os.path.join(os.path.dirname(path), file))
            if file
            else path
        )
        if not os.path.exists(file):
            yield f"{doc}: link to a missing file {target}"
        elif name and file.endswith(".md") and name not in headings(file):
            yield f"{doc}: link to a missing heading {target}"


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("docs", nargs="*", default=DOCS, help="documents to check")
    parser.add_argument("--run", action="store_true", help="also run quick commands")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each")
    args = parser.parse_args(argv)
    failures = 0
    for doc in args.docs:
        for broken in broken_links(doc):
            failures += 1
            print(f"FAIL {broken}")
        for command in fenced_commands(doc):
            try:
                what = check(command, args.run)
            except (Exception, SystemExit) as err:  # noqa: BLE001 - reported per command
                failures += 1
                print(f"FAIL {command}: {type(err).__name__}: {err}")
                continue
            if args.verbose:
                print(f"ok   {command}: {what}")
    print(f"{failures} failing command(s)" if failures else "all commands pass")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
