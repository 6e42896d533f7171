"""Interpolation of measured step and sync times: along local batch size (`Curve`) and over
placements that were not measured directly (`Grid`, by nodes and replicas). The model and
its fit report both build on these."""

from __future__ import annotations

import bisect
import math

_LOG2 = math.log(2.0)


class Curve:
    """Step and sync time against local batch, piecewise linear in log(local batch)."""

    __slots__ = ("bmax", "bmin", "logb", "logstep", "sync")

    def __init__(self, bsz: list[float], step: list[float], sync: list[float]) -> None:
        self.logb = [math.log(b) for b in bsz]
        self.logstep = [math.log(s) for s in step]
        self.sync = [min(y, s) for y, s in zip(sync, step)]
        self.bmin, self.bmax = bsz[0], bsz[-1]

    def at(self, b: float, lb: float) -> tuple[float, float]:
        """(log step_time, sync_time) at local batch b (lb = log b)."""
        logb = self.logb
        if b >= self.bmax:
            st, sy = math.exp(self.logstep[-1]), self.sync[-1]
            if b > self.bmax:
                st = sy + (st - sy) * b / self.bmax
            return math.log(st), sy
        if b <= self.bmin:
            return self.logstep[0], self.sync[0]
        i = bisect.bisect_right(logb, lb)
        x0, x1 = logb[i - 1], logb[i]
        t = (lb - x0) / (x1 - x0)
        ls, sy = self.logstep, self.sync
        return ls[i - 1] + t * (ls[i] - ls[i - 1]), sy[i - 1] + t * (sy[i] - sy[i - 1])


class Grid:
    """Curves over (num_nodes, num_replicas) for placements that were not measured directly."""

    def __init__(self, cells: dict[tuple[int, int], Curve]) -> None:
        by_nodes: dict[int, list[tuple[int, Curve]]] = {}
        for (n, r), c in cells.items():
            by_nodes.setdefault(n, []).append((r, c))
        self.nodes = sorted(by_nodes)
        self.reps = {n: [r for r, _ in sorted(v, key=lambda x: x[0])] for n, v in by_nodes.items()}
        self.curves = {n: [c for _, c in sorted(v, key=lambda x: x[0])] for n, v in by_nodes.items()}

    def _at_nodes(self, n: int, r: float, b: float, lb: float) -> tuple[float, float]:
        reps, curves = self.reps[n], self.curves[n]
        if r <= reps[0]:
            return curves[0].at(b, lb)
        if r >= reps[-1]:
            return curves[-1].at(b, lb)
        i = bisect.bisect_right(reps, r)
        r0, r1 = reps[i - 1], reps[i]
        a0, s0 = curves[i - 1].at(b, lb)
        if r == r0:
            return a0, s0
        a1, s1 = curves[i].at(b, lb)
        t = (r - r0) / (r1 - r0)
        return a0 + t * (a1 - a0), s0 + t * (s1 - s0)

    def at(self, n: int, r: int, b: float) -> tuple[float, float]:
        """(step_time, sync_time)."""
        lb = math.log(b)
        q = r / n
        nodes = self.nodes
        if n in self.reps:
            a, s = self._at_nodes(n, r, b, lb)
            return math.exp(a), s
        if n > nodes[-1]:
            top, prev = nodes[-1], nodes[-2]
            a, s = self._at_nodes(top, q * top, b, lb)
            _, s_prev = self._at_nodes(prev, q * prev, b, lb)
            extra = max(0.0, s - s_prev) / math.log(top / prev) * _LOG2 * math.log2(n / top)
            return math.exp(a) + extra, s + extra
        i = bisect.bisect_right(nodes, n)
        n0, n1 = nodes[i - 1], nodes[i]
        a0, s0 = self._at_nodes(n0, q * n0, b, lb)
        a1, s1 = self._at_nodes(n1, q * n1, b, lb)
        t = (n - n0) / (n1 - n0)
        return math.exp(a0 + t * (a1 - a0)), s0 + t * (s1 - s0)
