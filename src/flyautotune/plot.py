"""Candidate-timing charts for ``flyautotune tune --plot``.

matplotlib draws the chart when it is installed; otherwise a small built-in
renderer writes a PNG with the standard library alone, so ``--plot`` works on
every install.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Optional, Sequence

import attrs


@attrs.frozen
class Bar:
    """One candidate: its label, median milliseconds (None if it failed), winner or not."""

    label: str
    ms: Optional[float]
    winner: bool = False


@attrs.frozen
class Panel:
    """One tuned shape: a title and its candidates."""

    title: str
    bars: tuple = attrs.field(converter=tuple)


def write_chart(path: "str | Path", panels: Sequence[Panel], *, renderer: Optional[str] = None) -> str:
    """Draw one horizontal bar chart per panel into ``path``.

    :param renderer: ``"matplotlib"``, ``"builtin"`` or None (matplotlib when importable).
    :returns: the renderer used.
    :raises ValueError: the builtin renderer asked for a file that is not ``.png``.
    """
    path = Path(path)
    if renderer is None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            renderer = "builtin"
        else:
            renderer = "matplotlib"
    if renderer == "matplotlib":
        _matplotlib_chart(path, panels)
    elif renderer == "builtin":
        if path.suffix.lower() != ".png":
            raise ValueError(
                f"--plot {str(path)!r}: without matplotlib only .png files can be written "
                f"(pip install matplotlib for other formats)"
            )
        path.write_bytes(png_chart(panels))
    else:
        raise ValueError(f"renderer={renderer!r}; accepted: 'matplotlib', 'builtin' or None")
    return renderer


# -- matplotlib -------------------------------------------------------------------------


def _matplotlib_chart(path: Path, panels: Sequence[Panel]) -> None:
    import matplotlib

    matplotlib.use("Agg", force=True)  # files only: never open a window
    import matplotlib.pyplot as plt

    heights = [max(len(p.bars), 1) * 0.35 + 0.9 for p in panels]
    longest = max([len(b.label) for p in panels for b in p.bars] + [10])
    # Labels take their own width; the bars keep about six inches of it.
    fig, axes = plt.subplots(len(panels), 1, figsize=(6.5 + 0.075 * longest, sum(heights)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, panel in zip(axes[:, 0], panels):
        labels = [b.label for b in panel.bars]
        values = [b.ms if b.ms is not None else 0.0 for b in panel.bars]
        colors = [_hex(_WINNER) if b.winner else _hex(_BAR) for b in panel.bars]
        ax.barh(range(len(labels)), values, color=colors)
        ax.set_yticks(range(len(labels)), labels=[("* " if b.winner else "") + b.label for b in panel.bars])
        ax.invert_yaxis()
        for i, b in enumerate(panel.bars):
            ax.text(values[i], i, f" {b.ms:.4g} ms" if b.ms is not None else " failed", va="center", fontsize=8)
        ax.set_xlim(0, max(values + [0.0]) * 1.3 or 1.0)  # room for the value labels
        ax.set_title(panel.title, fontsize=10, loc="left")
        ax.set_xlabel("median ms (lower is better)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _hex(rgb: tuple) -> str:
    return "#%02x%02x%02x" % rgb


# -- the built-in renderer ------------------------------------------------------------------

_BG = (255, 255, 255)
_FG = (30, 30, 30)
_BAR = (31, 119, 180)
_WINNER = (44, 160, 44)
_MUTED = (150, 150, 150)
_SCALE = 2  # font pixels per glyph pixel
_ADV = 6 * _SCALE  # glyph advance: 5 columns + 1 space
_ROW = 11 * _SCALE  # one bar row
_MARGIN = 16
_BAR_W = 360


def png_chart(panels: Sequence[Panel]) -> bytes:
    """The chart as PNG bytes, drawn with a 5x7 bitmap font; standard library only."""
    labels = [("* " if b.winner else "  ") + b.label for p in panels for b in p.bars] or [""]
    label_w = max(len(s) for s in labels) * _ADV + _ADV
    value_w = 16 * _ADV
    title_w = max([len(p.title) for p in panels] + [0]) * _ADV
    width = _MARGIN * 2 + max(label_w + _BAR_W + value_w, title_w)
    height = _MARGIN
    for p in panels:
        height += _ROW + max(len(p.bars), 1) * _ROW + _ROW // 2
    height += _ROW + _MARGIN
    canvas = _Canvas(width, height)
    y = _MARGIN
    for p in panels:
        canvas.text(_MARGIN, y, p.title, _FG)
        y += _ROW
        times = [b.ms for b in p.bars if b.ms is not None]
        top = max(times) if times else 1.0
        x0 = _MARGIN + label_w
        canvas.rect(x0 - 1, y, 1, max(len(p.bars), 1) * _ROW, _FG)
        for b in p.bars:
            canvas.text(_MARGIN, y + 2 * _SCALE, ("* " if b.winner else "  ") + b.label, _FG)
            if b.ms is None:
                canvas.text(x0 + _ADV // 2, y + 2 * _SCALE, "failed", _MUTED)
            else:
                w = max(int(_BAR_W * (b.ms / top if top > 0 else 1.0)), 1)
                canvas.rect(x0, y + _SCALE, w, _ROW - 3 * _SCALE, _WINNER if b.winner else _BAR)
                canvas.text(x0 + w + _ADV // 2, y + 2 * _SCALE, f"{b.ms:.4g} ms", _FG)
            y += _ROW
        if not p.bars:
            y += _ROW
        y += _ROW // 2
    canvas.text(_MARGIN, y, "median ms per candidate, lower is better; * winner", _MUTED)
    return canvas.png()


class _Canvas:
    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.px = bytearray(bytes(_BG) * (width * height))

    def rect(self, x: int, y: int, w: int, h: int, color: tuple) -> None:
        x1, y1 = min(x + w, self.width), min(y + h, self.height)
        x, y = max(x, 0), max(y, 0)
        if x >= x1 or y >= y1:
            return
        run = bytes(color) * (x1 - x)
        for row in range(y, y1):
            start = (row * self.width + x) * 3
            self.px[start:start + len(run)] = run

    def text(self, x: int, y: int, text: str, color: tuple) -> None:
        for ch in text:
            glyph = _FONT.get(ch) or _FONT.get(ch.upper()) or _FONT["?"]
            for gy, bits in enumerate(glyph):
                for gx in range(5):
                    if bits >> (4 - gx) & 1:
                        self.rect(x + gx * _SCALE, y + gy * _SCALE, _SCALE, _SCALE, color)
            x += _ADV

    def png(self) -> bytes:
        stride = self.width * 3
        raw = b"".join(b"\x00" + bytes(self.px[r * stride:(r + 1) * stride]) for r in range(self.height))
        return (b"\x89PNG\r\n\x1a\n"
                + _chunk(b"IHDR", struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0))
                + _chunk(b"IDAT", zlib.compress(raw, 9))
                + _chunk(b"IEND", b""))


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def _glyphs(spec: str) -> dict:
    out = {}
    for line in spec.strip().splitlines():
        ch, rows = line[0], line[2:].split()
        out[" " if ch == "~" else ch] = tuple(int(r, 2) for r in rows)
    return out


# HD44780-style 5x7 glyphs: the character, then seven 5-pixel rows ('~' is the space).
_FONT = _glyphs("""
~ 00000 00000 00000 00000 00000 00000 00000
0 01110 10001 10011 10101 11001 10001 01110
1 00100 01100 00100 00100 00100 00100 01110
2 01110 10001 00001 00010 00100 01000 11111
3 11111 00010 00100 00010 00001 10001 01110
4 00010 00110 01010 10010 11111 00010 00010
5 11111 10000 11110 00001 00001 10001 01110
6 00110 01000 10000 11110 10001 10001 01110
7 11111 00001 00010 00100 01000 01000 01000
8 01110 10001 10001 01110 10001 10001 01110
9 01110 10001 10001 01111 00001 00010 01100
A 01110 10001 10001 10001 11111 10001 10001
B 11110 10001 10001 11110 10001 10001 11110
C 01110 10001 10000 10000 10000 10001 01110
D 11100 10010 10001 10001 10001 10010 11100
E 11111 10000 10000 11110 10000 10000 11111
F 11111 10000 10000 11110 10000 10000 10000
G 01110 10001 10000 10111 10001 10001 01111
H 10001 10001 10001 11111 10001 10001 10001
I 01110 00100 00100 00100 00100 00100 01110
J 00111 00010 00010 00010 00010 10010 01100
K 10001 10010 10100 11000 10100 10010 10001
L 10000 10000 10000 10000 10000 10000 11111
M 10001 11011 10101 10101 10001 10001 10001
N 10001 10001 11001 10101 10011 10001 10001
O 01110 10001 10001 10001 10001 10001 01110
P 11110 10001 10001 11110 10000 10000 10000
Q 01110 10001 10001 10001 10101 10010 01101
R 11110 10001 10001 11110 10100 10010 10001
S 01111 10000 10000 01110 00001 00001 11110
T 11111 00100 00100 00100 00100 00100 00100
U 10001 10001 10001 10001 10001 10001 01110
V 10001 10001 10001 10001 10001 01010 00100
W 10001 10001 10001 10101 10101 10101 01010
X 10001 10001 01010 00100 01010 10001 10001
Y 10001 10001 10001 01010 00100 00100 00100
Z 11111 00001 00010 00100 01000 10000 11111
a 00000 00000 01110 00001 01111 10001 01111
b 10000 10000 10110 11001 10001 10001 11110
c 00000 00000 01110 10000 10000 10001 01110
d 00001 00001 01101 10011 10001 10001 01111
e 00000 00000 01110 10001 11111 10000 01110
f 00110 01001 01000 11100 01000 01000 01000
g 00000 01111 10001 10001 01111 00001 01110
h 10000 10000 10110 11001 10001 10001 10001
i 00100 00000 01100 00100 00100 00100 01110
j 00010 00000 00110 00010 00010 10010 01100
k 10000 10000 10010 10100 11000 10100 10010
l 01100 00100 00100 00100 00100 00100 01110
m 00000 00000 11010 10101 10101 10001 10001
n 00000 00000 10110 11001 10001 10001 10001
o 00000 00000 01110 10001 10001 10001 01110
p 00000 00000 11110 10001 11110 10000 10000
q 00000 00000 01101 10011 01111 00001 00001
r 00000 00000 10110 11001 10000 10000 10000
s 00000 00000 01110 10000 01110 00001 11110
t 01000 01000 11100 01000 01000 01001 00110
u 00000 00000 10001 10001 10001 10011 01101
v 00000 00000 10001 10001 10001 01010 00100
w 00000 00000 10001 10001 10101 10101 01010
x 00000 00000 10001 01010 00100 01010 10001
y 00000 00000 10001 10001 01111 00001 01110
z 00000 00000 11111 00010 00100 01000 11111
. 00000 00000 00000 00000 00000 01100 01100
, 00000 00000 00000 00000 01100 00100 01000
= 00000 00000 11111 00000 11111 00000 00000
- 00000 00000 00000 11111 00000 00000 00000
_ 00000 00000 00000 00000 00000 00000 11111
: 00000 01100 01100 00000 01100 01100 00000
; 00000 01100 01100 00000 01100 00100 01000
( 00010 00100 01000 01000 01000 00100 00010
) 01000 00100 00010 00010 00010 00100 01000
[ 01110 01000 01000 01000 01000 01000 01110
] 01110 00010 00010 00010 00010 00010 01110
/ 00000 00001 00010 00100 01000 10000 00000
* 00000 00100 10101 01110 10101 00100 00000
+ 00000 00100 00100 11111 00100 00100 00000
% 11000 11001 00010 00100 01000 10011 00011
< 00010 00100 01000 10000 01000 00100 00010
> 01000 00100 00010 00001 00010 00100 01000
' 01100 00100 01000 00000 00000 00000 00000
" 01010 01010 01010 00000 00000 00000 00000
? 01110 10001 00001 00010 00100 00000 00100
! 00100 00100 00100 00100 00100 00000 00100
# 01010 01010 11111 01010 11111 01010 01010
""")
