"""The rate search behind a capacity: bracket, then bisect, the highest request rate meeting a criterion.

A cold search brackets the capacity by multiplying or dividing its start
rate by `growth` until one rate meets the criterion and another does not,
then bisects between the highest rate that met it and the lowest that did
not until they are within `precision` (relative). Rates are rounded to 4
significant digits, so a rate's run folder has a short name.

A warm search (`hint`: a neighbouring curve's capacity, such as the same
engine on another seed) ends on the same bracket with fewer runs. It plays
the cold search step by step, but takes a step's outcome from the runs it
has when they settle it: a rate at or under one that met the criterion
(below every failing rate) meets it, a rate at or over one that failed
fails, as on any curve that is monotone in the rate. Before measuring a
rate the cold search asks for, it measures the two ends of the bracket the
cold search would end on if the capacity were the hint (while it has made
fewer than `guesses` runs); when the hint is right those two runs settle
every step.
So on a monotone curve the warm search reports exactly the cold search's
capacity and bracket (tests/results/test_warm_search.py holds the two
equal on many curves); on a curve that is not monotone near its capacity
it may end on another bracket, each end measured (a guess may measure a
rate that fails under the bracket it ends on, which the cold search never
measured). Both ends of the
bracket it reports are always measured runs, so the run at the capacity is
there to read.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class RateSearch:
    """Bracket, then bisect, the highest rate meeting a criterion; rates that were tried are remembered.

    Call `next_rates()` (or `next_rate()`, its first) for the rates to measure (none when done) and
    `record(rate, met)` with each outcome. If the curve is not monotone, the capacity is where it first
    fails: a rate that passes above the lowest failing rate is ignored. `hint` makes it a warm search
    (see the module's doc); it may be set after the search is made, before its first run.
    """

    start: float = 1.0
    growth: float = 2.0
    precision: float = 0.02
    min_rate: float = 1e-3
    max_rate: float = 1e4
    hint: float | None = None
    guesses: int = 6
    outcomes: dict[float, bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 < self.min_rate <= self.start <= self.max_rate:
            raise ValueError(f"need 0 < min_rate <= start <= max_rate, got {self.min_rate}, {self.start}, "
                             f"{self.max_rate}")
        if not self.growth > 1:
            raise ValueError(f"growth must be > 1, got {self.growth}")
        if not 0 < self.precision < 1:
            raise ValueError(f"precision must be in (0, 1), got {self.precision}")
        if not (isinstance(self.guesses, int) and self.guesses >= 0):
            raise ValueError(f"guesses must be an integer >= 0, got {self.guesses!r}")
        if self.hint is not None and not (isinstance(self.hint, (int, float)) and self.hint > 0):
            raise ValueError(f"hint must be a rate > 0 (req/s) or None, got {self.hint!r}")

    @staticmethod
    def round(rate: float) -> float:
        return float(f"{rate:.4g}")

    def snap(self, rate: float) -> float:
        """`rate` rounded, then kept within [min_rate, max_rate] (rounding may step past a limit)."""
        return min(max(self.round(rate), self.min_rate), self.max_rate)

    def record(self, rate: float, met: bool) -> None:
        self.outcomes[self.snap(rate)] = bool(met)

    @property
    def upper(self) -> float | None:
        """The lowest rate that failed."""
        failed = [r for r, ok in self.outcomes.items() if not ok]
        return min(failed) if failed else None

    @property
    def lower(self) -> float | None:
        """The highest rate that met the criterion below every failing rate."""
        hi = self.upper
        passed = [r for r, ok in self.outcomes.items() if ok and (hi is None or r < hi)]
        return max(passed) if passed else None

    def _settled(self, rate: float) -> bool | None:
        """`rate`'s outcome: measured, or settled by the runs (at or under `lower`: met; at or over `upper`:
        failed); None while open."""
        if rate in self.outcomes:
            return self.outcomes[rate]
        lo, hi = self.lower, self.upper
        if lo is not None and rate <= lo:
            return True
        if hi is not None and rate >= hi:
            return False
        return None

    def _cold_step(self, lo: float | None, hi: float | None, tried) -> float | None:
        """The rate the cold search measures next with bracket (lo, hi) after `tried`; None when it is done."""
        if lo is None and hi is None:
            rate = self.start
        elif hi is None:   # at max_rate already, this rate is max_rate again: tried, so the search ends below
            rate = min(lo * self.growth, self.max_rate)
        elif lo is None:   # as at max_rate
            rate = max(hi / self.growth, self.min_rate)
        elif (hi - lo) / lo <= self.precision:
            return None
        else:
            rate = (lo + hi) / 2
        rate = self.snap(rate)
        return None if rate in tried else rate   # rounding cannot split the bracket any further

    def _play(self, outcome) -> tuple[float | None, float | None, float | None]:
        """The cold search played with `outcome(rate)` (True, False, or None where unknown): (lo, hi, rate), the
        bracket where it stopped and the rate it stopped at (None when it ended)."""
        tried: dict[float, bool] = {}
        while True:
            passed = [r for r, ok in tried.items() if ok]
            failed = [r for r, ok in tried.items() if not ok]
            hi = min(failed) if failed else None
            lo = max((r for r in passed if hi is None or r < hi), default=None)
            rate = self._cold_step(lo, hi, tried)
            if rate is None:
                return lo, hi, None
            met = outcome(rate)
            if met is None:
                return lo, hi, rate
            tried[rate] = met

    def _guesses(self) -> list[float]:
        """The ends of the bracket the cold search would end on if the capacity were the guess, not yet measured;
        none without a hint, once the search has made `guesses` runs, or once runs on both sides of the
        capacity leave the hint outside them (the cold search's bisection is then the quicker way). The guess
        is the hint until a run says the capacity is past it; then twice as far past that run as the hint
        was, so that a hint far off costs few runs."""
        if self.hint is None or len(self.outcomes) >= self.guesses:
            return []
        lo, hi = self.lower, self.upper
        guess = self.hint
        if hi is not None and guess >= hi:
            if lo is not None:
                return []
            guess = hi - 2 * (guess - hi)   # just under hi when the hint was: rates under hi are guessed to pass
        elif lo is not None and guess <= lo:
            if hi is not None:
                return []
            guess = lo + 2 * (lo - guess)

        def outcome(rate: float) -> bool:
            settled = self._settled(rate)
            return rate <= guess if settled is None else settled

        end_lo, end_hi, _ = self._play(outcome)
        return [r for r in (end_lo, end_hi) if r is not None and r not in self.outcomes]

    def next_rates(self) -> list[float]:
        """The rates to measure now (run them in any order, or together); [] when the search is done."""
        lo, hi, rate = self._play(self._settled)
        if rate is None:   # the cold search ended: both ends of its bracket must be runs, to be read
            return [r for r in (lo, hi) if r is not None and r not in self.outcomes]
        return self._guesses() or [rate]

    def next_rate(self) -> float | None:
        rates = self.next_rates()
        return rates[0] if rates else None

    def result(self) -> dict:
        """capacity (the highest rate that met the criterion), its bound, the bracket's upper end, probes."""
        lo, hi, _ = self._play(self._settled)
        if lo is None:
            bound, capacity = "<", hi          # even the lowest rate tried failed
        elif hi is None:
            bound, capacity = ">=", lo         # never failed up to max_rate
        else:
            bound, capacity = "=", lo
        return {"capacity": capacity, "bound": bound, "upper": hi, "probes": len(self.outcomes),
                "done": not self.next_rates()}
