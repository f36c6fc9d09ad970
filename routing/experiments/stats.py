"""Statistics of A/B experiments between two versions (control "A", treatment "B"). Pure numpy/scipy/statsmodels.

- Proportions: Wilson intervals per arm, Newcombe's hybrid-score interval for B - A.
- Latency: Welch's t-test and interval, and each arm's p50/p95.
- Fixed horizon: the sample per arm comes from a power calculation before the start (``plan``);
  below it the fixed design refuses to decide.
- Sequential: the mixture SPRT of Johari et al., "Peeking at A/B tests" (KDD 2017), with a normal
  mixing distribution N(0, τ²), τ the absolute minimum effect; H0 is rejected once Λ_n ≥ 1/alpha, so
  looking often is safe, above a floor of ``MIN_SEQUENTIAL_PER_ARM`` units per arm.
- Sample-ratio mismatch: chi-square of the arm counts against the split; p < ``SRM_ALPHA`` blocks any decision.
- Guardrails: Holm's step-down adjustment of their p-values.
- ``decide`` promotes B when there is no SRM, enough data, a significant primary change in the good
  direction and no significant guardrail regression. ``manage.py evaluate abtest --simulate`` measures
  both designs (figures in docs/EVALUATIONS.md).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
from scipy import special, stats
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import NormalIndPower
from statsmodels.stats.proportion import confint_proportions_2indep, proportion_confint, proportion_effectsize

Design = Literal["fixed", "sequential"]
SRM_ALPHA = 0.001
# The mSPRT plugs in estimated variances; below this many units per arm they are too noisy to trust.
MIN_SEQUENTIAL_PER_ARM = 100


class AbTestError(ValueError):
    """Parameters that make no sense (a split of 0 or 1, an effect of 0, a rate outside (0, 1))."""


# --- inputs ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Proportion:
    """Successes out of trials in one arm for one rate metric."""

    successes: int
    trials: int

    @property
    def rate(self) -> float | None:
        return self.successes / self.trials if self.trials else None


@dataclass(frozen=True)
class RateMetric:
    """A rate metric in both arms; ``higher_is_better`` says which direction is an improvement."""

    name: str
    control: Proportion
    treatment: Proportion
    higher_is_better: bool = True


@dataclass(frozen=True)
class MeanMetric:
    """A continuous metric (latency) in both arms, as raw samples."""

    name: str
    control: np.ndarray
    treatment: np.ndarray
    higher_is_better: bool = False


@dataclass(frozen=True)
class Config:
    """How an experiment is run and read."""

    baseline: float = 0.6
    min_effect: float = 0.05
    alpha: float = 0.05
    power: float = 0.8
    split: float = 0.5
    design: Design = "sequential"

    def validate(self) -> Config:
        if not 0 < self.split < 1:
            raise AbTestError(f"split must put some traffic in each arm (0 < treatment share < 1), got {self.split}")
        if not 0 < self.baseline < 1:
            raise AbTestError(f"baseline rate must be between 0 and 1 (exclusive), got {self.baseline}")
        if self.min_effect <= 0:
            raise AbTestError(f"minimum effect must be positive, got {self.min_effect}")
        if not 0 < self.baseline * (1 + self.min_effect) < 1:
            raise AbTestError(f"baseline {self.baseline} improved by {self.min_effect:.0%} leaves (0, 1); use a smaller effect")
        if not 0 < self.alpha < 0.5 or not 0.5 <= self.power < 1:
            raise AbTestError("alpha must be in (0, 0.5) and power in [0.5, 1)")
        if self.design not in ("fixed", "sequential"):
            raise AbTestError(f"design must be 'fixed' or 'sequential', got {self.design!r}")
        return self


# --- planning --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    """The power calculation shown before start: the sample per arm that detects ``min_effect``."""

    baseline: float
    target: float
    effect_size_h: float
    alpha: float
    power: float
    split: float
    n_control: int
    n_treatment: int
    tau: float

    @property
    def n_total(self) -> int:
        return self.n_control + self.n_treatment


def msprt_final_look_power(n_control: float, ratio: float, p_a: float, p_b: float, tau: float, alpha: float) -> float:
    """Power of the mSPRT read once, at ``n_control`` control units (and ``ratio`` times as many treated ones).

    From Λ_n (``msprt_lambda``): it rejects when θ̂²/V ≥ 2(V + τ²)/τ² · (ln(1/alpha) + ½·ln(1 + τ²/V)), a
    critical z of its own at each n, with θ̂ ~ N(p_b - p_a, V). Earlier looks can only add
    rejections, so this is a lower bound on the power of the test as it runs (peeked at).
    """
    v = p_a * (1 - p_a) / n_control + p_b * (1 - p_b) / (n_control * ratio)
    z_c = math.sqrt(2 * (v + tau * tau) / (tau * tau) * (math.log(1 / alpha) + 0.5 * math.log1p(tau * tau / v)))
    mu = (p_b - p_a) / math.sqrt(v)
    return float(special.ndtr(mu - z_c) + special.ndtr(-mu - z_c))


def _sequential_n_control(config: Config, target: float, ratio: float) -> float:
    """The smallest control sample at which the mSPRT's final-look power reaches ``config.power`` (bisection)."""
    tau = config.baseline * config.min_effect

    def power(n: float) -> float:
        return msprt_final_look_power(n, ratio, config.baseline, target, tau, config.alpha)

    low, high = 1.0, 2.0
    while power(high) < config.power:
        low, high = high, high * 2
        if high > 1e12:
            raise AbTestError("no sample size reaches that power for so small an effect")
    while high - low > 0.5:
        mid = (low + high) / 2
        low, high = (mid, high) if power(mid) < config.power else (low, mid)
    return high


def plan(config: Config) -> Plan:
    """Samples per arm with ``power`` to detect the relative ``min_effect`` with the test the design runs.

    Fixed design: the two-sided z-test at ``alpha`` (``NormalIndPower``). Sequential design: the mSPRT
    read at that sample (``msprt_final_look_power``; peeking along the way only adds power), which
    needs about twice the fixed sample: the price of being allowed to look. One number either way,
    the one the experiment's page shows and its progress counts toward.
    """
    config.validate()
    target = config.baseline * (1 + config.min_effect)
    h = float(proportion_effectsize(target, config.baseline))
    ratio = config.split / (1 - config.split)  # n_treatment / n_control
    if config.design == "sequential":
        n_control = _sequential_n_control(config, target, ratio)
    else:
        n_control = float(NormalIndPower().solve_power(effect_size=abs(h), alpha=config.alpha, power=config.power, ratio=ratio, alternative="two-sided"))
    return Plan(
        baseline=config.baseline, target=target, effect_size_h=h, alpha=config.alpha, power=config.power, split=config.split,
        n_control=math.ceil(n_control), n_treatment=math.ceil(n_control * ratio), tau=config.baseline * config.min_effect,
    )


# --- tests -----------------------------------------------------------------------------------------

def wilson(p: Proportion, alpha: float = 0.05) -> tuple[float, float] | None:
    """Wilson score interval of one arm's rate (None without trials)."""
    if not p.trials:
        return None
    low, high = proportion_confint(p.successes, p.trials, alpha=alpha, method="wilson")
    return float(low), float(high)


def z_test(a: Proportion, b: Proportion) -> float:
    """Two-sided p-value of the pooled two-proportion z-test of rate(B) = rate(A) (fixed horizon)."""
    if not a.trials or not b.trials:
        return 1.0
    pooled = (a.successes + b.successes) / (a.trials + b.trials)
    se = math.sqrt(pooled * (1 - pooled) * (1 / a.trials + 1 / b.trials))
    if se == 0:
        return 1.0
    z = ((b.successes / b.trials) - (a.successes / a.trials)) / se
    return float(2 * special.ndtr(-abs(z)))


def msprt_lambda(a: Proportion, b: Proportion, tau: float) -> float:
    """The mixture likelihood ratio Λ_n of the mSPRT for rate(B) - rate(A) = 0 (see the module docstring)."""
    if not a.trials or not b.trials:
        return 1.0
    pa, pb = a.successes / a.trials, b.successes / b.trials
    # A rate of exactly 0 or 1 in an arm has zero estimated variance; a half success keeps V > 0.
    pa_v = min(max(pa, 0.5 / a.trials), 1 - 0.5 / a.trials)
    pb_v = min(max(pb, 0.5 / b.trials), 1 - 0.5 / b.trials)
    v = pa_v * (1 - pa_v) / a.trials + pb_v * (1 - pb_v) / b.trials
    t2 = tau * tau
    log_lambda = 0.5 * math.log(v / (v + t2)) + t2 * (pb - pa) ** 2 / (2 * v * (v + t2))
    return float(math.exp(min(log_lambda, 700.0)))


def msprt_p_value(a: Proportion, b: Proportion, tau: float) -> float:
    """Always-valid p-value at this look: min(1, 1/Λ_n)."""
    return min(1.0, 1.0 / msprt_lambda(a, b, tau))


def srm_test(n_control: int, n_treatment: int, split: float) -> float:
    """p-value of the chi-square goodness-of-fit test of the arm sizes against the configured treatment share.

    The statistic and its 1-degree-of-freedom tail are written out (``special.chdtrc``) rather than
    calling ``stats.chisquare``, which gives the same value 20x slower; simulations call this per look.
    The tests check both agree.
    """
    total = n_control + n_treatment
    if total == 0:
        return 1.0
    expected = (total * (1 - split), total * split)
    statistic = sum((o - e) ** 2 / e for o, e in zip((n_control, n_treatment), expected, strict=True))
    return float(special.chdtrc(1, statistic))


def welch(metric: MeanMetric, alpha: float = 0.05) -> dict[str, Any]:
    """Welch's test and interval for mean(B) - mean(A), with per-arm means and percentiles."""
    a, b = np.asarray(metric.control, dtype=float), np.asarray(metric.treatment, dtype=float)
    out: dict[str, Any] = {
        "name": metric.name, "kind": "mean",
        "control": _summary(a),
        "treatment": _summary(b),
        "difference": None, "ci": None, "p_value": 1.0, "higher_is_better": metric.higher_is_better,
    }
    if len(a) < 2 or len(b) < 2:
        return out
    if np.var(a) == 0 and np.var(b) == 0:
        out["difference"] = float(b.mean() - a.mean())
        out["p_value"] = 1.0 if out["difference"] == 0 else 0.0
        return out
    result = stats.ttest_ind(b, a, equal_var=False)
    ci = result.confidence_interval(confidence_level=1 - alpha)
    out.update(difference=float(b.mean() - a.mean()), ci=[float(ci.low), float(ci.high)], p_value=float(result.pvalue))
    return out


def _summary(x: np.ndarray) -> dict[str, Any]:
    if not len(x):
        return {"n": 0, "mean": None, "p50": None, "p95": None}
    return {"n": len(x), "mean": float(x.mean()), "p50": float(np.percentile(x, 50)), "p95": float(np.percentile(x, 95))}


def holm(p_values: list[float], alpha: float = 0.05) -> tuple[list[bool], list[float]]:
    """Holm step-down adjustment: which hypotheses are rejected, and the adjusted p-values."""
    if not p_values:
        return [], []
    reject, adjusted, _, _ = multipletests(p_values, alpha=alpha, method="holm")
    return [bool(r) for r in reject], [float(p) for p in adjusted]


# --- reading a rate metric -------------------------------------------------------------------------

def read_rate(metric: RateMetric, config: Config, tau: float, intervals: bool = True) -> dict[str, Any]:
    """Per-arm rates with Wilson CIs, the difference with Newcombe's CI, relative lift and the p-value of the design.

    ``intervals=False`` skips the confidence intervals (they do not enter the decision; simulations skip them).
    """
    a, b = metric.control, metric.treatment
    out: dict[str, Any] = {
        "name": metric.name, "kind": "rate", "higher_is_better": metric.higher_is_better,
        "control": {"successes": a.successes, "trials": a.trials, "rate": a.rate, "ci": wilson(a, config.alpha) if intervals else None},
        "treatment": {"successes": b.successes, "trials": b.trials, "rate": b.rate, "ci": wilson(b, config.alpha) if intervals else None},
        "difference": None, "ci": None, "relative_lift": None, "p_value": 1.0,
    }
    if not a.trials or not b.trials:
        return out
    diff = b.successes / b.trials - a.successes / a.trials
    out["difference"] = float(diff)
    if intervals:
        low, high = confint_proportions_2indep(b.successes, b.trials, a.successes, a.trials, method="newcomb", compare="diff", alpha=config.alpha)
        out["ci"] = [float(low), float(high)]
    if a.successes:
        out["relative_lift"] = float(diff / (a.successes / a.trials))
    out["p_value"] = msprt_p_value(a, b, tau) if config.design == "sequential" else z_test(a, b)
    return out


def _improves(reading: dict[str, Any]) -> bool:
    diff = reading["difference"] or 0.0
    return diff > 0 if reading["higher_is_better"] else diff < 0


# --- the decision ----------------------------------------------------------------------------------

Outcome = Literal["promote", "keep_control", "continue", "no_difference", "invalid_srm"]


@dataclass
class Decision:
    """What to do now, why, and every figure behind it."""

    outcome: Outcome
    reason: str
    can_promote: bool
    srm_p_value: float
    srm_alarm: bool
    enough_data: bool
    primary: dict[str, Any]
    guardrails: list[dict[str, Any]] = field(default_factory=list)
    plan: dict[str, Any] = field(default_factory=dict)


def decide(
    primary: RateMetric,
    config: Config,
    *,
    guardrails: list[RateMetric | MeanMetric] | None = None,
    n_control: int,
    n_treatment: int,
    the_plan: Plan | None = None,
    intervals: bool = True,
) -> Decision:
    """Apply the decision rule of the module docstring.

    Args:
        primary: the metric the experiment is judged on.
        config: design, alpha, power, split, minimum effect, baseline.
        guardrails: metrics that must not regress (Holm-adjusted together).
        n_control, n_treatment: units assigned to each arm (for the SRM check).
        the_plan: a precomputed ``plan(config)`` (simulations pass it to skip recomputing).
        intervals: compute confidence intervals for display (simulations skip them; the decision does not use them).
    """
    the_plan = the_plan or plan(config)
    tau = the_plan.tau
    srm_p = srm_test(n_control, n_treatment, config.split)
    reading = read_rate(primary, config, tau, intervals)
    guard_readings = [read_rate(g, config, tau, intervals) if isinstance(g, RateMetric) else welch(g, config.alpha) for g in (guardrails or [])]
    # A guardrail "regresses" on a significant change in its bad direction; Holm over the family.
    rejected, adjusted = holm([g["p_value"] for g in guard_readings], config.alpha)
    regressions = []
    for g, rej, p_adj in zip(guard_readings, rejected, adjusted, strict=True):
        g["p_adjusted"] = p_adj
        g["regressed"] = bool(rej and g["difference"] is not None and not _improves(g))
        if g["regressed"]:
            regressions.append(g["name"])
    enough = (
        primary.control.trials >= the_plan.n_control and primary.treatment.trials >= the_plan.n_treatment
        if config.design == "fixed" else min(primary.control.trials, primary.treatment.trials) >= MIN_SEQUENTIAL_PER_ARM
    )
    significant = reading["p_value"] < config.alpha
    common = {"srm_p_value": srm_p, "srm_alarm": srm_p < SRM_ALPHA, "enough_data": enough, "primary": reading,
              "guardrails": guard_readings, "plan": asdict(the_plan) if intervals else {}}
    if srm_p < SRM_ALPHA:
        return Decision("invalid_srm", f"sample ratio mismatch (p = {srm_p:.2g} < {SRM_ALPHA}): the assignment is broken; no decision", False, **common)
    if not enough:
        have = f"{primary.control.trials} / {primary.treatment.trials}"
        if config.design == "fixed":
            reason = f"too little data for {primary.name}: {have} of the planned {the_plan.n_control} control / {the_plan.n_treatment} treatment"
        else:
            reason = (f"too little data for {primary.name}: {have}; the sequential test reads from {MIN_SEQUENTIAL_PER_ARM} per arm "
                      f"(planned: {the_plan.n_control} / {the_plan.n_treatment})")
        return Decision("continue", reason, False, **common)
    if significant and not _improves(reading):
        return Decision("keep_control", f"{primary.name} is significantly worse in the treatment (p = {reading['p_value']:.3g})", False, **common)
    if significant and regressions:
        return Decision("keep_control", f"{primary.name} improves but guardrails regress: {', '.join(regressions)}", False, **common)
    if significant:
        lift = reading["relative_lift"]
        lift_text = f"{lift:+.1%}" if lift is not None else f"{reading['difference']:+.3f}"
        return Decision("promote", f"{primary.name} improves by {lift_text} (p = {reading['p_value']:.3g} < {config.alpha}); no guardrail regresses", True, **common)
    if config.design == "sequential":
        return Decision("continue", f"no significant difference yet in {primary.name} (always-valid p = {reading['p_value']:.3g}); keep collecting", False, **common)
    return Decision("no_difference", f"planned sample reached; {primary.name} shows no significant difference (p = {reading['p_value']:.3g})", False, **common)


# --- simulation ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SimulationResult:
    """Share of simulated experiments with each outcome, with Wilson CIs."""

    n_simulations: int
    rejections: int
    promotions: int

    def rate(self, count: int) -> dict[str, Any]:
        ci = wilson(Proportion(count, self.n_simulations))
        return {"rate": count / self.n_simulations if self.n_simulations else None, "ci": ci}


def simulate(
    config: Config,
    *,
    true_effect: float,
    n_simulations: int,
    per_arm: int | None = None,
    looks: int = 20,
    seed: int = 0,
) -> SimulationResult:
    """Run ``n_simulations`` experiments with a known relative effect through ``decide``.

    Each experiment assigns ``2·per_arm`` units at random with the configured split (so the SRM check
    sees honest noise) and draws thumbs-up outcomes at ``baseline`` and ``baseline·(1+true_effect)``.
    The fixed design is read once at the planned sample; the sequential design is read at ``looks``
    evenly spaced peeks and stops at the first significant reading (what a team that peeks does).
    A "rejection" is any significant reading of the primary (either direction); a "promotion" is
    an outcome of ``promote``.
    """
    config.validate()
    the_plan = plan(config)
    per_arm = per_arm or max(the_plan.n_control, the_plan.n_treatment)
    total = round(per_arm / max(config.split, 1 - config.split))
    rng = np.random.default_rng(seed)
    p_a, p_b = config.baseline, min(1.0, config.baseline * (1 + true_effect))
    checkpoints = [total] if config.design == "fixed" else sorted({max(2, round(total * (i + 1) / looks)) for i in range(looks)})
    rejections = promotions = 0
    primary_name = "thumbs_up_rate"
    for _ in range(n_simulations):
        in_b = rng.random(total) < config.split
        outcome = np.where(in_b, rng.random(total) < p_b, rng.random(total) < p_a)
        cum_b = np.cumsum(in_b)
        cum_b_success = np.cumsum(outcome & in_b)
        cum_success = np.cumsum(outcome)
        for n in checkpoints:
            nb, sb = int(cum_b[n - 1]), int(cum_b_success[n - 1])
            na, sa = n - nb, int(cum_success[n - 1]) - sb
            metric = RateMetric(primary_name, Proportion(sa, na), Proportion(sb, nb))
            # The fixed design is read when the planned sample is in (the planned n, whatever the realised split).
            cfg_plan = the_plan if config.design == "sequential" else _reached(the_plan, na, nb)
            decision = decide(metric, config, n_control=na, n_treatment=nb, the_plan=cfg_plan, intervals=False)
            if decision.outcome in ("promote", "keep_control"):
                rejections += 1
                promotions += decision.outcome == "promote"
                break
    return SimulationResult(n_simulations, rejections, promotions)


def _reached(the_plan: Plan, na: int, nb: int) -> Plan:
    """The plan with its targets at the arm sizes actually reached (the simulation reads once, at the horizon)."""
    return Plan(**{**asdict(the_plan), "n_control": min(the_plan.n_control, na), "n_treatment": min(the_plan.n_treatment, nb)})


def simulation_report(config: Config, *, n_simulations: int = 2000, per_arm: int | None = None, looks: int = 20, seed: int = 0) -> dict[str, Any]:
    """False-positive rate (no effect) and power (at ``min_effect``) of ``config``'s design, by simulation."""
    the_plan = plan(config)
    null = simulate(config, true_effect=0.0, n_simulations=n_simulations, per_arm=per_arm, looks=looks, seed=seed)
    effect = simulate(config, true_effect=config.min_effect, n_simulations=n_simulations, per_arm=per_arm, looks=looks, seed=seed + 1)
    fp, false_promo, pw = null.rate(null.rejections), null.rate(null.promotions), effect.rate(effect.promotions)
    return {
        "design": config.design,
        "baseline": config.baseline,
        "min_effect": config.min_effect,
        "alpha": config.alpha,
        "split": config.split,
        "planned_per_arm": {"control": the_plan.n_control, "treatment": the_plan.n_treatment, "planned_power": config.power},
        "per_arm": per_arm or max(the_plan.n_control, the_plan.n_treatment),
        "looks": looks if config.design == "sequential" else 1,
        "n_simulations": n_simulations,
        "false_positive_rate": fp["rate"],
        "false_positive_rate_ci": fp["ci"],
        "false_promotion_rate": false_promo["rate"],
        "power": pw["rate"],
        "power_ci": pw["ci"],
    }
