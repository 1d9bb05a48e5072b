"""A tiny terminal emulator (enough for rich's Live): turns a pty's output into the final screen text.

Cursor movement (CUU/CUD/CUF/CUB/CHA/CUP), erase in line/display, carriage return and
newline are applied; colors and modes are ignored. The screen has no height limit (a
scrolled-off line stays in the list), which is what a person scrolling back sees.
"""

from __future__ import annotations

import re

_CSI = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z@])")
_OSC = re.compile(r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")


def _n(params: str, default: int = 1) -> int:
    first = params.lstrip("?").split(";")[0]
    return int(first) if first.isdigit() else default


class Screen:
    """Feed text with :meth:`feed`; read the result with :meth:`lines`."""

    def __init__(self) -> None:
        self.rows: list[list[str]] = [[]]
        self.row = 0
        self.col = 0

    def _line(self) -> list[str]:
        while len(self.rows) <= self.row:
            self.rows.append([])
        return self.rows[self.row]

    def _put(self, ch: str) -> None:
        line = self._line()
        while len(line) < self.col:
            line.append(" ")
        if self.col < len(line):
            line[self.col] = ch
        else:
            line.append(ch)
        self.col += 1

    def _csi(self, params: str, final: str) -> None:
        if final == "A":
            self.row = max(0, self.row - _n(params))
        elif final == "B":
            self.row += _n(params)
        elif final == "C":
            self.col += _n(params)
        elif final == "D":
            self.col = max(0, self.col - _n(params))
        elif final == "G":
            self.col = _n(params) - 1
        elif final == "H":
            parts = [int(p) if p.isdigit() else 1 for p in [*params.split(";"), "1", "1"][:2]]
            self.row, self.col = parts[0] - 1, parts[1] - 1
        elif final == "K":
            line = self._line()
            mode = _n(params, 0)
            if mode == 0:
                del line[self.col :]
            elif mode == 1:
                line[: self.col] = [" "] * min(self.col, len(line))
            else:
                line.clear()
        elif final == "J" and _n(params, 0) == 0:
            del self._line()[self.col :]
            del self.rows[self.row + 1 :]

    def feed(self, text: str) -> None:
        text = _OSC.sub("", text)
        pos = 0
        for match in _CSI.finditer(text):
            self._plain(text[pos : match.start()])
            self._csi(match.group(1), match.group(2))
            pos = match.end()
        self._plain(text[pos:])

    def _plain(self, text: str) -> None:
        for ch in text:
            if ch == "\r":
                self.col = 0
            elif ch == "\n":
                self.row += 1
                self._line()
            elif ch == "\b":
                self.col = max(0, self.col - 1)
            elif ch >= " " or ch == "\t":
                self._put(ch)

    def lines(self) -> list[str]:
        return ["".join(r).rstrip() for r in self.rows]
