"""The campaign index of 300 runs in headless Chromium: how long it takes to load and how much it weighs.

Builds a campaign of `--runs` records (every kind in every state: tests/support/campaign.py), renders
the index with the same pure functions the writer calls, and opens it `--rounds` times in headless
Chromium (/usr/bin/chromium). Load time is read by the page itself: a copy of the index carries one
extra script that, at the `load` event, writes `performance.now()` (milliseconds since navigation
began: parsing, styles, layout and the inline script included) and the document's scroll width into
the DOM, which Chromium's --dump-dom prints. Target: < 1 s and < 2 MB at 300 runs.

`--shots DIR` also writes the screenshots kept in docs/ (`make campaign-shots`): the index
(`campaign.png`) and a blocked run's page (`campaign-run.png`), 1,400 px wide.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from rlkeep.campaign import index_entry, index_from_entries, load_campaign, run_html  # noqa: E402
from tests.support.campaign import CHROMIUM_FLAGS, campaign_root, chromium_path  # noqa: E402

PROBE = ("<script>addEventListener('load',function(){var p=document.createElement('pre');p.id='bench-probe';"
         "p.textContent=JSON.stringify({load_ms:performance.now(),scroll_width:document.documentElement.scrollWidth,"
         "client_width:document.documentElement.clientWidth});document.body.appendChild(p);});</script>")


def chromium(page: Path, profile: Path, *extra: str) -> str:
    result = subprocess.run([chromium_path(), *CHROMIUM_FLAGS, "--hide-scrollbars", f"--user-data-dir={profile}",
                             *extra, page.resolve().as_uri()], capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise SystemExit(f"chromium failed on {page}: {result.stderr[-2000:]}")
    return result.stdout


def build(data_root: Path, runs: int) -> tuple[Path, Path, float]:
    """The index (and a blocked rl run's page) of a fresh campaign; the seconds the index took."""
    made = campaign_root(data_root, runs)
    out = data_root / "campaign"
    out.mkdir()
    started = time.perf_counter()
    views = load_campaign(data_root, Path("records"))
    entries = [index_entry(view) for view in views]
    index = out / "index.html"
    index.write_text(index_from_entries(entries, generated_at="benchmark", revision="benchmark"))
    built = time.perf_counter() - started
    blocked = next(v for v in views if made[v.job] == ("rl", "blocked"))
    run_page = out / f"{blocked.job}.html"
    run_page.write_text(run_html(blocked, data_root / blocked.job, generated_at="benchmark", revision="benchmark",
                                 cache_dir=out / ".plots"))
    return index, run_page, built


def probe_once(page: Path, profile: Path) -> dict:
    """The probe's figures, and the CPU seconds Chromium's processes spent (they are all reaped by the
    time Chromium exits, so RUSAGE_CHILDREN counts them): a figure the machine's load moves less."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    dom = chromium(page, profile, "--window-size=1400,1000", "--dump-dom")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    found = re.search(r'<pre id="bench-probe">([^<]+)</pre>', dom)
    if not found:
        raise SystemExit(f"the probe did not run in {page}: no load figure")
    figures = json.loads(found[1].replace("&quot;", '"'))
    figures["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return figures


def measure(index: Path, rounds: int, work: Path) -> dict:
    """Each round opens a one-paragraph page (the browser's own floor, which swings with the machine's
    load) and then the index, each in a fresh profile."""
    probed = index.with_name("index.probe.html")
    probed.write_text(index.read_text().replace("</body>", PROBE + "</body>"))
    blank = index.with_name("blank.probe.html")
    blank.write_text(f"<!DOCTYPE html><html><body><p>one paragraph</p>{PROBE}</body></html>")
    loads, floors, extra_cpu, widths = [], [], [], set()
    for number in range(rounds):
        floor = probe_once(blank, work / f"profile-blank-{number}")
        figures = probe_once(probed, work / f"profile-{number}")
        floors.append(floor["load_ms"])
        loads.append(figures["load_ms"])
        extra_cpu.append((figures["cpu_s"] - floor["cpu_s"]) * 1000)
        widths.add((figures["scroll_width"], figures["client_width"]))
    elements = len(re.findall(r"<[a-zA-Z]", index.read_text()))
    return {"load_ms_median": round(statistics.median(loads), 1), "load_ms_max": round(max(loads), 1),
            "load_ms": [round(x, 1) for x in loads], "blank_page_ms": [round(x, 1) for x in floors],
            "cpu_ms_over_blank_median": round(statistics.median(extra_cpu)),
            "elements": elements, "scroll_width_vs_client": sorted(widths)}


def shots(index: Path, run_page: Path, out_dir: Path, work: Path) -> list[str]:
    out_dir.mkdir(parents=True, exist_ok=True)
    made = []
    for page, name, height in ((index, "campaign.png", 2100), (run_page, "campaign-run.png", 1500)):
        chromium(page, work / f"profile-{name}", f"--screenshot={out_dir / name}", f"--window-size=1400,{height}")
        made.append(str(out_dir / name))
    return made


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="3 rounds")
    parser.add_argument("--shots", type=Path, help="write the screenshots (campaign.png, campaign-run.png) here")
    parser.add_argument("--out", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args()
    if chromium_path() is None:
        raise SystemExit("chromium is not installed (apt-get install chromium)")
    with tempfile.TemporaryDirectory(prefix="rlkeep-bench-campaign-") as tmp:
        work = Path(tmp)
        index, run_page, built = build(work / "data", args.runs)
        figures = {"bench": "bench_campaign", "runs": args.runs, "index_bytes": index.stat().st_size,
                   "load_average": os.getloadavg()[0],
                   "index_build_s": round(built, 2), **measure(index, 3 if args.quick else args.rounds, work)}
        if args.shots:
            figures["screenshots"] = [Path(p).name for p in shots(index, run_page, args.shots, work)]
    no_sideways = all(scroll <= client for scroll, client in figures["scroll_width_vs_client"])
    figures["target"] = "index of 300 runs: load < 1000 ms in headless Chromium, < 2 MB, no sideways scroll at 1,400 px"
    figures["target_met"] = figures["load_ms_median"] < 1000 and figures["index_bytes"] < 2_000_000 and no_sideways
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
