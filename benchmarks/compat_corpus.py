"""A compatibility corpus (issue 46): public projects' pytest-benchmark suites, unmodified, through the
plugin's drop-in ``benchmark`` fixture; each smoke-run and recorded once.

For each suite (a folder holding a project's source, never this repository's): a copy without git
history or stored baselines, then three runs of ``python -m pytest <args>``, one process at a time:

1. **smoke**: ``-p no:benchmark --junitxml=smoke.xml`` — pytest-benchmark unloaded, so the plugin's
   ``benchmark`` fixture stands in; a plain run is smoke mode (each benchmark called once, as a test);
2. **pytest-benchmark**: ``-p no:gpuperf`` — pytest-benchmark's own default run, for its wall time;
3. **record**: ``-p no:benchmark --gpuperf-update-baselines --gpuperf-json=record.json
   --junitxml=record.xml`` plus ``--record-args`` — measured and baselines written.

Counts come from the JUnit XML and the JSON report: collected, passed, failed, errored, skipped (with
the skip reasons), benchmarks recorded, baseline files written and wall seconds; the first lines of
each failure's message are kept. Prints a Markdown table and writes ``summary.json`` under ``--out``.

    python benchmarks/compat_corpus.py --python /work/study/venv/bin/python \\
        --manifest corpus.json --out /tmp/corpus [--plugin-path DIR] [--record-args "-o gpuperf_max_processes=3"]

    python benchmarks/compat_corpus.py --python ... --out /tmp/corpus \\
        --suite cattrs=/src/cattrs --args cattrs="bench" --meta cattrs=python-attrs/cattrs@82b02c0

    python benchmarks/compat_corpus.py table /tmp/corpus/summary.json   # the table again

The manifest is JSON (``.json``) or TOML (``.toml``): ``{"suites": [{"name", "dir", "args", "repo",
"commit", "torch", "selection", "env", "cannot_run"}]}`` (``args`` a string or a list; ``env`` added to
the environment of its runs; ``cannot_run``: test id or pattern -> why it cannot run on a CPU, shown in
the table). ``--only NAME`` (repeated) runs some of the manifest's suites.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shlex
import shutil
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from real_suite_study import run  # noqa: E402  (the same subprocess runner as the study of issue 31)


def junit_cases(path: Path) -> dict[str, dict[str, str]]:
    """Test id -> ``{"outcome": passed/failed/error/skipped, "message": ...}`` from a JUnit XML file."""
    if not path.exists():
        return {}
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                message = child.get("message") or (child.text or "")
                if outcome != "skipped":
                    message = (child.text or message)
                break
        # a teardown error after a pass is a second <error> child; the worst outcome wins
        if outcome == "passed" or outcome == "skipped":
            if any(c.tag == "error" for c in case):
                outcome = "error"
                message = next(c.text or c.get("message") or "" for c in case if c.tag == "error")
        out[name] = {"outcome": outcome, "message": message.strip()}
    return out


def counts(cases: dict[str, dict[str, str]]) -> dict[str, Any]:
    c = {k: sum(v["outcome"] == k for v in cases.values()) for k in ("passed", "failed", "error", "skipped")}
    c["collected"] = len(cases)
    reasons: dict[str, int] = {}
    for v in cases.values():
        if v["outcome"] == "skipped":
            reasons[v["message"][:200]] = reasons.get(v["message"][:200], 0) + 1
    c["skip_reasons"] = reasons
    c["failures"] = {k: v["message"][-1500:] for k, v in cases.items() if v["outcome"] in ("failed", "error")}
    return c


def _norm(test_id: str) -> str:
    """A JUnit ``classname::name`` and a report's node id, made comparable (``a/b.py::C::t`` = ``a.b.C::t``)."""
    return test_id.replace(".py::", ".").replace("/", ".").replace("::", ".")


def not_recorded(cases: dict[str, dict[str, str]], recorded: dict[str, Any]) -> list[str]:
    """Tests that passed in the recording run without a benchmark in its report (plain tests of the suite)."""
    keys = {_norm(k) for k in recorded}
    return sorted(k for k, v in cases.items() if v["outcome"] == "passed" and _norm(k) not in keys)


def baseline_files(tree: Path) -> int:
    """Baseline files ``--gpuperf-update-baselines`` wrote under the copy (``baselines/`` folders)."""
    return sum(1 for p in tree.rglob("*") if p.is_file() and "baselines" in p.relative_to(tree).parts)


def run_suite(suite: dict[str, Any], opts: argparse.Namespace) -> dict[str, Any]:
    name = suite["name"]
    args = suite["args"] if isinstance(suite["args"], list) else shlex.split(suite["args"])
    work = Path(opts.out) / name
    if work.exists():
        shutil.rmtree(work)
    tree = work / "tree"
    shutil.copytree(suite["dir"], tree, symlinks=True,
                    ignore=shutil.ignore_patterns(".git", "__pycache__", ".gpuperf", "baselines", ".benchmarks"))
    env = dict(os.environ, GPUPERF_HOST_LOAD=os.environ.get("GPUPERF_HOST_LOAD", "1"), **suite.get("env", {}))
    if opts.plugin_path:
        env["PYTHONPATH"] = os.pathsep.join([opts.plugin_path, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    base = [*args, "-p", "no:cacheprovider"]
    result: dict[str, Any] = {k: suite.get(k) for k in ("name", "repo", "commit", "torch", "selection", "cannot_run")}
    result["args"] = args
    result["record_args"] = shlex.split(opts.record_args)
    result["commands"] = {}

    def go(kind: str, extra: list[str]) -> tuple[int, float]:
        cmd = [*base, *extra]
        result["commands"][kind] = "python -m pytest " + shlex.join(cmd).replace(str(work), "$OUT")
        rc, wall = run(opts.python, tree, cmd, env, work / f"{kind}.log")
        return rc, round(wall, 1)

    rc, wall = go("smoke", ["-p", "no:benchmark", f"--junitxml={work}/smoke.xml"])
    result["smoke"] = {"exit": rc, "wall_s": wall, **counts(junit_cases(work / "smoke.xml"))}
    s = result["smoke"]
    print(f"[{name}] smoke: exit {rc}, {s['collected']} collected, {s['passed']} passed, {s['failed']} failed, "
          f"{s['error']} errors, {s['skipped']} skipped, {wall:.0f} s", flush=True)

    if not opts.no_pytest_benchmark:
        rc, wall = go("pytest-benchmark", ["-p", "no:gpuperf", f"--junitxml={work}/pytest-benchmark.xml"])
        result["pytest_benchmark"] = {"exit": rc, "wall_s": wall,
                                      **counts(junit_cases(work / "pytest-benchmark.xml"))}
        print(f"[{name}] pytest-benchmark's default run: exit {rc}, {wall:.0f} s", flush=True)

    rc, wall = go("record", ["-p", "no:benchmark", "--gpuperf-update-baselines", f"--gpuperf-json={work}/record.json",
                             f"--junitxml={work}/record.xml", *shlex.split(opts.record_args)])
    report = work / "record.json"
    recorded = json.loads(report.read_text()).get("benchmarks", {}) if report.exists() else {}
    cases = junit_cases(work / "record.xml")
    result["record"] = {"exit": rc, "wall_s": wall, **counts(cases), "recorded": len(recorded),
                        "passed_not_recorded": not_recorded(cases, recorded), "baseline_files": baseline_files(tree)}
    r = result["record"]
    print(f"[{name}] record: exit {rc}, {r['recorded']} recorded, {r['baseline_files']} baseline files, "
          f"{r['failed']} failed, {r['error']} errors, {wall:.0f} s", flush=True)
    if opts.compare:  # an unchanged rerun against what was just recorded (issue 45: its cost and verdicts)
        rc, wall = go("compare", ["-p", "no:benchmark", "--gpuperf", "--gpuperf-no-ab-confirm",
                                  f"--gpuperf-json={work}/compare.json", f"--junitxml={work}/compare.xml",
                                  *shlex.split(opts.record_args)])
        report = work / "compare.json"
        got = json.loads(report.read_text()).get("benchmarks", {}) if report.exists() else {}
        verdicts = dict(collections.Counter(str(b.get("verdict")) for b in got.values()))
        result["compare"] = {"exit": rc, "wall_s": wall, **counts(junit_cases(work / "compare.xml")),
                             "verdicts": verdicts}
        print(f"[{name}] compare (unchanged rerun): exit {rc}, verdicts {verdicts}, {wall:.0f} s", flush=True)
    return result


def table(results: list[dict[str, Any]]) -> str:
    rows = ["| project | repo@commit | torch | selection / args | collected | smoke passed / failed / skipped "
            "| recorded | not run (why) | pytest-benchmark s | record s |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        s, rec, pb = r["smoke"], r["record"], r.get("pytest_benchmark") or {}
        why = [f"{n}: {reason}" for reason, n in s["skip_reasons"].items()]
        why += [f"{k}: {v}" for k, v in (r.get("cannot_run") or {}).items()]
        if rec.get("passed_not_recorded"):
            why.append(f"{len(rec['passed_not_recorded'])} passed without a benchmark (no `benchmark` call)")
        bad = s["failed"] + s["error"]
        rows.append(" | ".join([
            f"| {r['name']}", f"{r.get('repo')}@{(r.get('commit') or '')[:7]}", "yes" if r.get("torch") else "no",
            r.get("selection") or f"`{shlex.join(r['args'])}`", str(s["collected"]),
            f"{s['passed']} / {bad} / {s['skipped']}", str(rec["recorded"]), "; ".join(why) or "—",
            f"{pb.get('wall_s', '—')}", f"{rec['wall_s']} |"]))
    return "\n".join(rows)


def load_manifest(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".toml":
        import tomllib

        data = tomllib.loads(path.read_text())
    else:
        data = json.loads(path.read_text())
    return data["suites"]


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["table"]:  # the table of a finished corpus, its plain tests counted again from the files
        summary = Path(argv[1])
        results = json.loads(summary.read_text())
        for r in results:
            work = summary.parent / r["name"]
            if (work / "record.json").exists():
                recorded = json.loads((work / "record.json").read_text()).get("benchmarks", {})
                r["record"]["passed_not_recorded"] = not_recorded(junit_cases(work / "record.xml"), recorded)
        summary.write_text(json.dumps(results, indent=1))
        print(table(results))
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--python", required=True, help="the interpreter of the study environment")
    p.add_argument("--manifest", help="JSON or TOML: {suites: [{name, dir, args, repo, commit, torch, ...}]}")
    p.add_argument("--suite", action="append", default=[], help="NAME=DIR (a suite's folder; copied, no git)")
    p.add_argument("--args", action="append", default=[], help="NAME=ARGS (pytest arguments of that suite)")
    p.add_argument("--meta", action="append", default=[], help="NAME=owner/repo@commit")
    p.add_argument("--only", action="append", default=[], help="run only this suite of the manifest (repeatable)")
    p.add_argument("--out", required=True)
    p.add_argument("--plugin-path", default=None, help="another checkout of the plugin, first on PYTHONPATH")
    p.add_argument("--record-args", default="", help="pytest arguments of every recording run")
    p.add_argument("--no-pytest-benchmark", action="store_true", help="skip pytest-benchmark's reference run")
    p.add_argument("--compare", action="store_true",
                   help="after recording, an unchanged --gpuperf rerun (no A/B): its time and verdicts")
    opts = p.parse_args(argv)
    suites = load_manifest(Path(opts.manifest)) if opts.manifest else []
    args, meta = dict(a.split("=", 1) for a in opts.args), dict(m.split("=", 1) for m in opts.meta)
    for spec in opts.suite:
        name, source = spec.split("=", 1)
        repo, _, commit = meta.get(name, "").partition("@")
        suites.append({"name": name, "dir": source, "args": args.get(name, ""), "repo": repo, "commit": commit})
    if opts.only:
        suites = [s for s in suites if s["name"] in opts.only]
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = out / "summary.json"
    results = json.loads(summary.read_text()) if summary.exists() else []
    for suite in suites:
        res = run_suite(suite, opts)
        results = [r for r in results if r["name"] != res["name"]] + [res]
        summary.write_text(json.dumps(results, indent=1))  # after each suite, so a long corpus can be resumed
    print(table(results))
    print(f"summary: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
