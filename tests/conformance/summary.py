#!/usr/bin/env python3
"""The summary of a conformance run (scripts/conformance): JUnit files in, Markdown out.

Counts every [Conformance] spec of specs.txt once: passed, failed (with its first error line),
skipped (by the suite itself, e.g. a feature the cluster lacks) or not run (filtered out by
--focus/--skip, or the run stopped before it). Phase wall times come from phases.tsv.
"""
import argparse
import datetime
import glob
import os
import subprocess
import sys
import xml.etree.ElementTree as ET


def first_line(text):
    for line in (text or "").splitlines():
        line = line.strip().removeprefix("[FAILED]").strip()
        if line:
            return line[:300]
    return "(no message)"


def read_junit(results, names):
    """name -> (status, message, seconds) over every JUnit file under results: the suite's own
    (--report-dir) and ginkgo's merged one, whose names end in the spec's labels."""
    out = {}
    for path in sorted(glob.glob(os.path.join(results, "**", "junit*.xml"), recursive=True)):
        try:
            tree = ET.parse(path)
        except ET.ParseError as e:
            print(f"summary: {path}: {e}", file=sys.stderr)
            continue
        for case in tree.iter("testcase"):
            name = case.get("name", "").removeprefix("[It] ")
            if name not in names and name.endswith("]") and " [" in name:
                name = name[: name.rindex(" [")]  # ginkgo's " [label, label]"
            seconds = float(case.get("time") or 0)
            failure = case.find("failure")
            if failure is None:
                failure = case.find("error")
            if failure is not None:
                status, msg = "failed", first_line(failure.get("message") or failure.text)
            elif case.find("skipped") is not None or case.get("status") in ("skipped", "pending"):
                skipped = case.find("skipped")
                message = skipped.get("message") if skipped is not None else ""
                if message in ("skipped", ""):
                    continue  # filtered out by --focus/--skip: not run
                status, msg = "skipped", first_line(message)
            else:
                status, msg = "passed", ""
            # A spec run in both phases (it cannot be) or retried: a real result beats a skip.
            if name not in out or out[name][0] == "skipped":
                out[name] = (status, msg, seconds)
    return out


def git(*args):
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--results", required=True)
    p.add_argument("--specs", required=True)
    p.add_argument("--phases", required=True)
    p.add_argument("--focus", default="")
    p.add_argument("--skip", default="")
    p.add_argument("--crashers", default="", help="the part of --skip the script adds itself")
    p.add_argument("--procs", default="")
    p.add_argument("--nodes", default="")
    p.add_argument("--docs", action="store_true", help="the docs/conformance.md form: every spec listed")
    p.add_argument("--check", action="store_true", help="exit 1 unless every spec of --specs passed")
    a = p.parse_args()

    specs = [s.strip() for s in open(a.specs) if s.strip() and not s.startswith("#")]
    got = read_junit(a.results, set(specs))
    if a.check:
        bad = [(s, got.get(s, ("not run", ""))) for s in specs if got.get(s, ("not run",))[0] != "passed"]
        for spec, (status, msg, *_) in bad:
            print(f"{status}: {spec}" + (f" - {msg}" if msg else ""))
        print(f"{len(specs) - len(bad)} of {len(specs)} specs of the subset passed")
        sys.exit(1 if bad else 0)
    rows = []
    for spec in specs:
        status, msg, seconds = got.get(spec, ("not run", "", 0.0))
        rows.append((spec, status, msg, seconds))
    count = lambda s: sum(1 for r in rows if r[1] == s)
    passed, failed, skipped, not_run = count("passed"), count("failed"), count("skipped"), count("not run")
    phases = [line.rstrip("\n").split("\t") for line in open(a.phases) if line.strip()]
    total_s = sum(int(s) for _, s in phases)

    w = sys.stdout.write
    w("# Conformance\n\n" if a.docs else "# Conformance run\n\n")
    if a.docs:
        w("The latest whole run of the Kubernetes conformance suite against kaji, written by\n"
          "`scripts/conformance --docs` (do not edit it by hand; rerun it). Partial runs made since,\n"
          "by hand, go under \"Since the whole run\" at the end, which a new whole run replaces.\n\n")
    w(f"- date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}\n")
    w(f"- kaji commit: `{git('rev-parse', '--short', 'HEAD')}`"
      f"{' (with uncommitted changes)' if git('status', '--porcelain', '--untracked-files=no') else ''}\n")
    w("- suite: e2e.test v1.37.2 (tests/conformance), "
      f"{len(specs)} [Conformance] specs ({sum('[Serial]' in s for s in specs)} [Serial])\n")
    w(f"- cluster: `kaji lab up --nodes {a.nodes}`; parallel phase on {a.procs} ginkgo processes, then serial\n")
    if a.crashers:
        w(f"- skipped by scripts/conformance because they crash their ginkgo process on kaji: `{a.crashers}`\n")
    user_skip = a.skip.removesuffix(a.crashers).rstrip("|") if a.crashers else a.skip
    if a.focus != r"\[Conformance\]" or user_skip:
        focus = a.focus if len(a.focus) <= 160 else a.focus[:160] + "..."
        w(f"- focus `{focus}`, skip `{user_skip or '-'}` (a partial run)\n")
    w(f"\n**{passed} passed, {failed} failed, {skipped} skipped, {not_run} not run** "
      f"of {len(specs)}.\n\n")
    w("| phase | wall time |\n|---|---|\n")
    for name, s in phases:
        w(f"| {name} | {int(s) // 60} min {int(s) % 60} s |\n")
    w(f"| total | {total_s // 60} min {total_s % 60} s |\n\n")
    w("## Failed\n\n")
    for spec, status, msg, _ in rows:
        if status == "failed":
            w(f"- {spec}\n  - `{msg.replace('`', '')}`\n")
    if failed == 0:
        w("none\n")
    if skipped:
        w("\n## Skipped by the suite\n\n")
        for spec, status, msg, _ in rows:
            if status == "skipped":
                w(f"- {spec} — {msg}\n")
    if a.docs:
        w("\n## Every spec\n\n| spec | result | seconds |\n|---|---|---|\n")
        for spec, status, _, seconds in rows:
            w(f"| {spec.replace('|', '/')} | {status} | {seconds:.0f} |\n")


if __name__ == "__main__":
    main()
