"""The README and docs/ stay navigable and honest: a short README, relative links (and their
#anchors) that resolve, every docs page reachable from the README, no scratch paths in docs/,
no claim of several GPUs or nodes that does not say what has run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_MAX_LINES = 200

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
INLINE_LINK = re.compile(r"\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s*\[[^\]\n]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.MULTILINE)
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def doc_pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def markdown_files() -> list[Path]:
    return [README, *doc_pages()]


def prose(text: str) -> str:
    """The text without fenced code blocks and inline code, where brackets are not links."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def links(text: str) -> list[str]:
    body = prose(text)
    return INLINE_LINK.findall(body) + REFERENCE_LINK.findall(body)


def is_external(target: str) -> bool:
    return re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) is not None  # http:, https:, mailto:


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = text.replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor GitHub renders for the headings of a markdown file (repeats get -1, -2, ...)."""
    seen: dict[str, int] = {}
    result = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def broken_links(path: Path) -> list[str]:
    """Relative links of one markdown file whose file (or #anchor in a markdown file) is missing."""
    problems = []
    for target in links(path.read_text(encoding="utf-8")):
        if is_external(target):
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.exists():
            problems.append(f"{path.relative_to(ROOT)}: {target} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{path.relative_to(ROOT)}: {target} (no such heading)")
    return problems


def test_readme_fits_on_a_screen() -> None:
    n_lines = len(README.read_text(encoding="utf-8").splitlines())
    assert n_lines <= README_MAX_LINES, f"README.md has {n_lines} lines"


def test_readme_documents_make_test() -> None:
    text = README.read_text(encoding="utf-8")
    assert re.search(r"^make test\b", text, re.MULTILINE), "README.md lost `make test`"


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    assert broken_links(path) == []


def test_every_docs_page_is_linked_from_readme() -> None:
    pages = doc_pages()
    assert pages, "docs/ has no pages"
    linked = {
        (ROOT / target.partition("#")[0]).resolve()
        for target in links(README.read_text(encoding="utf-8"))
        if not is_external(target)
    }
    unlinked = [str(p.relative_to(ROOT)) for p in pages if p.resolve() not in linked]
    assert unlinked == []


def test_docs_name_no_scratch_paths() -> None:
    offenders = [
        str(p.relative_to(ROOT))
        for p in sorted(DOCS.rglob("*"))
        if p.is_file() and "/tmp/" in p.read_text(encoding="utf-8", errors="replace")
    ]
    assert offenders == []


def test_checker_catches_broken_links(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the checks above must be able to fail: a missing file and a missing heading are reported,
    # links in code and external links are not
    monkeypatch.setitem(globals(), "ROOT", tmp_path)  # paths in messages relative to tmp_path
    (tmp_path / "other.md").write_text("# Some `code` heading\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#some-code-heading) [web](https://example.com/x.md)\n"
        "[gone](missing.md) [bad anchor](other.md#nope) `[in code](nowhere.md)`\n"
        "```\n[in a block](nowhere.md)\n```\n"
    )
    problems = broken_links(page)
    assert problems == [
        "page.md: missing.md (no such file)",
        "page.md: other.md#nope (no such heading)",
    ]


# Claims that astrai runs on several GPUs, nodes or machines: several GPUs have never run (one
# H200 has: docs/gpu.md), so each such claim must say so where it is made (issue 32).
SCALE_CLAIM = re.compile(
    r"\b(?:many|several|multiple|two|more|\d+)\s+(?:visible\s+|selected\s+|CUDA\s+)?"
    r"(?:GPUs|nodes|machines)\b"
    r"|\bGPUs?\s+or\s+many\b|\bmulti-?(?:GPU|node)\b|\bper\s+(?:visible\s+|selected\s+)?GPU\b"
    r"|\bclusters?\b",
    re.IGNORECASE,
)
# ... in the same paragraph, list item or table row: untested, or measured on the GPU check page
UNTESTED = re.compile(
    r"\buntested\b|\bnot\s+(?:yet\s+)?(?:tested|measured|run)\b|\bnever\s+(?:been\s+)?(?:run|ran)\b",
    re.IGNORECASE,
)
MEASURED = re.compile(r"\bmeasured\b.*\bgpu\.md\b|\bgpu\.md\b.*\bmeasured\b", re.IGNORECASE)
# ... or says what ran on this machine (issue 63): the cluster lane, the real local cluster its
# tests start, or several nodes on one host (inline code is not prose: say it in words)
TESTED_HERE = re.compile(
    r"\btest-clusters\b|\blocal\s+(?:Slurm|Ray)\s+cluster|\bon\s+one\s+host\b", re.IGNORECASE
)
UNIT_START = re.compile(r"^\s*(?:[-*+]\s|\d+\.\s|\||#)")  # a list item, table row or heading


def claim_units(text: str) -> list[str]:
    """The prose's paragraphs, list items and table rows, each as one line; headings are left
    out (a title claims nothing), as is code."""
    units: list[list[str]] = [[]]
    for line in prose(text).splitlines():
        if not line.strip() or UNIT_START.match(line):
            units.append([])
        if line.strip():
            units[-1].append(line.strip())
    return [" ".join(unit) for unit in units if unit and not unit[0].startswith("#")]


def unqualified_scale_claims(path: Path) -> list[str]:
    """``path: claim`` for each unit claiming several GPUs/nodes without saying what ran."""
    return [
        f"{path.relative_to(ROOT)}: [{claim.group(0)}] {unit[:120]}"
        for unit in claim_units(path.read_text(encoding="utf-8"))
        if (claim := SCALE_CLAIM.search(unit))
        and not UNTESTED.search(unit)
        and not MEASURED.search(unit)
        and not TESTED_HERE.search(unit)
    ]


def test_claims_about_several_gpus_or_nodes_say_what_has_run() -> None:
    assert [claim for path in markdown_files() for claim in unqualified_scale_claims(path)] == []


def test_checker_catches_unqualified_scale_claims(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    page = tmp_path / "page.md"
    page.write_text(
        "# Several GPUs and nodes\n\n"  # a heading: no claim
        "The same command runs on one GPU\nor many, in Docker.\n\n"  # caught across a line break
        "- starts one process per visible GPU\n"  # caught: the next item's word is not its own
        "- several nodes are untested\n\n"
        "| Multi-node | ok |\n| 8 GPUs | measured in [GPU check](gpu.md) |\n\n"
        "On a real cluster it has never run. `python train.py` on 4 GPUs\n\n"
        "Two nodes rendezvous, on one host in `test_two_nodes.py`.\n\n"
        "A sweep on a real local Slurm cluster.\n\nA sweep on a Ray cluster.\n\n"
        "```\npython train.py  # every visible GPU, several nodes\n```\n"
    )
    assert [line.split("] ")[0] for line in unqualified_scale_claims(page)] == [
        "page.md: [GPU or many",
        "page.md: [per visible GPU",
        "page.md: [Multi-node",
        "page.md: [cluster",  # the Ray sweep's claim: it names nothing that ran
    ]
