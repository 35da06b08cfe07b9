#!/usr/bin/env python3
"""Turns shmbus-bench --json output into PNG charts.

    bench/plot.py results.json [OUTDIR]

writes OUTDIR/throughput.png (full-speed msgs/s per consumer by message size
and consumer count, one bar per transport, log scale) and OUTDIR/latency.png
(one-way latency percentiles by transport: ping-pong, and fixed offered rate
when the run has it), and, for a run with `--modes sizes`, OUTDIR/sizes.png
(throughput in GB/s by message size beside one core's memcpy, and the
claim()/commit() hand-off latency by size; matplotlib only). Uses matplotlib when it can be imported (Debian:
python3-matplotlib; run with /usr/bin/python3 if a virtualenv or pyenv shadows
it), else gnuplot (Debian: gnuplot-nox). Standard library only otherwise.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

ORDER = ["ring", "shmbus", "bipc", "uds", "pipe", "zmq"]
LABEL = {
    "ring": "reference ring (not a library)",
    "shmbus": "shmbus",
    "bipc": "Boost.Interprocess message_queue",
    "uds": "Unix domain socket",
    "pipe": "pipe",
    "zmq": "ZeroMQ ipc:// PUB/SUB",
}
COLOR = {"ring": "#7f7f7f", "shmbus": "#d62728", "bipc": "#1f77b4", "uds": "#2ca02c", "pipe": "#9467bd", "zmq": "#ff7f0e"}
PCTS = [("p50", "p50_ns"), ("p90", "p90_ns"), ("p99", "p99_ns"), ("p99.9", "p99_9_ns"), ("max", "max_ns")]


def load(path):
    with open(path) as f:
        doc = json.load(f)
    rows = [r for r in doc["results"] if r["status"] == "ok"]
    return doc, rows


def transports(rows):
    present = {r["transport"] for r in rows}
    return [t for t in ORDER if t in present]


def throughput_data(rows):
    full = [r for r in rows if r["mode"] == "full"]
    groups = sorted({(r["size"], r["consumers"]) for r in full})
    ts = transports(full)
    table = {t: [] for t in ts}
    for size, n in groups:
        for t in ts:
            v = next((r["median"]["per_consumer_msgs_per_s"] for r in full
                      if r["transport"] == t and r["size"] == size and r["consumers"] == n), 0.0)
            table[t].append(v)
    labels = [f"{s} B\n{n} cons." for s, n in groups]
    return labels, ts, table


def latency_sets(rows):
    sets = []
    for mode, title in (("pingpong", "ping-pong (one-way = RTT/2)"), ("rate", "fixed offered rate (from intended send time)")):
        rs = [r for r in rows if r["mode"] == mode]
        if not rs:
            continue
        # One size/consumer count per chart: the smallest size present.
        size = min(r["size"] for r in rs)
        rs = [r for r in rs if r["size"] == size and r["consumers"] == min(x["consumers"] for x in rs)]
        sets.append((f"{title}, {size} B", {r["transport"]: [r["median"][k] for _, k in PCTS] for r in rs}))
    return sets


def subtitle(doc):
    m = doc.get("machine", {})
    p = doc.get("placement")
    where = ""
    if p:
        cpus = ",".join(str(c) for c in p.get("cpus", []))
        where = f', {"pinned to" if p.get("pinned") else "unpinned on"} CPUs {cpus} ({p.get("smt", "?")})'
    return f'{m.get("cpu", "?")}, {m.get("cores", "?")} cores{where}, {m.get("kernel", "?")}, {m.get("date", "")}'


def plot_matplotlib(doc, rows, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, ts, table = throughput_data(rows)
    if labels:
        fig, ax = plt.subplots(figsize=(10, 4.5), dpi=90)
        width = 0.8 / max(1, len(ts))
        for i, t in enumerate(ts):
            xs = [x + (i - (len(ts) - 1) / 2) * width for x in range(len(labels))]
            ax.bar(xs, table[t], width, label=LABEL[t], color=COLOR[t])
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("msgs/s per consumer (slowest consumer, median)")
        ax.set_title("Full-speed throughput, 1 producer → N consumers\n" + subtitle(doc), fontsize=9)
        ax.grid(axis="y", which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "throughput.png"))
        plt.close(fig)

    sets = latency_sets(rows)
    if sets:
        fig, axes = plt.subplots(1, len(sets), figsize=(5.5 * len(sets), 4.5), dpi=90, squeeze=False)
        for ax, (title, data) in zip(axes[0], sets):
            width = 0.8 / max(1, len(data))
            ts = [t for t in ORDER if t in data]
            for i, t in enumerate(ts):
                xs = [x + (i - (len(ts) - 1) / 2) * width for x in range(len(PCTS))]
                ax.bar(xs, [max(v, 1) for v in data[t]], width, label=LABEL[t], color=COLOR[t])
            ax.set_xticks(range(len(PCTS)))
            ax.set_xticklabels([p for p, _ in PCTS])
            ax.set_yscale("log")
            ax.set_ylabel("one-way latency, ns (median of runs)")
            ax.set_title(title, fontsize=9)
            ax.grid(axis="y", which="both", alpha=0.3)
            ax.legend(fontsize=7)
        fig.suptitle(subtitle(doc), fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "latency.png"))
        plt.close(fig)


def plot_gnuplot(doc, rows, out):
    tmp = tempfile.mkdtemp(prefix="shmbus-plot-")
    script = ["set terminal png size 900,420",
              "set style data histograms", "set style histogram clustered gap 1", "set style fill solid 1.0",
              "set logscale y", "set grid ytics", "set key outside right", "set xtics rotate by -30"]
    labels, ts, table = throughput_data(rows)
    if labels:
        data = os.path.join(tmp, "tp.dat")
        with open(data, "w") as f:
            f.write("group " + " ".join(ts) + "\n")
            for i, lab in enumerate(labels):
                f.write('"%s" ' % lab.replace("\n", " ") + " ".join(str(table[t][i] or 1) for t in ts) + "\n")
        script += [f"set output '{os.path.join(out, 'throughput.png')}'",
                   "set title 'Full-speed msgs/s per consumer — " + subtitle(doc).replace("'", "") + "'",
                   "plot " + ", ".join(f"'{data}' using {i + 2}:xtic(1) title '{LABEL[t]}' lc rgb '{COLOR[t]}'"
                                       for i, t in enumerate(ts))]
    sets = latency_sets(rows)
    if sets:
        title, d = sets[0]
        ts = [t for t in ORDER if t in d]
        data = os.path.join(tmp, "lat.dat")
        with open(data, "w") as f:
            f.write("pct " + " ".join(ts) + "\n")
            for i, (p, _) in enumerate(PCTS):
                f.write(p + " " + " ".join(str(max(d[t][i], 1)) for t in ts) + "\n")
        script += [f"set output '{os.path.join(out, 'latency.png')}'", f"set title '{title}, ns'",
                   "plot " + ", ".join(f"'{data}' using {i + 2}:xtic(1) title '{LABEL[t]}' lc rgb '{COLOR[t]}'"
                                       for i, t in enumerate(ts))]
    subprocess.run(["gnuplot"], input="\n".join(script) + "\n", text=True, check=True)
    shutil.rmtree(tmp, ignore_errors=True)


def human(n):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def plot_sizes_matplotlib(doc, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in doc.get("sizes", []) if not r.get("error")]
    if not rows:
        return
    xs = [r["size"] for r in rows]
    med = [r["median"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=90)
    left.plot(xs, [m["memcpy_bytes_per_s"] / 1e9 for m in med], "o--", color="#7f7f7f",
              label="memcpy, one core (the ceiling)")
    left.plot(xs, [m["shmbus_bytes_per_s"] / 1e9 for m in med], "o-", color=COLOR["shmbus"],
              label="shmbus 1 → 1, every byte written and read")
    left.set_ylabel("GB/s (median)")
    left.set_title("Throughput by message size", fontsize=9)
    right.plot(xs, [m["handoff_p50_ns"] for m in med], "o-", color=COLOR["shmbus"], label="p50")
    right.plot(xs, [m["handoff_p99_ns"] for m in med], "o--", color="#ff9896", label="p99")
    right.set_yscale("log")
    right.set_ylabel("one-way ns")
    right.set_title("claim()/commit() hand-off latency by message size", fontsize=9)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs)
        ax.set_xticklabels([human(x) for x in xs], fontsize=7, rotation=45)
        ax.grid(which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("shmbus by message size, default bus\n" + subtitle(doc), fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "sizes.png"))
    plt.close(fig)


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(sys.argv) >= 2 else 2
    out = sys.argv[2] if len(sys.argv) > 2 else "."
    os.makedirs(out, exist_ok=True)
    doc, rows = load(sys.argv[1])
    try:
        import matplotlib  # noqa: F401
        plot_matplotlib(doc, rows, out)
        plot_sizes_matplotlib(doc, out)
        tool = "matplotlib"
    except ImportError:
        if not shutil.which("gnuplot"):
            print("plot.py: neither matplotlib nor gnuplot found; install one: "
                  "apt-get install python3-matplotlib (then run with /usr/bin/python3) "
                  "or apt-get install gnuplot-nox", file=sys.stderr)
            return 1
        plot_gnuplot(doc, rows, out)
        tool = "gnuplot"
    print(f"plot.py: wrote charts to {out} with {tool}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
