"""The documents: their commands run against the code, no dates outside benchmarks."""

import os
import re
import subprocess
import sys

import pytest

from tests.helpers.tool_utils import REPO_ROOT, load_tool

check_docs = load_tool("dev/check_docs.py")

# Measurements carry their date and commit; only the benchmark pages hold them.
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")


def _user_docs():
    docs = [
        d
        for d in check_docs.DOCS
        # Measurement pages and their history: records carry dates and commits.
        if d not in ("docs/BENCHMARKS.md", "docs/HISTORY.md")
        and not d.startswith("docs/benchmarks/")
    ]
    for doc in docs:
        assert os.path.isfile(os.path.join(REPO_ROOT, doc)), doc
    return docs


@pytest.mark.parametrize("doc", _user_docs())
def test_user_documents_hold_no_dates_or_commits(doc):
    with open(os.path.join(REPO_ROOT, doc)) as f:
        text = re.sub(r"\]\([^)]*\)", "]()", f.read())  # link targets may hold hex
    assert not DATE.findall(text), f"{doc}: dates {DATE.findall(text)[:3]}"
    assert not COMMIT.findall(text), f"{doc}: commit hashes {COMMIT.findall(text)[:3]}"


def test_readme_is_short():
    """About two screens; the generated parts' markers count too."""
    with open(os.path.join(REPO_ROOT, "README.md")) as f:
        assert len(f.read().splitlines()) <= 130


def test_every_document_command_passes_the_check():
    assert check_docs.main(["--run"]) == 0


def _doc(tmp_path, body):
    path = tmp_path / "doc.md"
    path.write_text("Text.\n\n```bash\n" + body + "\n```\n\n```\nnot a command\n```\n")
    return str(path)


def test_check_splits_chains_and_joins_continuations(tmp_path):
    doc = _doc(tmp_path, "A=1 python tools/x.py --a \\\n    --b && ls | head  # note")
    commands = list(check_docs.fenced_commands(doc))
    assert [c.argv for c in commands] == [
        ["A=1", "python", "tools/x.py", "--a", "--b"],
        ["ls"],
        ["head"],
    ]
    assert commands[0].line == 4


@pytest.mark.parametrize(
    "body, error",
    [
        (
            "python tools/run_net.py --cfg configs/Demo/Kinetics_I3D_tiny.yaml A.B 1",
            "A.B",
        ),
        ("python tools/run_net.py --cfg configs/nowhere.yaml", "no config"),
        ("python tools/plan_multigrid.py --no-such-flag", "exit"),
        ("python tools/nowhere.py", "no script"),
        (
            "python projects/multigrid/study.py --cfg "
            "configs/Demo/Kinetics_I3D_tiny.yaml --budgets 0.001 --out output/s",
            "rounds to 0 epochs",
        ),
        ("frobnicate --now", "no rule"),
    ],
)
def test_check_fails_a_stale_command(tmp_path, capsys, body, error):
    run = ["--run"] if "study.py" in body else []  # a study's dry run needs --run
    assert check_docs.main([*run, _doc(tmp_path, body)]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and error.lower() in out.lower(), out


def test_check_passes_good_commands(tmp_path, capsys):
    body = (
        "python tools/run_net.py --cfg configs/Demo/Kinetics_I3D_tiny.yaml "
        "TRAIN.BATCH_SIZE 8\npip install -e .\npython -m pytest tests"
    )
    assert check_docs.main(["-v", _doc(tmp_path, body)]) == 0
    out = capsys.readouterr().out
    assert out.count("ok ") == 3 and "skipped: installs" in out


def test_check_dry_runs_a_study_without_writing(tmp_path, capsys):
    out_dir = tmp_path / "study_out"
    body = (
        "python projects/multigrid/study.py --cfg configs/Demo/Kinetics_I3D_tiny.yaml "
        f"--arms baseline,long_short --budgets 0.5 --out {out_dir}"
    )
    assert check_docs.main(["-v", "--run", _doc(tmp_path, body)]) == 0
    out = capsys.readouterr().out
    assert "ran with --dry-run" in out, out
    assert "train: " not in out  # the study's own output is not printed
    assert not out_dir.exists()


@pytest.mark.slow
def test_model_zoo_page_is_current():
    done = subprocess.run(
        [
            sys.executable,
            os.path.join(REPO_ROOT, "tools", "dev", "model_zoo.py"),
            "--check",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


def test_check_fails_broken_links(tmp_path, capsys):
    other = "# A heading, with `code`\n\n## Twice\n## Twice\n"
    (tmp_path / "other.md").write_text(other)
    doc = tmp_path / "doc.md"
    doc.write_text(
        "[ok](other.md#a-heading-with-code) [ok](other.md#twice-1) [web](https://x.org)\n"
        "[gone](missing.md) [bad](other.md#nowhere) [self](#nowhere-here)\n"
    )
    assert check_docs.main([str(doc)]) == 1
    out = capsys.readouterr().out
    assert out.count("FAIL") == 3, out
    assert "missing.md" in out and "other.md#nowhere" in out and "#nowhere-here" in out


# A section named in code, configs or documents: `docs/benchmarks/PAGE.md, "Heading"`
# (comment markers may break the heading across lines) or a link `x.md#anchor`.
SECTION_REF = re.compile(
    r"((?:docs/)?benchmarks/[a-z-]+\.md|(?:docs/)?BENCHMARKS\.md),\s+"
    r"(?:\"([^\"]+)\"|'([^']+)')"
)


def _headings(page: str) -> set:
    with open(os.path.join(REPO_ROOT, page)) as f:
        return {line.lstrip("#").strip() for line in f if re.match(r"#{1,6} ", line)}


def _section_refs():
    folders = ("slowfast", "workshop", "tools", "projects", "tests", "configs", "docs")
    for folder in folders:
        for root, _, names in os.walk(os.path.join(REPO_ROOT, folder)):
            for name in names:
                if name.endswith((".py", ".yaml", ".md")):
                    path = os.path.join(root, name)
                    with open(path) as f:
                        text = f.read()
                    for match in SECTION_REF.finditer(text):
                        yield os.path.relpath(path, REPO_ROOT), match


def test_every_named_benchmark_section_exists():
    missing = []
    for path, match in _section_refs():
        page = match.group(1)
        page = page if page.startswith("docs/") else "docs/" + page
        named = match.group(2) or match.group(3)
        heading = re.sub(r"\s*\n\s*(#\s*)?", " ", named).strip()
        if heading not in _headings(page):
            missing.append(f"{path}: {page}, {heading!r}")
    assert not missing, "benchmark sections not found: " + "; ".join(missing)
