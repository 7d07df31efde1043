"""How many candidates to verify per target pass, from measured cost and acceptance.

With per-candidate acceptance ``a`` (each candidate accepted given the ones before it were), a
pass over ``k`` candidates commits on average ``(1 - a**(k+1)) / (1 - a)`` tokens and costs
``1 + s*k`` single-token passes, where ``s`` is the measured extra cost of one more row. The
budget picks the ``k`` with the best tokens per unit of cost; ``k = 0`` (a plain step) wins when
the drafter is doing badly. Acceptance is tracked per window (with the run's history as a
prior), so a window where the drafter struggles quickly stops wasting rows.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Budget:
    fixed: int | None = None  # a fixed k (the SD baselines' catalog), else adaptive
    k_max: int = 16
    prior_acceptance: float = 0.8
    prior_weight: float = 6.0
    prior_slope: float = 0.08  # extra cost of one row, relative to a one-row pass
    decay: float = 0.97
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

    def window_start(self) -> None:
        self._wacc = self._wfail = 0.0

    def acceptance(self) -> float:
        run_total = self._acc + self._fail
        run_a = (self._acc + self.prior_acceptance * self.prior_weight) / (
            run_total + self.prior_weight)
        w = self.prior_weight
        return (self._wacc + run_a * w) / (self._wacc + self._wfail + w)

    def slope(self) -> float:
        return self.prior_slope if self._slope is None else max(0.005, self._slope)

    def choose(self, available: int) -> int:
        """k for the next pass, given ``available`` ready candidates."""
        if available <= 0:
            return 0
        if self.fixed is not None:
            return min(self.fixed, available)
        a = min(self.acceptance(), 0.995)
        s = self.slope()
        best_k, best = 0, 1.0
        gain = 1.0  # sum of a**i for i <= k
        term = 1.0
        for k in range(1, min(self.k_max, available) + 1):
            term *= a
            gain += term
            value = gain / (1.0 + s * k)
            if value > best + 1e-9:
                best, best_k = value, k
        return best_k

    def record(self, offered: int, accepted: int, rows: int, seconds: float) -> None:
        """Feed back one pass: ``rows`` = 1 + offered tokens run through the target."""
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
