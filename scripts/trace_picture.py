#!/usr/bin/env python3
"""Draw captured spans as an SVG waterfall, the way a tracing UI shows a trace.

Input: the JSON spans `dump_if_asked` (`gateway/tests/otlp_support/mod.rs`)
writes for `a_run_decided_over_nats_after_a_failover_is_one_trace`
(`gateway/tests/cluster_failover.rs`). Output: one row per span, grouped by
trace (the run's first), children indented under their parent, a bar-less row
for a parent not in the dump (a caller's `traceparent`); bars on one time axis,
coloured by node (`service.instance.id`), the kind as a small word, the outcome
beside the name, durations on or beside the bars; span events as diamonds,
links as dashed arrows. Idle stretches longer than 20 % of the whole become a
fixed-width break (zig-zags, real length above). Three or more consecutive
childless siblings with the same name and outcome (a decision's `retry`
deliveries mid-failover) share one row, one tick per attempt; they do not hold
the axis open, and those in a break are spread across it in proportion.

Regenerate the picture (from the repository root):

    AWAKEN_TRACE_DUMP=$PWD/docs/images/cross-node-trace.json \\
      cargo nextest run -p awaken-gateway --test cluster_failover -E 'test(one_trace)'
    python3 scripts/trace_picture.py docs/images/cross-node-trace.json docs/images/cross-node-trace.svg

Check that it still works: `--check` renders to a temporary file, parses the
SVG, checks that every span and link is drawn once and counts the rows (against
`--rows` when given); given the SVG too, it checks that the committed picture is
what the script draws today:

    python3 scripts/trace_picture.py --check --rows 10 \\
      docs/images/cross-node-trace.json docs/images/cross-node-trace.svg
"""
import argparse
import json
import math
import os
import sys
import tempfile
import xml.etree.ElementTree as ET
from xml.sax.saxutils import escape, quoteattr

KINDS = {1: "int", 2: "srv", 3: "cli", 4: "prod", 5: "cons"}
OUTCOMES = ("awaken.run.outcome", "awaken.decision.outcome", "awaken.dispatch.outcome")
PALETTE = ("#2f6fbf", "#d9822b", "#3f9b5a", "#8e5cc2", "#c2455b")
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"
WIDTH, LEFT, RIGHT = 1200, 440, 1172  # the label column, then the timeline
TOP, ROW_H, BAR_H = 118, 26, 14
BREAK_W, ZIG, GAP_SHARE, COLLAPSE_MIN = 120, 16, 0.20, 3


def outcome(span):
    return next((span["attributes"][k] for k in OUTCOMES if k in span["attributes"]), "")


def node(span):
    return span.get("instance") or span.get("service") or "?"


def short(hex_id):
    return f"{hex_id[:8]}…{hex_id[-4:]}"


def duration(ns):
    ms = ns / 1e6
    if ms < 1:
        return f"{ms * 1000:.0f} µs"
    if ms < 1000:
        return f"{ms:.{2 if ms < 10 else 1 if ms < 100 else 0}f} ms"
    return f"{ms / 1000:.{2 if ms < 10000 else 1}f} s"


def build_rows(spans):
    """Display order: per trace a header, then a depth-first walk from its roots."""
    traces = {}
    for s in spans:
        traces.setdefault(s["trace_id"], []).append(s)
    order = sorted(traces, key=lambda t: (not any(s["name"].startswith("invoke_agent") for s in traces[t]),
                                          min(s["start_ns"] for s in traces[t])))
    rows = []
    for trace in order:
        members = traces[trace]
        ids = {s["span_id"] for s in members}
        children = {}
        for s in members:
            children.setdefault(s["parent_span_id"], []).append(s)

        def walk(parent, depth):
            kids = sorted(children.get(parent, []), key=lambda s: s["start_ns"])
            i = 0
            while i < len(kids):
                j = i
                same = (kids[i]["name"], outcome(kids[i]))
                while j < len(kids) and (kids[j]["name"], outcome(kids[j])) == same \
                        and kids[j]["span_id"] not in children:
                    j += 1
                group = kids[i:j] if j - i >= COLLAPSE_MIN else kids[i:i + 1]
                rows.append({"type": "span", "depth": depth, "spans": group})
                if len(group) == 1:
                    walk(group[0]["span_id"], depth + 1)
                i += len(group)

        rows.append({"type": "trace", "trace": trace, "spans": members})
        missing = sorted((p for p in children if p and p not in ids),
                         key=lambda p: min(s["start_ns"] for s in children[p]))
        walk("", 0)
        for parent in missing:
            rows.append({"type": "remote", "depth": 0, "parent": parent, "spans": []})
            walk(parent, 1)
    return rows


def axis(spans, rows):
    """Segments of the time axis as (kind, t0, t1, x0, x1), and the time -> x map."""
    t0, t1 = min(s["start_ns"] for s in spans), max(s["end_ns"] for s in spans)
    folded = {s["span_id"] for r in rows if len(r["spans"]) > 1 and r["type"] == "span" for s in r["spans"]}
    merged = []
    for a, b in sorted((s["start_ns"], s["end_ns"]) for s in spans if s["span_id"] not in folded):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    edges = [t0] + [t for m in merged for t in m] + [t1] if merged else []
    idle = [(edges[i], edges[i + 1]) for i in range(0, len(edges), 2)]
    cuts = [(a, b) for a, b in idle if b - a > GAP_SHARE * (t1 - t0)]
    segments, cursor = [], t0
    for a, b in cuts:
        if a > cursor:
            segments.append(["linear", cursor, a])
        segments.append(["break", a, b])
        cursor = b
    if cursor < t1:
        segments.append(["linear", cursor, t1])
    linear_ns = sum(b - a for k, a, b in segments if k == "linear") or 1
    scale = (RIGHT - LEFT - BREAK_W * len(cuts)) / linear_ns
    x = LEFT
    for seg in segments:
        width = BREAK_W if seg[0] == "break" else (seg[2] - seg[1]) * scale
        seg += [x, x + width]
        x += width

    def to_x(t):
        for kind, a, b, xa, xb in segments:
            if kind == "linear" and a <= t <= b:
                return xa + (t - a) * scale
        for kind, a, b, xa, xb in segments:
            if kind == "break" and a < t < b:
                inner = ZIG + 8
                return xa + inner + (t - a) / (b - a) * (xb - xa - 2 * inner)
        return LEFT if t < t0 else RIGHT

    return t0, [tuple(s) for s in segments], to_x, scale


def text(x, y, body, size=12, fill="#222", anchor="start", extra=""):
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" fill="{fill}" '
            f'text-anchor="{anchor}"{extra}>{body}</text>')


def ticks(t0, segments, scale):
    """Tick marks and labels for each linear segment, times relative to the first span."""
    out = []
    for n, (kind, a, b, xa, xb) in enumerate(segments):
        if kind != "linear":
            continue
        lo, hi = xa + (20 if n > 0 else 0), xb - (20 if n < len(segments) - 1 else 0)
        step = next(m * 10 ** e for e in range(0, 15) for m in (1, 2, 5) if m * 10 ** e * scale >= 80)
        decimals = max(0, -math.floor(math.log10(step / 1e6)))
        t = math.ceil((a - t0) / step) * step + t0
        while t <= b:
            rel_ms, x = (t - t0) / 1e6, xa + (t - a) * scale
            label = f"{rel_ms / 1000:.{decimals + 3}f} s" if rel_ms >= 1000 else f"{rel_ms:.{decimals}f} ms"
            if lo <= x <= hi:
                out.append((x, label))
            t += step
    return out


def cy(i):
    return TOP + i * ROW_H + ROW_H / 2


def header(spans, rows, colour):
    """Title, a one-line summary and the legend."""
    runs = sorted((s for s in spans if s["name"].startswith("invoke_agent")), key=lambda s: s["start_ns"])
    title = "One run across nodes: " + " → ".join(f"{node(s)} ({outcome(s)})" for s in runs)
    deliveries = [outcome(s) for s in spans if s["name"] == "process awaken.decisions"]
    tally = ", ".join(f"{deliveries.count(k)} {k}" for k in dict.fromkeys(deliveries))
    traces = sum(r["type"] == "trace" for r in rows)
    summary = (f"{len(spans)} spans in {traces} trace{'s' * (traces > 1)} · "
               f"{runs[0]['name'] if runs else 'no run'}: {len(runs)} activation{'s' * (len(runs) != 1)}"
               + (f" · decision deliveries: {tally}" if tally else ""))
    o = [text(24, 34, escape(title), 19, extra=' font-weight="600"'), text(24, 56, escape(summary), 13, "#555")]
    x = 24
    for n, c in colour.items():
        o += [f'<rect x="{x}" y="70" width="14" height="12" rx="2" fill="{c}"/>', text(x + 20, 80.5, escape(n))]
        x += 42 + 7 * len(n)
    o += [f'<path d="M{x + 6},76 l-5,-5 l-5,5 l5,5 z" fill="#fff" stroke="#222" stroke-width="1.4"/>',
          text(x + 14, 80.5, "span event"),
          f'<path d="M{x + 104},76 h34" stroke="#444" stroke-width="1.3" stroke-dasharray="4 3" '
          'marker-end="url(#arrow)"/>', text(x + 146, 80.5, "span link")]
    return o


def backdrop(rows, t0, segments, scale):
    """Row stripes, trace bands, the time axis with its grid, and the breaks."""
    o, bottom = [], TOP + len(rows) * ROW_H
    for i, r in enumerate(rows):
        y = TOP + i * ROW_H
        if r["type"] == "trace":
            o.append(f'<rect x="12" y="{y + 2}" width="{WIDTH - 24}" height="{ROW_H - 4}" rx="3" fill="#e9eef5"/>')
        elif i % 2:
            o.append(f'<rect x="12" y="{y}" width="{WIDTH - 24}" height="{ROW_H}" fill="#fafafa"/>')
    for x, label in ticks(t0, segments, scale):
        o += [f'<path d="M{x:.1f},{TOP - 4} V{bottom}" stroke="#e6e6e6"/>',
              text(x, TOP - 8, label, 11, "#666", "middle")]
    o.append(f'<path d="M{LEFT},{TOP - 2} H{RIGHT}" stroke="#bbb"/>')
    for kind, a, b, xa, xb in segments:
        if kind != "break":
            continue
        o.append(f'<rect x="{xa + ZIG}" y="{TOP - 2}" width="{xb - xa - 2 * ZIG}" height="{bottom - TOP + 2}" '
                 'fill="#e8e8e8" fill-opacity="0.45"/>')
        for zx in (xa + ZIG, xb - ZIG):
            pts = " ".join(f"{zx + (3 if k % 2 else -3):.1f},{y}" for k, y in enumerate(range(TOP - 6, bottom + 6, 6)))
            o.append(f'<polyline points="{pts}" fill="none" stroke="#999" stroke-width="1.2"/>')
        o += [text((xa + xb) / 2, TOP - 24, "✂ " + duration(b - a), 12, "#333", "middle", ' font-weight="600"'),
              text((xa + xb) / 2, TOP - 10, "cut", 10, "#666", "middle")]
    return o


def trace_band(i, r):
    role = ("the run" if any(s["name"].startswith("invoke_agent") for s in r["spans"])
            else "the decision's publisher" if any("decisions" in s["name"] for s in r["spans"]) else "")
    where = escape(", ".join(sorted({node(s) for s in r["spans"]})))
    return [text(20, cy(i) + 4.5, f'trace {short(r["trace"])}<tspan font-weight="400" fill="#555"> · {role} · '
                 f'{len(r["spans"])} spans · {where}</tspan>', 12, "#1d2b3a", extra=' font-weight="600"')]


def span_row(i, r, segments, to_x, colour, link_xs):
    """Kind, label, bars (one per attempt when folded), duration and events of one row."""
    ids = " ".join(s["span_id"] for s in r["spans"])
    o, lx = [f'<g class="row" data-spans={quoteattr(ids)}>'], 64 + 16 * r["depth"]
    if r["type"] == "remote":
        return o + [text(lx, cy(i) + 4, f"remote parent {short(r['parent'])}<tspan fill=\"#999\"> · the sender's "
                         "traceparent, not exported</tspan>", 12, "#777", extra=' font-style="italic"'), "</g>"]
    group, s0 = r["spans"], r["spans"][0]
    small = f" × {len(group)} attempts · {outcome(s0)}" if len(group) > 1 else f" · {outcome(s0)}" * bool(outcome(s0))
    o += [text(24, cy(i) + 4, KINDS.get(s0["kind"], "?"), 10, "#888", extra=' font-family="ui-monospace, monospace"'),
          text(lx, cy(i) + 4, f'{escape(s0["name"])}<tspan font-size="11" fill="#777">{escape(small)}</tspan>', 13)]
    fill = colour[node(s0)]
    x1, x2 = to_x(group[0]["start_ns"]), to_x(group[-1]["end_ns"])
    label = duration(s0["end_ns"] - s0["start_ns"])
    if len(group) > 1:
        o.append(f'<path d="M{x1:.1f},{cy(i):.1f} H{x2:.1f}" stroke="{fill}" stroke-opacity="0.45"/>')
        lengths = [s["end_ns"] - s["start_ns"] for s in group]
        label = (f"{len(group)} attempts, {duration(min(lengths))}–{duration(max(lengths))} each, "
                 f"over {duration(group[-1]['end_ns'] - group[0]['start_ns'])}")
    for s in group:
        a, b = to_x(s["start_ns"]), to_x(s["end_ns"])
        o.append(f'<rect x="{a:.1f}" y="{cy(i) - BAR_H / 2:.1f}" width="{max(b - a, 2):.1f}" height="{BAR_H}" rx="2" '
                 f'fill="{fill}"><title>{escape(s["name"])} · {node(s)} · '
                 f'{duration(s["end_ns"] - s["start_ns"])}</title></rect>')
    x2, need = max(x2, x1 + 2), 6.2 * len(label) + 10
    # free room left of the bar: back to the break before it, or to the start of the timeline
    room = x1 - max([LEFT] + [xb for k, a, b, xa, xb in segments if k == "break" and xb <= x1])
    events = s0["events"] if len(group) == 1 else []
    for ev in events:  # no event times in the dump: at the span's start
        o.append(f'<path d="M{x1 + 8:.1f},{cy(i) - 5:.1f} l5,5 l-5,5 l-5,-5 z" fill="#fff" stroke="#222" '
                 f'stroke-width="1.2"><title>{escape(ev)}</title></path>')
        if room > 6.2 * len("event " + ev) + 12:
            o.append(text(x1 - 6, cy(i) + 4, "event " + escape(ev), 11, "#333", "end"))
    # the duration: inside the bar, else after it (past a break, clear of link arrows), else before it
    after = next((xb for k, a, b, xa, xb in segments if k == "break" and xa < x2 < xb), x2)
    before = next((xa for k, a, b, xa, xb in segments if k == "break" and xa < x1 < xb), x1)
    if x2 - x1 >= need + (24 if events else 0):
        o.append(text(x2 - 6, cy(i) + 4, escape(label), 11, "#fff", "end"))
    elif after + need <= WIDTH - 12 and not any(after < x < after + need for x in link_xs):
        o.append(text(after + 5, cy(i) + 4, escape(label), 11, "#444"))
    else:
        o.append(text(before - 5, cy(i) + 4, escape(label), 11, "#444", "end"))
    return o + ["</g>"]


def link_arrows(spans, rows, to_x):
    """A dashed arrow from each linking span's start down (or up) to the span it links to."""
    o, by = [], {s["span_id"]: s for s in spans}
    row_of = {s["span_id"]: i for i, r in enumerate(rows) for s in r["spans"] if r["type"] != "trace"}
    for s in spans:
        for _, target in s["links"]:
            if target not in row_of:
                continue
            i, j = row_of[s["span_id"]], row_of[target]
            xv, down = to_x(s["start_ns"]) + 4, 1 if j > i else -1
            ta, tb = to_x(by[target]["start_ns"]), to_x(by[target]["end_ns"])
            if ta <= xv <= tb:  # straight onto the linked bar
                leg = f"V{cy(j) - down * (BAR_H / 2 + 1):.1f}"
            else:  # to its row, then across to the nearer end
                leg = f"V{cy(j):.1f} H{ta - 1 if xv < ta else tb + 1:.1f}"
            my = (cy(i) + cy(j)) / 2
            o += [f'<path class="link" d="M{xv:.1f},{cy(i) + down * BAR_H / 2:.1f} {leg}" fill="none" stroke="#444" '
                  'stroke-width="1.3" stroke-dasharray="4 3" marker-end="url(#arrow)"/>',
                  f'<rect x="{xv - 15:.1f}" y="{my - 8:.1f}" width="30" height="15" rx="3" fill="#fff" '
                  'stroke="#444" stroke-width="0.8"/>', text(xv, my + 3.5, "link", 10, "#222", "middle")]
    return o


def render(spans):
    rows = build_rows(spans)
    t0, segments, to_x, scale = axis(spans, rows)
    colour = {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(sorted({node(s) for s in spans}))}
    notes = [f"Time from the first span, on one scale except at the breaks (zig-zags): an idle stretch longer than "
             f"{GAP_SHARE:.0%} of the whole is cut to a fixed width,",
             "its real length written above it; folded attempts that fall in a break are spread across it in "
             "proportion (not to scale)."]
    for r in rows:
        if r["type"] == "span" and len(r["spans"]) > 1:
            n, s = len(r["spans"]), r["spans"][0]
            notes.append(f"× {n} attempts: {n} consecutive {s['name']} spans with the outcome {outcome(s)}, "
                         "folded into one row, one tick per attempt.")
    notes += ["Kind: int internal · srv server · cli client · prod producer · cons consumer.  ◆ a span event (the "
              "dump has no event times: drawn at the span's start).",
              "Captured by gateway/tests/cluster_failover.rs (…_is_one_trace) into docs/images/cross-node-trace.json; "
              "drawn by scripts/trace_picture.py."]
    bottom = TOP + len(rows) * ROW_H
    height = bottom + 36 + 16 * len(notes)
    link_xs = [to_x(s["start_ns"]) + 4 for s in spans for _ in s["links"]]
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
         f'viewBox="0 0 {WIDTH} {height}" font-family="{FONT}">',
         f'<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>',
         '<defs><marker id="arrow" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="8" markerHeight="8" '
         'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#444"/></marker></defs>']
    o += header(spans, rows, colour) + backdrop(rows, t0, segments, scale)
    for i, r in enumerate(rows):
        o += trace_band(i, r) if r["type"] == "trace" else span_row(i, r, segments, to_x, colour, link_xs)
    o += link_arrows(spans, rows, to_x)
    o += [text(24, bottom + 28 + 16 * k, escape(note), 11, "#666") for k, note in enumerate(notes)]
    return "\n".join(o + ["</svg>"]) + "\n", rows


def require(ok, message):
    if not ok:
        sys.exit(f"trace_picture --check failed: {message}")


def check(spans, svg_path=None, rows_wanted=None):
    """Render to a temporary file, parse it back and check what it holds."""
    svg, rows = render(spans)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "trace.svg")
        with open(out, "w", encoding="utf-8") as f:
            f.write(svg)
        try:
            root = ET.parse(out).getroot()
        except ET.ParseError as e:
            require(False, f"the SVG is not well-formed XML: {e}")
    ns = "{http://www.w3.org/2000/svg}"
    require(root.tag == ns + "svg", f"the root element is {root.tag}")
    drawn = [g for g in root.iter(ns + "g") if g.get("class") == "row"]
    folded = sum(len(r["spans"]) - 1 for r in rows if r["type"] == "span" and len(r["spans"]) > 1)
    remote = len({s["parent_span_id"] for s in spans} - {s["span_id"] for s in spans} - {""})
    expected = len(spans) - folded + remote
    require(len(drawn) == expected, f"{len(drawn)} rows drawn, {expected} expected")
    require(rows_wanted in (None, len(drawn)), f"{len(drawn)} rows drawn, --rows {rows_wanted} wanted")
    ids = [i for g in drawn for i in g.get("data-spans").split()]
    require(sorted(ids) == sorted(s["span_id"] for s in spans), "every span must be drawn exactly once")
    links = sum(len(s["links"]) for s in spans)
    require(sum(p.get("class") == "link" for p in root.iter(ns + "path")) == links, "a link is not drawn")
    if svg_path:
        with open(svg_path, encoding="utf-8") as f:
            require(f.read() == svg, f"{svg_path} is stale: regenerate it (see the docstring)")
    print(f"ok: {len(drawn)} rows ({len(spans)} spans, {folded} folded, {remote} remote parents), {links} link(s)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="render to a temporary file and validate it")
    parser.add_argument("spans", help="JSON spans dumped with AWAKEN_TRACE_DUMP")
    parser.add_argument("svg", nargs="?", help="SVG to write (with --check: the committed one to compare)")
    parser.add_argument("--rows", type=int, help="with --check: the number of span rows expected")
    args = parser.parse_args()
    with open(args.spans, encoding="utf-8") as f:
        spans = json.load(f)
    if not spans:
        sys.exit(f"{args.spans} holds no spans")
    if args.check:
        return check(spans, args.svg, args.rows)
    if not args.svg:
        parser.error("the SVG path is required")
    svg, _ = render(spans)
    with open(args.svg, "w", encoding="utf-8") as f:
        f.write(svg)


if __name__ == "__main__":
    main()
