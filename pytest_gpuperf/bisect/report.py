"""What a bisection found, as terminal lines, Markdown (a PR comment or CI job summary) and JSON.

Per benchmark: the first bad commit with its subject and its own step (ratio with the 99% CI and the
A/B verdict), the command that reproduces that pair as an A/B run, further suspects, the commits
skipped, or why there is no single commit (spread over several commits or below the resolution, BAD
not slower, cannot be measured); then a table of every commit measured against GOOD.
"""

from __future__ import annotations

import shlex
from typing import Any, Sequence

from pytest_gpuperf.bisect.run import TIME_CAP_NOTE, BisectRun, Commit
from pytest_gpuperf.reporting.messages import ratio_with_ci
from pytest_gpuperf.reporting.terminal import cut_end
from pytest_gpuperf.verdict.bisection import Call, Culprit, Outcome, Probe

#: Exit codes of ``gpuperf bisect``: a first bad commit was found for every regressed benchmark;
#: none was (BAD not slower, spread, unresolved, cannot measure); a usage error.
EXIT_FOUND, EXIT_NOT_FOUND, EXIT_USAGE = 0, 1, 2


def exit_code(run: BisectRun) -> int:
    """:data:`EXIT_FOUND` when every benchmark slower at BAD has a single first bad commit."""
    slower = [o for o in run.outcomes.values() if o.status != "not-slower"]
    ok = slower and all(o.status == "found" and o.culprits[0].single for o in slower)
    return EXIT_FOUND if ok else EXIT_NOT_FOUND


def _ratio(p: Probe | None) -> str:
    return "-" if p is None or p.ratio is None else ratio_with_ci(p.ratio, p.ci)


def reproduce_command(commit: Commit, against: Commit, pytest_args: Sequence[str]) -> str:
    """The shell command that measures ``commit`` against ``against`` as one A/B run."""
    args = " ".join(shlex.quote(a) for a in pytest_args)
    return (f"git checkout {commit.short} && pytest --gpuperf --gpuperf-ab {against.short}"
            + (f" {args}" if args else ""))


def verdict_lines(key: str, o: Outcome, commits: Sequence[Commit], pytest_args: Sequence[str]) -> list[str]:
    """What the search says of one benchmark, reason first (see the module doc)."""
    good, bad = commits[0], commits[-1]
    if o.status == "not-slower":
        return [f"{key}: BAD {bad.short} is not slower than GOOD {good.short} here ({_ratio(o.first)}, "
                f"{o.first.verdict if o.first else '-'}): nothing to bisect"]
    if o.status == "cannot-measure":
        return [f"{key}: cannot be measured at BAD {bad.short} against GOOD {good.short}: "
                f"{o.first.note if o.first else ''}".rstrip(": ")]
    lines: list[str] = []
    if o.culprits:
        top = o.culprits[0]
        lines += _culprit_lines(key, top, commits, pytest_args)
        for c in o.culprits[1:]:
            lines.append(f"  further suspect: {commits[c.first_bad].short} {commits[c.first_bad].subject!r}: "
                         f"{_ratio(c.step)} against {commits[c.last_good].short} ({c.step.verdict})"
                         + ("" if c.single else ", not a regression by itself (spread)"))
    if o.unresolved is not None:
        lo, hi = o.unresolved
        last = o.probes[-1] if o.probes else None
        why = f" ({last.note})" if last is not None and last.note else ""
        if last is not None and last.note.startswith(TIME_CAP_NOTE):
            text = f"between {commits[lo].short} and {commits[hi].short}: not narrowed further, {last.note}"
        elif (lo, hi) == (0, len(commits) - 1) and len(o.probes) == 1:
            text = (f"BAD {commits[hi].short} against GOOD {commits[lo].short} stayed inconclusive after measuring "
                    f"more{why}: whether BAD is slower cannot be decided here, so no commit is named")
        else:
            text = (f"between {commits[lo].short} and {commits[hi].short}: a step stayed inconclusive after "
                    f"measuring more{why}; the slowdown is spread over several commits or below the resolution here")
        lines.append(("  " if lines else f"{key}: ") + text)
    return lines


def _culprit_lines(key: str, c: Culprit, commits: Sequence[Commit], pytest_args: Sequence[str]) -> list[str]:
    first, last = commits[c.first_bad], commits[c.last_good]
    if c.single:
        lines = [f"{key}: first bad commit {first.short} {first.subject!r}: {_ratio(c.step)} against "
                 f"{last.short} ({c.step.verdict})"]
    else:
        lines = [f"{key}: between {last.short} and {first.short}: the slowdown is spread over several commits or "
                 f"below the resolution here ({first.short} is the first commit slower than "
                 f"{commits[c.reference].short}, but its own step is {_ratio(c.step)}, {c.step.verdict or c.step.call.value})"]
    if c.skipped:
        lines.append("  could not be measured (the change may be in one of them): "
                     + ", ".join(commits[i].short for i in c.skipped))
    from pytest_gpuperf.verdict.opdiff import why_lines

    lines += [f"  {line}" for line in why_lines(c.step.op_diff, c.step.why_missing)]
    lines.append(f"  reproduce: {reproduce_command(first, last, pytest_args)}")
    return lines


def table_lines(run: BisectRun, key: str) -> list[str]:
    """Every commit of the line measured against GOOD for ``key``: index, commit, subject, ratio
    to GOOD with its CI, the A/B verdict and what the search made of it."""
    probes = {p.b: p for s in run.steps if s.a == 0 for k, p in s.probes.items() if k == key}
    rows = [("#", "commit", "subject", "ratio to GOOD [99% CI]", "verdict", "call")]
    rows.append(("0", run.commits[0].short, cut_end(run.commits[0].subject, 40), "1", "GOOD", "good"))
    for i in sorted(probes):
        p = probes[i]
        rows.append((str(i), run.commits[i].short, cut_end(run.commits[i].subject, 40), _ratio(p),
                     p.verdict or "-", p.call.value + (f" ({cut_end(p.note, 50)})" if p.call is Call.SKIP and p.note else "")))
    widths = [max(len(r[j]) for r in rows) for j in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def summary_lines(run: BisectRun, pytest_args: Sequence[str]) -> list[str]:
    """The terminal report: per benchmark its verdict lines and table, then the cost."""
    lines = [f"bisect: {run.commits[0].short}..{run.commits[-1].short} ({len(run.commits)} commits, first-parent)"]
    for key in run.keys:
        lines += [""] + verdict_lines(key, run.outcomes[key], run.commits, pytest_args) + [""] + table_lines(run, key)
    lines += ["", f"bisect: {len(run.steps)} A/B step(s) in {run.seconds:.0f} s"]
    lines += [f"note: {n}" for n in run.notes]
    return lines


def markdown(run: BisectRun, pytest_args: Sequence[str]) -> str:
    """The report as Markdown (a PR comment or ``$GITHUB_STEP_SUMMARY``)."""
    from pytest_gpuperf.verdict.opdiff import table as op_table

    out = [f"## pytest-gpuperf bisect: `{run.commits[0].short}..{run.commits[-1].short}`", "",
           f"{len(run.commits)} commits on the first-parent line; {len(run.steps)} A/B step(s) in {run.seconds:.0f} s.", ""]
    for key in run.keys:
        out += [f"### `{key}`", ""]
        out += [f"- {ln.strip()}" for ln in verdict_lines(key, run.outcomes[key], run.commits, pytest_args)]
        out += ["", "| # | commit | subject | ratio to GOOD [99% CI] | verdict | call |", "| ---: | --- | --- | ---: | --- | --- |"]
        measured = sorted({p.b for s in run.steps if s.a == 0 for k, p in s.probes.items() if k == key})
        out += [_markdown_row(run, key, i) for i in [0, *measured]]
        out.append("")
        for c in run.outcomes[key].culprits:
            if c.step.op_diff is not None:  # why it moved, op by op
                out += [f"Why `{run.commits[c.first_bad].short}` moved, op by op (its own step, per call, B - A):", "",
                        op_table(c.step.op_diff), ""]
    out += [f"- note: {n}" for n in run.notes]
    return "\n".join(out).rstrip() + "\n"


def _markdown_row(run: BisectRun, key: str, i: int) -> str:
    c = run.commits[i]
    if i == 0:
        return f"| 0 | `{c.short}` | {_md(c.subject)} | 1 | GOOD | good |"
    p = next(p for s in run.steps if s.a == 0 for k, p in s.probes.items() if k == key and p.b == i)
    return f"| {i} | `{c.short}` | {_md(c.subject)} | {_ratio(p)} | {p.verdict or '-'} | {p.call.value} |"


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def json_dict(run: BisectRun, pytest_args: Sequence[str]) -> dict[str, Any]:
    """The report as a JSON-ready dict (commits as full shas)."""
    commits = run.commits

    def probe(p: Probe) -> dict[str, Any]:
        out = {"a": commits[p.a].sha, "b": commits[p.b].sha, "call": p.call.value, "ratio": p.ratio,
               "ci": list(p.ci) if p.ci else None, "verdict": p.verdict, "note": p.note or None}
        if p.op_diff is not None:
            out["op_diff"] = p.op_diff.to_dict()
        elif p.why_missing:
            out["why_missing"] = p.why_missing
        return out

    def culprit(c: Culprit) -> dict[str, Any]:
        return {"first_bad": commits[c.first_bad].sha, "subject": commits[c.first_bad].subject,
                "last_good": commits[c.last_good].sha, "reference": commits[c.reference].sha,
                "single": c.single, "step": probe(c.step), "skipped": [commits[i].sha for i in c.skipped],
                "reproduce": reproduce_command(commits[c.first_bad], commits[c.last_good], pytest_args)}

    return {
        "good": commits[0].sha, "bad": commits[-1].sha,
        "commits": [{"sha": c.sha, "subject": c.subject} for c in commits],
        "benchmarks": {key: {"status": o.status, "culprits": [culprit(c) for c in o.culprits],
                             "unresolved": [commits[i].sha for i in o.unresolved] if o.unresolved else None,
                             "probes": [probe(p) for p in o.probes]}
                       for key, o in run.outcomes.items()},
        "steps": len(run.steps), "seconds": round(run.seconds, 1), "notes": run.notes,
    }
