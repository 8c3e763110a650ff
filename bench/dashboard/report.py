#!/usr/bin/env python3
"""bench/dashboard/report.py: the dashboard benchmark's arithmetic (run.sh calls it).

  report.py join DB < browser-lines    the browser's "change" lines, each with the persist
                                       time of its event (sandboxd's store: events.time, ms;
                                       the API's time field is whole seconds) -> "lat" lines
  report.py summary RAW                the summary of a results file

Standard library only.
"""
import math
import re
import sqlite3
import statistics
import sys


def words(line):
    return dict(re.findall(r"(\w+)=(\S+)", line))


def pct(xs, p):
    """The p-th percentile, nearest rank."""
    xs = sorted(xs)
    if not xs:
        return float("nan")
    return xs[max(0, math.ceil(p / 100 * len(xs)) - 1)]


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def join(db):
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    for line in sys.stdin:
        if not line.startswith("change "):
            continue
        w = words(line)
        row = con.execute("SELECT time, json_extract(data, '$.to') FROM events WHERE seq = ?",
                          (int(w["seq"]),)).fetchone()
        if not row or row[1] != w["to"]:
            sys.exit(f"event {w['seq']} is not in the store as a change to {w['to']}")
        t = row[0]
        print(f"lat i={w['i']} action={w['action']} seq={w['seq']} persisted={t}",
              f"dom_ms={float(w['dom']) - t:.2f} frame_ms={float(w['frame']) - t:.2f}",
              f"es_ms={float(w['es']) - t:.2f} es_alone_ms={float(w['es_alone']) - t:.2f}",
              f"api_ms={int(w['answered']) - t}")


def summary(path):
    rows = {kind: [] for kind in ("mem", "fanout", "fanout0", "closed", "nav", "lat")}
    with open(path) as f:
        for line in f:
            kind = line.split(" ", 1)[0]
            if kind in rows:
                rows[kind].append(words(line))
    sub, fan, fan0, closed, nav, lat = rows.values()

    if sub:
        n = int(sub[0].get("n", 1000))
        print(f"Idle connections: memory per connection (RSS / anonymous memory delta of "
              f"sandboxd, KiB), {n} at once:\n")
        print("| transport | round | order | event-stream subscriber | idle keep-alive "
              "| subscriber / idle | per subscriber, after the fan-out's events |")
        print("|---|---|---|---|---|---|---|")
        per = {}
        runs = {}
        for w in sub:
            runs.setdefault((w["transport"], w["round"]), []).append(w)
        for (tr, rd), ws in sorted(runs.items()):
            # the deltas of each phase against the one before it
            prev = None
            d = {}
            order = []
            for w in ws:
                if w["phase"] == "after":
                    # the subscribers once they had the fan-out's events
                    d["after"] = ((int(w["rss"]) - int(prev["rss"])) / n,)
                    continue
                if prev is not None:
                    d[w["phase"]] = ((int(w["rss"]) - int(prev["rss"])) / n,
                                     (int(w["anon"]) - int(prev["anon"])) / n,
                                     (int(w["slab"]) - int(prev["slab"])) / n)
                    order.append(w["phase"])
                prev = w
            if "sse" not in d or "idle" not in d:
                continue
            after = d.get("after", (float("nan"),))[0]
            per.setdefault(tr, []).append((d["sse"], d["idle"], after))
            print(f"| {tr} | {rd} | {' then '.join(order)} | {d['sse'][0]:.2f} / "
                  f"{d['sse'][1]:.2f} | {d['idle'][0]:.2f} / {d['idle'][1]:.2f} | "
                  f"{d['sse'][0] / d['idle'][0]:.2f} | +{after:.2f} |")
        print()
        for tr, xs in sorted(per.items()):
            s = med([x[0][0] for x in xs])
            i = med([x[1][0] for x in xs])
            a = med([x[2] for x in xs])
            print(f"{tr}: median subscriber {s:.2f} KiB, idle connection {i:.2f} KiB, "
                  f"ratio {s / i:.2f}; once the subscribers had events {s + a:.2f} KiB each "
                  f"(+{a:.2f}); goal under 16 KiB each: "
                  f"{'met' if s + a < 16 else 'NOT met'}; the kernel's slab grew by "
                  f"{med([x[0][2] for x in xs]):.1f} and {med([x[1][2] for x in xs]):.1f} KiB "
                  f"per connection (machine-wide, both ends)")
        print()
    if fan:
        by = {}
        for w in fan:
            by.setdefault(w["transport"], []).append(w)
        base = {}
        for w in fan0:
            base.setdefault(w["transport"], []).append(float(w["sandboxd_cpu_us"]))
        print("Fan-out: each change (a stop or a start: 2 state events) to every subscriber:\n")
        for tr, ws in sorted(by.items()):
            ok = sum(1 for w in ws if w["delivered"] == w["expected"])
            dl = sum(int(w["delivered"]) for w in ws)
            ex = sum(int(w["expected"]) for w in ws)
            cpu = med([float(w["sandboxd_cpu_us"]) for w in ws])
            cpu0 = med(base.get(tr, []))
            ev = int(ws[0]["events"])
            subs = int(ws[0]["expected"]) // ev
            last = [float(w["persisted_to_last_ms"]) for w in ws]
            first = [float(w["persisted_to_first_ms"]) for w in ws]
            print(f"{tr}: {ok} of {len(ws)} changes reached all {subs} subscribers "
                  f"({dl} of {ex} deliveries); sandboxd's CPU per change {cpu / 1000:.2f} ms "
                  f"with {subs} subscribers, {cpu0 / 1000:.2f} ms with none: "
                  f"{(cpu - cpu0) / ev / 1000:.2f} ms of fan-out per event, "
                  f"{(cpu - cpu0) / ev / subs:.2f} us per subscriber; persisted to the first "
                  f"subscriber's receipt {med(first):.1f} ms, to the last {med(last):.1f} ms "
                  f"(median; the client reads 1000 sockets in one Python thread)")
        bad = [w for w in closed if w["n"] != "0"]
        print(f"connections sandboxd closed before the end: "
              f"{', '.join(w['transport'] + ' ' + w['kind'] + ' ' + w['n'] for w in bad) or 'none'}")
        print()
    if nav:
        print("The list with 100 sandboxes in headless Chromium, ms from page.goto to the rows "
              "in the DOM (median, min-max; in the page: from the navigation's start); "
              "same: one page of one context, fresh: a new context each time:\n")
        print("| context | list | baseline | list / baseline | list, in the page | baseline, "
              "in the page |")
        print("|---|---|---|---|---|---|")
        for ctx in ("same", "fresh"):
            l = [float(w["ms"]) for w in nav if w["ctx"] == ctx and w["what"] == "list"]
            b = [float(w["ms"]) for w in nav if w["ctx"] == ctx and w["what"] == "baseline"]
            li = [float(w["in_page_ms"]) for w in nav
                  if w["ctx"] == ctx and w["what"] == "list" and w["in_page_ms"] != "na"]
            bi = [float(w["in_page_ms"]) for w in nav
                  if w["ctx"] == ctx and w["what"] == "baseline" and w["in_page_ms"] != "na"]
            if not l:
                continue
            print(f"| {ctx} | {med(l):.0f} ({min(l):.0f}-{max(l):.0f}) | {med(b):.0f} "
                  f"({min(b):.0f}-{max(b):.0f}) | {med(l) / med(b):.1f} | {med(li):.0f} | "
                  f"{med(bi):.0f} |")
        print()
        for ctx in ("same", "fresh"):
            ws = [w for w in nav if w["ctx"] == ctx and w["what"] == "list"
                  and w.get("list_ms", "na") != "na"]
            if not ws:
                continue
            m = {k: med([float(w[k]) for w in ws if w.get(k, "na") != "na"])
                 for k in ("doc_ms", "dcl_ms", "whoami_ms", "list_ms", "in_page_ms", "kib")}
            print(f"{ctx}, in the page (median ms from the navigation's start): document "
                  f"{m['doc_ms']:.0f}, scripts run (DOMContentLoaded) {m['dcl_ms']:.0f}, "
                  f"whoami sent {m['whoami_ms']:.0f}, list answered {m['list_ms']:.0f}, "
                  f"the rows in the DOM {m['in_page_ms']:.0f}; {m['kib']:.0f} KiB transferred")
        worst = max(med([float(w["ms"]) for w in nav if w["ctx"] == c and w["what"] == "list"])
                    for c in ("same", "fresh") if any(w["ctx"] == c for w in nav))
        print(f"\ngoal under 1 s from navigation: {'met' if worst < 1000 else 'NOT met'} "
              f"(slowest median {worst:.0f} ms)\n")
    if lat:
        print(f"A state change to the open list, ms from persisted (sandboxd's store) to seen, "
              f"{len(lat)} changes:\n")
        print("| | median | p95 | max |")
        print("|---|---|---|---|")
        for key, text in (("es_alone_ms", "bare EventSource, a page of its own (baseline)"),
                          ("es_ms", "bare EventSource in the list's page"),
                          ("dom_ms", "the row's state text in the DOM"),
                          ("frame_ms", "the next animation frame after it"),
                          ("api_ms", "the API's answer to the change (for reference)")):
            xs = [float(w[key]) for w in lat]
            print(f"| {text} | {med(xs):.1f} | {pct(xs, 95):.1f} | {max(xs):.1f} |")
        d = [float(w["dom_ms"]) for w in lat]
        e = [float(w["es_alone_ms"]) for w in lat]
        print(f"\npage rendering over the bare stream: median "
              f"{med([a - b for a, b in zip(d, e)]):.1f} ms; goal within 100 ms: "
              f"{'met' if pct(d, 95) < 100 else 'NOT met'} (p95 {pct(d, 95):.1f} ms)")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "join":
        join(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "summary":
        summary(sys.argv[2])
    else:
        sys.exit("usage: report.py join DB < lines | report.py summary RAW")
