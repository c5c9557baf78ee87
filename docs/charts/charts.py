#!/usr/bin/env python3
"""Draws the guide's benchmark charts (docs/src/images/bench-*.svg) from the measured figures.

The figures are the ones in docs/src/benchmarks.md, which says how each was measured; a
re-measurement changes both. Plain SVG, written by hand so that no plotting package is needed:
    python3 docs/charts/charts.py
"""
import html
import math
import os

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "images")

# `distlock bench --iterations 400`, one run, every store on loopback (PostgreSQL and etcd:
# three later runs each, hence a range). Microseconds; (low, high) where runs gave a range.
ACQUIRE_RELEASE = [
    ("memory", (1.5, 1.5), (0.1, 0.1)),
    ("SQLite", (128, 128), (61, 61)),
    ("MariaDB 10.11", (544, 544), (142, 142)),
    ("PostgreSQL 15", (245, 288), (52, 146)),
    ("Redis 7.0", (185, 185), (121, 121)),
    ("Redlock, 3 masters", (323, 323), (339, 339)),
    ("ZooKeeper 3.8", (1600, 1600), (360, 360)),
    ("etcd 3.4, one member", (689, 828), (216, 277)),
    ("etcd 3.4, 3 members", (1565, 2243), (333, 386)),
    ("memcached 1.6", (217, 217), (112, 112)),
]
# The same runs: one lock, 16 contenders, acquisitions per second.
HOT_LOCK = [
    ("memory", (463000, 463000)),
    ("SQLite", (2620, 2620)),
    ("MariaDB 10.11", (3490, 3490)),
    ("PostgreSQL 15", (1182, 1386)),
    ("Redis 7.0", (3540, 3540)),
    ("Redlock, 3 masters", (1430, 1430)),
    ("ZooKeeper 3.8", (964, 964)),
    ("etcd 3.4, one member", (260, 484)),
    ("etcd 3.4, 3 members", (137, 175)),
    ("memcached 1.6", (7620, 7620)),
]
# Mutex, permit and write lock, acquire+release, three runs in a row; microseconds.
PRIMITIVES = [
    ("memory", (1.5, 1.5), (1.8, 1.8), (1.8, 1.8)),
    ("SQLite", (108, 120), (156, 167), (161, 169)),
    ("MariaDB 10.11", (290, 574), (1220, 1460), (1250, 1450)),
    ("PostgreSQL 15", (155, 267), (223, 334), (223, 337)),
    ("Redis 7.0", (106, 108), (116, 121), (109, 112)),
    ("ZooKeeper 3.8", (1500, 2000), (2600, 3200), (1500, 1700)),
    ("etcd 3.4, one member", (755, 839), (929, 1320), (728, 906)),
    ("etcd 3.4, 3 members", (1600, 2000), (2400, 2530), (1770, 2010)),
    ("memcached 1.6", (80, 174), (107, 226), (107, 228)),
]
# The peer benchmark on one Redis, medians over 15 rounds; microseconds.
PEERS = [
    ("two PINGs (the floor)", (32, 32), None),
    ("notify-then-act (handoff floor)", None, (147, 147)),
    ("distlock 0.1", (56, 56), (201, 201)),
    ("rslock 0.10", (35, 35), (90000, 90000)),
    ("distributed-lock-redis 0.2 (handoff: try loop)", (52, 52), (1300, 1300)),
]

COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c"]


def fmt_us(v):
    if v >= 1000000:
        return f"{v / 1000000:g} s"
    if v >= 1000:
        return f"{v / 1000:g} ms"
    return f"{v:g} µs"


def fmt_rate(v):
    return f"{v:,.0f}/s"


def chart(path, title, subtitle, rows, series, fmt, lo, hi):
    """A horizontal bar chart on a log scale: one group of bars per row, one bar per series.

    Each value is (low, high): the bar runs to low, a lighter part to high (the spread of the
    runs); None leaves the bar out.
    """
    label_w, plot_w, bar_h, gap = 260, 560, 14, 10
    group_h = bar_h * len(series) + gap
    top = 64
    height = top + group_h * len(rows) + 60
    width = label_w + plot_w + 110

    def x(v):
        return label_w + plot_w * (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="10" y="20" font-size="14" font-weight="bold">{html.escape(title)}</text>',
        f'<text x="10" y="38">{html.escape(subtitle)}</text>',
    ]
    decade = 10 ** math.floor(math.log10(lo))
    while decade <= hi:
        if decade >= lo:
            gx = x(decade)
            out.append(f'<line x1="{gx:.1f}" y1="{top - 6}" x2="{gx:.1f}" y2="{height - 44}" stroke="#ddd"/>')
            out.append(f'<text x="{gx:.1f}" y="{height - 30}" text-anchor="middle" fill="#555">{html.escape(fmt(decade))}</text>')
        decade *= 10
    for i, row in enumerate(rows):
        name, values = row[0], row[1:]
        gy = top + i * group_h
        out.append(f'<text x="{label_w - 8}" y="{gy + bar_h * len(series) / 2 + 4:.1f}" text-anchor="end">{html.escape(name)}</text>')
        for j, value in enumerate(values):
            if value is None:
                continue
            low, high = value
            y = gy + j * bar_h
            colour = COLOURS[j]
            tip = html.escape(f"{name}, {series[j]}: " + (fmt(low) if low == high else f"{fmt(low)} to {fmt(high)}"))
            out.append(f'<rect x="{label_w}" y="{y}" width="{x(low) - label_w:.1f}" height="{bar_h - 2}" fill="{colour}"><title>{tip}</title></rect>')
            if high > low:
                out.append(f'<rect x="{x(low):.1f}" y="{y}" width="{x(high) - x(low):.1f}" height="{bar_h - 2}" fill="{colour}" fill-opacity="0.35"><title>{tip}</title></rect>')
            text = fmt(low) if low == high else f"{fmt(low)}-{fmt(high)}"
            out.append(f'<text x="{x(high) + 4:.1f}" y="{y + bar_h - 4}" font-size="10" fill="#333">{html.escape(text)}</text>')
    lx = label_w
    for j, s in enumerate(series):
        out.append(f'<rect x="{lx}" y="{height - 18}" width="10" height="10" fill="{COLOURS[j]}"/>')
        out.append(f'<text x="{lx + 14}" y="{height - 9}">{html.escape(s)}</text>')
        lx += 34 + 7 * len(s)
    out.append("</svg>")
    with open(os.path.join(OUT, path), "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")


def main():
    chart("bench-acquire-release.svg", "Uncontended acquire+release through LockClient",
          "distlock bench --iterations 400, every store on loopback, 2 cores (log scale; lighter: the spread of runs)",
          [(n, a, r) for n, a, r in ACQUIRE_RELEASE],
          ["acquire+release", "two raw no-op round trips"], fmt_us, 0.1, 10000)
    chart("bench-hot-lock.svg", "One lock, 16 contenders",
          "acquisitions per second, the same runs (log scale; higher is better)",
          HOT_LOCK, ["acquisitions/s"], fmt_rate, 100, 1000000)
    chart("bench-primitives.svg", "Mutex, permit and write lock, acquire+release",
          "distlock bench --iterations 400, three runs in a row (log scale; lighter: the spread of runs)",
          PRIMITIVES, ["mutex", "permit", "write lock"], fmt_us, 1, 10000)
    chart("bench-peers.svg", "distlock beside the peers on one Redis",
          "medians over 15 rounds (log scale)",
          PEERS, ["acquire+release p50", "handoff p50"], fmt_us, 10, 1000000)


if __name__ == "__main__":
    main()
