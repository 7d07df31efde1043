"""How many candidates to verify per target pass, from measured cost and acceptance.

With per-candidate acceptance ``a`` (each candidate accepted given the ones before it were), a
pass over ``k`` candidates commits on average ``(1 - a**(k+1)) / (1 - a)`` tokens and costs
``1 + s*k`` single-token passes, where ``s`` is the measured extra cost of one more row. The
budget picks the ``k`` with the best tokens per unit of cost; ``k = 0`` (a plain step) wins when
the drafter is doing badly. Acceptance is tracked per window (with the run's history as a
prior), so a window where the drafter struggles quickly stops wasting rows.

One pricing policy for every search: a pass over ``width`` hypotheses (a beam) with ``k``
candidates each runs ``width * (1 + k)`` rows, so one more candidate per hypothesis costs
``width * s / (1 + (width - 1) * s)`` of a plain pass of that width (0.30 for a beam of 5 at
the prior ``s``). The fit is in rows whatever the width. A beam window takes a fresh copy of
the run's settings (:meth:`Budget.fresh`) and learns from its own passes only.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace


@dataclass
class Budget:
    fixed: int | None = None  # a fixed k (the SD baselines' catalog), else adaptive
    k_max: int = 16
    beam_k_max: int = 8  # candidates per hypothesis of a beam (each adds ``width`` rows)
    prior_acceptance: float = 0.8
    prior_weight: float = 6.0
    prior_slope: float = 0.08  # extra cost of one row, relative to a one-row pass
    max_slope: float = 0.25
    decay: float = 0.97
    probe_every: int = 8  # plain passes in a row before one candidate is tried anyway
    # run-level (decayed) counts
    _acc: float = 0.0
    _fail: float = 0.0
    # window-level counts
    _wacc: float = 0.0
    _wfail: float = 0.0
    # decayed least-squares sums of pass seconds against rows: t(rows) = a + b * rows
    _n: float = 0.0
    _sx: float = 0.0
    _sy: float = 0.0
    _sxx: float = 0.0
    _sxy: float = 0.0
    _slope: float | None = None
    _idle: int = 0  # passes in a row for which k = 0 was chosen with candidates ready

    def window_start(self) -> None:
        self._wacc = self._wfail = 0.0

    def fresh(self) -> Budget:
        """This policy's settings without its history: a beam window's budget, which starts
        from the priors. Carried across a beam run's windows instead, one budget learned the
        beams' low acceptance and offered 834 candidates on the 17 clips at --beam-size 5,
        where a budget per beam window offered 1,237-1,839 for the same beam steps
        (``bench/results/beam5-passes-core-t-2026-12-07.json``)."""
        return replace(self, **{f.name: f.default for f in fields(self) if f.name[0] == "_"})

    def acceptance(self) -> float:
        run_total = self._acc + self._fail
        run_a = (self._acc + self.prior_acceptance * self.prior_weight) / (
            run_total + self.prior_weight)
        w = self.prior_weight
        return (self._wacc + run_a * w) / (self._wacc + self._wfail + w)

    def slope(self, width: int = 1) -> float:
        """The extra cost of one more candidate per hypothesis, relative to a plain pass over
        ``width`` hypotheses."""
        s = self._row_slope()
        return width * s / (1.0 + (width - 1) * s)

    def room(self, width: int = 1) -> int:
        """The most candidates per hypothesis a pass over ``width`` hypotheses may verify."""
        return self.k_max if width == 1 else self.beam_k_max

    def _row_slope(self) -> float:
        # Pass times are wall-clock times on cores the drafter shares: a verify pass, run
        # while the drafter works, looks slow for reasons that have nothing to do with its
        # rows. The fitted slope
        # reached 1.0-1.3 on real audio (an extra row costing as much as a whole pass; 0.06-0.1
        # measured alone), which switched speculation off. The fit may move the slope, within
        # what a row can plausibly cost.
        if self._slope is None:
            return self.prior_slope
        return min(max(0.005, self._slope), self.max_slope)

    def choose(self, available: int, width: int = 1) -> int:
        """k for the next pass over ``width`` hypotheses, given ``available`` ready candidates
        (for the hypothesis that has the most)."""
        if available <= 0:
            return 0
        if self.fixed is not None:
            return min(self.fixed, available)
        a = min(self.acceptance(), 0.995)
        s = self.slope(width)
        best_k, best = 0, 1.0
        gain = 1.0  # sum of a**i for i <= k
        term = 1.0
        for k in range(1, min(self.room(width), available) + 1):
            term *= a
            gain += term
            value = gain / (1.0 + s * k)
            if value > best + 1e-9:
                best, best_k = value, k
        if best_k:
            self._idle = 0
            return best_k
        self._idle += 1
        if self._idle >= self.probe_every:
            self._idle = 0
            return 1
        return 0

    def shadow(self, hit: bool) -> None:
        """A candidate that was ready but not offered would have been right (``hit``) or
        wrong: counted like an offer of one, at no cost."""
        self._acc = self._acc * self.decay + (1.0 if hit else 0.0)
        self._fail = self._fail * self.decay + (0.0 if hit else 1.0)
        self._wacc += 1.0 if hit else 0.0
        self._wfail += 0.0 if hit else 1.0

    def record(self, offered: int, accepted: int, rows: int, seconds: float) -> None:
        """Feed back one pass: ``rows`` run through the target (``width * (1 + offered)``);
        ``accepted`` of the ``offered`` candidates per hypothesis."""
        if offered:
            failed = 1.0 if accepted < offered else 0.0
            self._acc = self._acc * self.decay + accepted
            self._fail = self._fail * self.decay + failed
            self._wacc += accepted
            self._wfail += failed
        d = self.decay
        self._n = self._n * d + 1.0
        self._sx = self._sx * d + rows
        self._sy = self._sy * d + seconds
        self._sxx = self._sxx * d + rows * rows
        self._sxy = self._sxy * d + rows * seconds
        mx, my = self._sx / self._n, self._sy / self._n
        var = self._sxx / self._n - mx * mx
        if self._n >= 4 and var > 0.25:
            b = (self._sxy / self._n - mx * my) / var
            t1 = my + b * (1.0 - mx)  # fitted one-row pass
            if t1 > 0:
                self._slope = b / t1
