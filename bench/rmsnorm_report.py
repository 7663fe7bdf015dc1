"""Tables and plots of ``bench/rmsnorm.py`` results (GB/s per implementation and shape)."""

from __future__ import annotations

import math

IMPLS = ("torch", "compile", "liger", "quack", "default", "tuned", "clone")
PEERS = ("torch", "compile", "liger", "quack")
#: ``clone`` is not a peer: ``x.clone()`` moves the same bytes as a norm (less the weight), measured the same
#: way, so ``tuned / clone`` is how close a shape comes to a plain copy of its own size.
NAMES = {"torch": "F.rms_norm", "compile": "torch.compile", "liger": "Liger", "quack": "QuACK",
         "default": "ours default", "tuned": "ours tuned", "clone": "x.clone() (same bytes)"}


def gbps(row, mode, name):
    ms = row.get(f"{mode}_ms", {}).get(name)
    return row["bytes"] / (ms * 1e-3) / 1e9 if ms and not math.isnan(ms) else None


def fmt(v):
    return "—" if v is None else (f"{v:.0f}" if v >= 100 else f"{v:.1f}")


def markdown(rows, meta):
    lines = [
        f"Device: {meta['device']}; torch {meta['torch']}, Triton {meta['triton']}, CUDA {meta['cuda']}, "
        f"Liger {meta.get('liger') or 'not installed'}, QuACK {meta.get('quack') or 'not available'}; "
        f"{meta['date']}. Copy ceiling measured in the same run: "
        f"{meta['copy_gbps']:.0f} GB/s.",
        "",
    ]
    if meta.get("pdl"):
        lines += ["Ours ran with programmatic dependent launch (FLYAUTOTUNE_RMSNORM_PDL=1), the peers without it; "
                  "back-to-back replay is PDL's best case.", ""]
    modes = [("eager", "eager per call (do_bench, host dispatch included)"),
             ("graph", "CUDA-graph replay (GPU time per call)")]
    if any("warm_ms" in r for r in rows):
        modes.append(("warm", "CUDA-graph replay, x just written (an in-place multiply of x before each call, its "
                              "time taken off)"))
    all_rows = rows
    for mode, title in modes:
        rows = [r for r in all_rows if f"{mode}_ms" in r]  # --warm: the shapes timed that way
        lines += [f"GB/s, {title}:", "",
                  "| M × N | dtype | " + " | ".join(NAMES[n] for n in IMPLS)
                  + " | tuned / best peer | tuned / clone | tuned config |",
                  "|---|---|" + "---|" * len(IMPLS) + "---|---|---|"]
        for r in rows:
            vals = {n: gbps(r, mode, n) for n in IMPLS}
            peers = [vals[p] for p in PEERS if vals[p]]
            best = max(peers) if peers else None
            ratio = vals["tuned"] / best if best and vals["tuned"] else None
            c = r.get("tuned_config") or {}
            cfg = f"{c.get('BLOCK_THREADS')}t×{c.get('ROWS_PER_PROGRAM')}r" + (
                f", chunk {c['CHUNK']}" if c.get("CHUNK") else "") + f", p{c.get('CACHE_POLICY')}" + (
                ", prefetch" if c.get("PREFETCH") else "") + (
                f", split {c['SPLIT']}" if c.get("SPLIT", 1) > 1 else "") + (
                {0: "", 1: ", coop", 2: ", persist", 3: ", cluster"}.get(c.get("COOP") or 0, f", coop {c.get('COOP')}")) + (
                ", hold" if c.get("HOLD") else ", smem" if c.get("COOP") == 3 else "") + (
                f", vec {c['VEC']}B" if c.get("VEC", 16) != 16 else "") + {0: "", 1: ", async", 2: ", row"}.get(c.get("ASYNC") or 0, f", ASYNC {c.get('ASYNC')}")
            ratio_s = f"{ratio:.3f}×" if ratio else "—"  # three places: the targets sit at 1.000 and 1.050
            of_clone = f"{vals['tuned'] / vals['clone']:.0%}" if vals["tuned"] and vals["clone"] else "—"
            lines.append(f"| {r['M']} × {r['N']} | {r['dtype']} | " + " | ".join(fmt(vals[n]) for n in IMPLS)
                         + f" | {ratio_s} | {of_clone} | {cfg} |")
        ratios, missing = [], []
        for r in rows:
            peers = [gbps(r, mode, p) for p in PEERS if gbps(r, mode, p)]
            t = gbps(r, mode, "tuned")
            if peers and t:
                ratios.append(t / max(peers))
            elif not t:
                missing.append(f"{r['M']} × {r['N']} {r['dtype']}")
        if ratios:
            geo = math.exp(sum(math.log(v) for v in ratios) / len(ratios))
            lines += ["", f"Geometric mean of tuned / best peer ({mode}): {geo:.3f}× over {len(ratios)} shapes; "
                          f"minimum {min(ratios):.3f}×."]
        if mode == "graph":
            lines += below_best_peer(rows)
        if missing:  # a failed tuned launch must not pass for a smaller bench
            lines += ["", f"**No tuned figure** ({mode}) at {', '.join(missing)}: the tuned launch failed there "
                          f"(the log says why); the mean above leaves those shapes out."]
        lines.append("")
    return "\n".join(lines)


def below_best_peer(rows):
    """Lines naming each shape where tuned's median is under the best peer's, with tuned / that peer in
    each round (rounds are interleaved, so a round's two times share the GPU's state): under 1 in every
    round is a loss, a range that crosses 1 a tie the rounds cannot separate."""
    out = []
    for r in rows:
        t = gbps(r, "graph", "tuned")
        peers = {p: gbps(r, "graph", p) for p in PEERS if gbps(r, "graph", p)}
        if not t or not peers:
            continue
        best = max(peers, key=peers.get)
        if t >= peers[best]:
            continue
        rounds = r.get("graph_rounds") or {}
        paired = [p / q for p, q in zip(rounds.get(best, ()), rounds.get("tuned", ()))]  # ms: peer / tuned
        if paired:
            verdict = "below in every round" if max(paired) < 1 else "a tie: the rounds cross 1"
            spread = f"; per round {min(paired):.4f}–{max(paired):.4f}×, {verdict}"
        else:
            spread = "; one round only"
        copy = gbps(r, "graph", "clone")
        at_copy = (f"; tuned {t / copy:.1%} and {NAMES[best]} {peers[best] / copy:.1%} of a same-bytes copy"
                   if copy else "")
        out.append(f"- {r['M']} × {r['N']} {r['dtype']}: tuned / {NAMES[best]} {t / peers[best]:.4f}×{spread}{at_copy}.")
    if out:
        out = ["", "Shapes where tuned's median is under the best peer's:", ""] + out
    return out


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(14, 9), sharex=True)
    labels = [f"{r['M']}×{r['N']}\n{r['dtype']}" for r in rows]
    width = 0.8 / len(IMPLS)
    names = NAMES
    for ax, mode in zip(axes, ("eager", "graph")):
        for i, n in enumerate(IMPLS):
            vals = [gbps(r, mode, n) or 0 for r in rows]
            ax.bar([j + (i - len(IMPLS) / 2 + 0.5) * width for j in range(len(rows))], vals, width, label=names[n])
        ax.set_ylabel("GB/s")
        ax.set_yscale("log")
        ax.set_title(f"RMSNorm forward on {rows and rows[0].get('device', '')} — {mode}")
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(ncol=len(IMPLS), fontsize=8)
    axes[1].set_xticks(range(len(rows)))
    axes[1].set_xticklabels(labels, fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


