"""`python -m benchmarks [--stackcollapse PATH] [name ...]`: run the benchmarks side by side, one JSON
object per benchmark on stdout, then a summary table; results and the table go to benchmarks/results/.
--stackcollapse PATH (or NODESLEUTH_STACKCOLLAPSE=PATH) gives perf_parse FlameGraph's stackcollapse-perf.pl
to time too: it is in none of this machine's registries and is not kept in this repository."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import sys
import time

ALL = ["recorder_overhead", "store_read", "cut_size", "perf_parse", "profile_query", "profile_cost", "zombie_cost",
       "fleet", "web_timeline", "scale", "kmsg_flood", "pod_resources", "explain_corpus", "spawns_cost", "kernel_logs"]


def rows(r: dict) -> list[tuple[str, str]]:
    b = r["benchmark"]
    if "skipped" in r:
        return [(b, f"skipped: {r['skipped']}")]
    if b == "recorder_overhead":
        f, runs = r["runs"]["nodesleuth_fixture"], r["runs"]
        c = runs.get("nodesleuth_fixture_1h", f)
        size = r.get("mb_per_day", {})
        out = [("recorder, 96-CPU/1,000-proc/70k-memcg fixture, 1 Hz",
                f"{c['steady_cpu_pct_of_core']}% of a core, {c['max_rss_mb']} MB RSS, {f['steady_mb_per_day']} MB/day"),
               ("bytes/day at 1 s: nodesleuth fixture (before) / live host; sadc -S XALL, atop -w (live host)",
                f"{size.get('nodesleuth_fixture')} ({size.get('baseline_fixture', '-')}) / {size.get('nodesleuth_live')} MB; "
                f"{size.get('sadc_live')}, {size.get('atop_live')} MB"),
               ("recorder CPU s per hour (fixture / live host)",
                f"{round(f['steady_cpu_pct_of_core'] * 36, 1)} / {round(runs['nodesleuth_live']['steady_cpu_pct_of_core'] * 36, 1)}")]
        for k in ("sadc_live", "atop_live", "mpstat_live"):
            if k in runs:
                out.append((f"{k.replace('_live', '')} 1 (live host) CPU s per hour", str(runs[k]["cpu_s_per_hour"])))
        out += [(f"ratio {k}", str(v)) for k, v in r["ratios"].items() if "steady" in k]
        return out
    if b == "pod_resources":
        a, rec = r["at_96_cpus"], r["runs"]["recorder"]
        return [("DaemonSet recorder (--profile) in its own cgroup, this host",
                 f"{rec['cpu_pct_of_core']}% of a core, {rec['peak_mb']} MB peak; x{r['ratios']['recorder_cpu_vs_perf_record']} "
                 f"perf record's CPU, x{r['ratios']['recorder_cpu_vs_sadc']} sadc's"),
                ("DaemonSet recorder at 96 CPUs (derived)", f"{a.get('cpu_pct_96')}% of a core, {a.get('memory_peak_mb_96')} MB peak")]
    if b == "store_read":
        out = []
        for d, doc in r["stores"].items():
            for pos, x in doc["reads"].items():
                if "error" in x:
                    continue
                out.append((f"one second of a {d} store ({pos}): in process cold / warm, median; cli dump --at",
                            f"{x['dump_at_cold']['median_ms']} / {x['dump_at_warm']['median_ms']} ms; "
                            f"{x['cli_dump_at_warm']['wall_ms_median']} ms"))
        if r.get("sar"):
            out.append(("  sar -f one second of its 1 s daily file (end of day), cold / warm",
                        f"{r['sar']['end_of_day']['cold']['wall_ms_median']} / {r['sar']['end_of_day']['warm']['wall_ms_median']} ms"))
        return out
    if b == "cut_size":
        return [(f"cut of {int(r['window_s'] / 60)} min of the 96-CPU fixture recording",
                 f"{r['cut_mb']} MB ({r['cut_wall_s']} s; dump identical: {r['dump_identical']}); "
                 f"+{r['profile_mb_derived_worst_case'].get('total', '?')} MB profile (derived worst case)")]
    if b == "perf_parse":
        return [("perf script parse, samples/s", str(r["nodesleuth_parse"]["samples_per_s"])),
                ("  vs FlameScope heatmap pass", f"{r['ratios']['vs_flamescope_heatmap_pass']}x"),
                ("  vs FlameScope heatmap + flame graph", f"{r['ratios']['vs_flamescope_heatmap_plus_flamegraph']}x"),
                ("  vs stackcollapse-perf.pl's algorithm (Python re-implementation)",
                 f"{r['ratios']['vs_stackcollapse_perf_pl_reimplemented']}x"),
                ("  vs stackcollapse-perf.pl (real Perl script)",
                 f"{r['ratios']['vs_real_stackcollapse_perf_pl']}x" if "vs_real_stackcollapse_perf_pl" in r["ratios"]
                 else f"not timed: {r['stackcollapse_perf_pl_real_perl']['skipped']}")]
    if b == "profile_query":
        p = r["profile_hour"]
        out = [(f"profile of {p['cpus']} CPUs x {p['hz']} Hz, range query (after; before)", "")]
        for k in ("flame_1s", "flame_1s_cpu39", "flame_1h", "flame_1h_cpu39", "flame_1h_unaligned", "flame_1day",
                  "flame_1day_unaligned", "flame_1day_cpu39", "top_functions_1h", "top_functions_1day"):
            if k in r:
                out.append((f"  {k}", f"{r[k]['after_s']} s" + (f"; {r[k]['before_s']} s" if "before_s" in r[k] else "")))
        out += [(f"  {k}", f"{r[k]['seconds']} s") for k in ("heatmap_60s", "heatmap_60s_cpu39", "heatmap_1h_cpu39")]
        out.append(("  disk MB/day (synthetic worst case)", str(r["disk_mb_per_day_synthetic_worst_case"])))
        return out
    if b == "profile_cost":
        out = []
        names = ("perf_record_alone", "nodesleuth_perf_record_before", "nodesleuth_direct_after")
        for k in ("49hz", "replay_96cpu_rate"):
            x = r[k]
            out += [(f"profiling, {k}: steady CPU-s/min, perf record alone / before (chunked) / after (direct)",
                     " / ".join(str(x["runs"][n]["cpu_s_per_min"]) for n in names)),
                    (f"profiling, {k}: us per sample end to end incl. kernel sampling, same order",
                     " / ".join(str(x["runs"][n]["us_per_sample_end_to_end_incl_kernel_sampling"]) for n in names))]
        out.append(("profiling, 96-CPU node at 49 Hz projected, % of a core (perf alone / before / after)",
                    " / ".join(str(r["projection_96cpu_node_49hz_pct_of_core"][n]["incl_kernel_sampling"])
                               for n in names)))
        return out
    if b == "zombie_cost":
        c0, c1 = r["curve"][0], r["curve"][-1]
        return [("zombie cost on this kernel", f"{r['percpu_bytes_per_zombie']} B Percpu + {r['slab_bytes_per_zombie']} B "
                 f"Slab each; root memory.stat {c0['memory_stat_ms']} -> {c1['memory_stat_ms']} ms at "
                 f"{c0['zombies']} -> {c1['zombies']} zombies; reclaim {r['reclaim']['seconds']} s")]
    if b == "fleet":
        rows = [(f"fleet --prometheus, {x['hosts']} hosts", f"{x.get('fleet_s_median')} s end to end, "
                 f"{x.get('ratio_fleet_vs_curl')}x curl of its queries (found cause: {x.get('found_cause')})")
                for x in r["prometheus"]]
        if r.get("snapshots"):
            rows.append((f"fleet DIR, {r['snapshots']['hosts']} snapshots", f"{r['snapshots']['cli_s']} s end to end"))
        if r.get("direct"):
            x = r["direct"]
            rows.append((f"fleet URLs, {x['exporters']} exporters", f"{x['fleet_concurrent_s']} s concurrent, "
                         f"{x['fleet_sequential_s']} s one by one, curl --parallel {x['curl_parallel_s']} s; "
                         f"/snapshot cached {x['snapshot_cached_ms_median']} ms"))
        return rows
    if b == "web_timeline":
        return [(f"web day timeline, {r['cpus']} CPUs x 24 h", f"{r['render_seconds']} s server+browser "
                 f"({r['api_seconds']} s API, {r['bytes']} bytes)")]
    if b == "scale":
        ex = r["exponents"]
        return [("scale exponents (record per tick ~ CPUs / procs / memcgs)",
                 " / ".join(str(ex.get(f"record_tick_ms~{d}", {}).get("exponent")) for d in ("cpus", "procs", "memcgs"))),
                ("scale: faster than linear (global fit / between neighbours)",
                 f"{', '.join(r['superlinear']) or 'nothing'} / {', '.join(r.get('superlinear_between_neighbours', [])) or 'nothing'}"),
                ("explain over a day of 96 CPUs", f"{r['explain_day_96cpu_wall_s']} s wall")]
    if b == "kmsg_flood":
        d, f = r["devkmsg"], r["file"]
        return [("kernel-log flood, 60,000 lines in 3 s on /dev/kmsg: read / dropped (record, exporter, check)",
                 " ; ".join(f"{d[k]['read']:.0f} / {d[k]['dropped']:.0f}" for k in ("record", "exporter", "check"))
                 + f"; dmesg -w saw {d['dmesg_w']['flood_lines_seen']}"),
                ("  CPU during the flood and 2 s after, share of a core (record, exporter; dmesg -w)",
                 f"{d['record']['flood_cpu_share']}, {d['exporter']['flood_cpu_share']}; {d['dmesg_w']['flood_cpu_share']}"),
                ("  longest gap between record's ticks (flood / file)", f"{d['record']['max_tick_gap_s']} / "
                 f"{f['record']['max_tick_gap_s']} s"),
                ("  followed file (--kmsg): read / dropped (record, exporter)",
                 f"{f['record']['read']} / {f['record']['dropped']} ; {f['exporter']['read']:.0f} / "
                 f"{f['exporter']['dropped']:.0f}")]
    if b == "explain_corpus":
        out = [(f"explain on the corpus ({r['cases']} real recordings): root cause right / leading right / abstention",
                f"{100 * r['accuracy']:.0f}% / {100 * r['leading_accuracy']:.0f}% / "
                + (f"{100 * r['abstention']:.0f}%" if r["abstention"] is not None else "-"))]
        out += [(f"  {k} ({v['cases']})", f"{100 * v['accuracy']:.0f}% / {100 * v['leading_accuracy']:.0f}%"
                 + (f" / {100 * v['abstention']:.0f}%" if v["abstention"] is not None else ""))
                for k, v in r["families"].items()]
        h = r.get("held_out")
        if h:
            out.append((f"  held-out ({h['cases']} cases, scored once against the rules frozen at {h['frozen_at']}; goal "
                        f"{100 * h['goal']:.0f}%)",
                        f"{100 * h['accuracy']:.0f}% / {100 * h['leading_accuracy']:.0f}%"
                        + (f" / {100 * h['abstention']:.0f}%" if h["abstention"] is not None else "")))
        live = r.get("time_to_verdict") or {}
        out.append(("  time to a verdict: explain on a stored recording (max) / live, after the episode's end",
                    f"{r['explain_s']['max']} s / {live.get('verdict_after_end_s', 'not measured')} s"))
        return out
    if b == "spawns_cost":
        c, x = r["cpu_ms"], r["ratios"]
        return [(f"spawns section (processes started, by parent), this host, {r['host_processes']} processes: quiet "
                 "second / listing / listing in an exec storm",
                 f"{c['spawns_quiet']} / {c['spawns_listing_quiet_node']} / {c['spawns_listing_exec_storm']} ms CPU; "
                 f"x{x['quiet_to_tick']} / x{x['listing_to_tick']} / x{x['storm_to_tick']} of the record tick "
                 f"({c['sampler_tick']} ms); the storm listing x{x['storm_to_pidstat']} of one `pidstat -p ALL`")]
    if b == "kernel_logs":
        t = r["total"]
        return [(f"kernel-log rules on {t['files']} real logs ({t['files_with_events']} with events), labelled by reading: "
                 "events found / missed / false positives", f"{t['found']} of {t['labelled']} / {t['missed']} / "
                 f"{t['false_positives']}")]
    return [(b, json.dumps(r)[:80])]


def main(argv: list[str]) -> int:
    if "--stackcollapse" in argv:  # passed on to perf_parse, which reads it from the environment
        i = argv.index("--stackcollapse")
        if i + 1 >= len(argv):
            print("benchmarks: --stackcollapse needs a path to stackcollapse-perf.pl", file=sys.stderr)
            return 2
        os.environ["NODESLEUTH_STACKCOLLAPSE"] = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    flags = [a for a in argv if a.startswith("--")]  # passed to each benchmark named (--json: JSON only)
    names = [a for a in argv if not a.startswith("--")] or ALL
    results = []
    for n in names:
        mod = importlib.import_module(f"benchmarks.{n}")
        buf = io.StringIO()
        t = time.time()
        with contextlib.redirect_stdout(buf):
            try:
                r = mod.main([f for f in flags if f != "--json"])
            except Exception as e:  # one broken benchmark must not hide the others
                r = {"benchmark": n, "skipped": f"failed: {e}"}
        print(json.dumps(r, indent=1 if "--json" in flags else None), flush=True)
        r["_wall"] = round(time.time() - t, 1)
        results.append(r)
    # the table covers every benchmark's latest result, also those not run this time
    d = os.path.join(os.path.dirname(__file__), "results")
    latest = {r["benchmark"]: r for r in results}
    for n in ALL:
        path = os.path.join(d, f"{n}.json")
        if n not in latest and os.path.exists(path):
            with open(path) as f:
                latest[n] = json.load(f)
    table = ["| benchmark | result |", "|---|---|"]
    for r in (latest[n] for n in ALL if n in latest):
        try:
            table += [f"| {a} | {b} |" for a, b in rows(r)]
        except (KeyError, TypeError) as e:  # a result file written by an older version of the benchmark
            table.append(f"| {r.get('benchmark')} | stored result lacks {e}: rerun `python -m benchmarks {r.get('benchmark')}` |")
    text = "\n".join(table)
    if "--json" not in flags:
        print("\n" + text)
    if "--no-save" in flags:
        return 0
    os.makedirs(d, exist_ok=True)
    from benchmarks.common import machine

    m = machine()
    with open(os.path.join(d, "summary.md"), "w") as f:
        f.write(f"# Latest benchmark run\n\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
                f"{m['cpus']} CPUs ({m['cpu_model']}), {m['mem_gb']} GB, kernel {m['kernel']}, "
                f"Python {m['python']}. Raw JSON per benchmark beside this file.\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
