"""DQoES (Mao et al., arXiv 2010.12728): differentiated quality of experience.

Each client states a target quality of experience per job: a target metric (`target_metric`,
accuracy or loss as the application measures it) to reach by a time (`deadline`). The engine
keeps every job moving towards its own target and moves resources between jobs according to
how far each is from it:

- over-satisfied (predicted to reach its target before its deadline even with fewer
  workers): scaled down to the fewest workers that still reach it, when another job needs
  the room (the reason says for whom);
- under-satisfied (predicted to miss, but reachable with more workers): scaled up to the
  fewest that reach it; a waiting one starts with the fewest that reach it, most urgent
  first;
- unreachable (no allowed size reaches the target in time): kept moving on the fewest
  workers (`min_workers`), on resources nobody else needs, preempted (progress kept) when a
  job that can still be satisfied needs them;
- satisfied: its target was reached by its deadline. `engine_view()["qoe"]` counts them.

"Predicted to reach" uses `workbench.forecast`: work to the target from the job's own metric
curve (the Optimus form fitted to its history, blended with the measured profile's curve),
rate from its measured throughput. DQoES itself adjusts container CPU limits on one host; here
the resource is workers (GPUs or CPU workers), adjusted by checkpoint-restart.

This is the `qos` engine's machinery with DQoES's choices: sizes are always the fewest that
reach the target (resources follow need), no job is deferred for its size, unreachable jobs
keep a minimal share instead of their submitted size.
"""

from __future__ import annotations

from typing import Any

from ..model import ClusterState, JobState, JobStatus
from .base import register
from .qos import AT_RISK, LATE, ON_TRACK, Plan, QosPolicy, hours

QOE_NAMES = {ON_TRACK: "over-satisfied or on track", AT_RISK: "under-satisfied",
             LATE: "unreachable"}


@register("dqoes")
class DqoesPolicy(QosPolicy):
    """DQoES: per-job QoE targets (metric by a time); resources move to jobs short of theirs."""

    def __init__(self, perf=None, round_interval: float = 60.0, confidence: float = 0.9,
                 restart_delay: float = 30.0, min_rescale_interval: float = 300.0,
                 sizing: str = "fewest", history: int = 200, max_quiet: float = 1800.0) -> None:
        super().__init__(scheduling=True, autoscaling=True, perf=perf,
                         round_interval=round_interval, confidence=confidence,
                         restart_delay=restart_delay, min_rescale_interval=min_rescale_interval,
                         reject_late=False, history=history, max_quiet=max_quiet,
                         use_idle=False, sizing=sizing, max_share=None)
        self._seen: dict[str, JobStatus] = {}

    def reset(self) -> None:
        super().reset()
        self._seen.clear()

    def schedule(self, state: ClusterState):
        for job in state.jobs.values():
            self._seen[job.name] = job
        return super().schedule(state)

    def _best_effort_size(self, p: Plan) -> int:
        return p.job.spec.min_workers  # an unreachable target gets a minimal share

    def _start_text(self, p: Plan, size: int) -> str:
        return f"{self._target_text(p.job)}; " + super()._start_text(p, size)

    def _late_text(self, p: Plan, verb: str) -> str:
        text = super()._late_text(p, verb)
        return text.replace("deadline out of reach", "QoE target unreachable in time", 1)

    def _target_text(self, job: JobStatus) -> str:
        spec = job.spec
        if spec.target_metric is None:
            return "no QoE target (trains to the end)"
        return f"QoE target {spec.application} metric {spec.target_metric:.4g}"

    # ---- the view -----------------------------------------------------------------------

    def qoe_counts(self) -> dict[str, int]:
        """Jobs seen so far: satisfied (target reached by the deadline), missed, and active
        jobs by class."""
        satisfied = missed = 0
        for job in self._seen.values():
            if job.state is JobState.COMPLETED and job.spec.deadline is not None:
                if job.finish_time is not None and job.finish_time <= job.spec.deadline + 1e-9:
                    satisfied += 1
                else:
                    missed += 1
            elif job.state is JobState.REJECTED:
                missed += 1
        _, plans = self._view_args
        active: dict[str, int] = {}
        for p in plans.values():
            active[QOE_NAMES.get(p.cls, p.cls)] = active.get(QOE_NAMES.get(p.cls, p.cls), 0) + 1
        return {"satisfied": satisfied, "missed": missed, **active}

    def engine_view(self) -> dict[str, Any]:
        """The qos view plus `qoe`: satisfied/missed so far and active jobs by QoE class, and
        per job its target, predicted metric at its deadline and time to target."""
        view = super().engine_view()
        view["qoe"] = self.qoe_counts()
        perf = self.forecaster.perf
        now, plans = self._view_args
        for name, d in view["jobs"].items():
            p = plans[name]
            spec = p.job.spec
            d["target_metric"] = spec.target_metric
            d["time_to_target"] = p.run_time(p.job.num_workers or p.size or spec.min_workers)
            if spec.deadline is not None and d["rate"] > 0:
                at = p.job.progress + d["rate"] * max(spec.deadline - now - d["wait"], 0.0)
                try:
                    d["metric_at_deadline"] = float(perf.metric_at(spec.application,
                                                                   spec.batch_size, at))
                except (KeyError, ValueError):
                    d["metric_at_deadline"] = None
            d["qoe_class"] = QOE_NAMES.get(p.cls, p.cls)
            d["time_to_target_text"] = hours(d["time_to_target"])
        return view
