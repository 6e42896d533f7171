"""Performance models: interpolation hold-out errors, PS fit errors, the artifact's rules, sanity.

Error bounds are the figures measured on the committed data (see workbench/perf/model.py) with a
little headroom; a change to the interpolation that makes them worse fails here.
"""

from __future__ import annotations

import itertools
import math

import pytest

from workbench.model import JobKind, JobSpec
from workbench.perf import PerfModel, default_perf

APPS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
PS_MODELS = ("resnet-50", "vgg-16", "resnext-110", "inception-bn", "seq2seq",
             "cnn-text-classification", "dssm", "wlm")


@pytest.fixture(scope="module")
def perf() -> PerfModel:
    return default_perf()


@pytest.fixture(scope="module")
def report(perf: PerfModel) -> dict:
    return perf.fit_report()


def spec(app: str, batch: int, kind: JobKind = JobKind.ALLREDUCE, num_ps: int = 0) -> JobSpec:
    return JobSpec(name="j", application=app, arrival=0.0, total_work=1000.0, batch_size=batch,
                   initial_workers=1, min_workers=1, max_workers=64, num_ps=num_ps, kind=kind)


def test_names(perf: PerfModel) -> None:
    assert perf.applications == APPS
    assert perf.ps_models == PS_MODELS
    assert default_perf() is perf


# ---- measured points are reproduced ------------------------------------------------------

# (counts, local_bsz, step_time) straight from cifar10/placements.csv (single-rotation placements)
CIFAR10_MEASURED = [
    ((1,), 129, 0.10385050773620605),
    ((1,), 1024, 0.7020925283432007),
    ((4,), 32, 0.05821514129638672),
    ((2, 2), 129, 0.19032814502716064),
    ((4, 4), 1024, 0.8583473205566406),
    ((1, 1, 1, 1), 32, 0.1268904447555542),
]


@pytest.mark.parametrize("counts,bsz,step", CIFAR10_MEASURED)
def test_measured_step_times_reproduced(perf: PerfModel, counts, bsz, step) -> None:
    assert perf.step_time("cifar10", counts, bsz) == pytest.approx(step, rel=1e-5)


# ---- interpolation hold-out errors -------------------------------------------------------

# median / 90th percentile of |predicted/measured - 1|, measured: see module docstring of
# workbench.perf.model (max medians 0.079 batch, 0.073 placement, 0.067 nodes).
BOUNDS = {"batch": (0.09, 0.17), "placement": (0.09, 0.22), "nodes": (0.09, 0.20)}


@pytest.mark.parametrize("app", APPS)
@pytest.mark.parametrize("kind", sorted(BOUNDS))
def test_holdout_interpolation_error(report: dict, app: str, kind: str) -> None:
    figures = report["allreduce"][app][kind]
    median_bound, p90_bound = BOUNDS[kind]
    assert figures["n"] >= 50
    assert figures["median"] < median_bound
    assert figures["p90"] < p90_bound


# ---- PS fit -----------------------------------------------------------------------------

@pytest.mark.parametrize("model", PS_MODELS)
def test_ps_fit_error(report: dict, model: str) -> None:
    fit = report["ps"][model]
    assert fit["mean_rel_err"] < 0.11  # measured 0.031-0.097 over all kept points
    assert fit["median_rel_err"] < 0.08  # measured 0.020-0.073
    assert fit["mean_rel_err_w_gt_2"] < 0.10  # measured 0.031-0.093
    assert fit["dropped"] <= 0.05 * (fit["points"] + fit["dropped"])  # failed runs only


# (model, ps, workers, measured speed = sum of per-worker speeds) from dl2/config_speed.txt
PS_MEASURED = [
    ("resnet-50", 1, 5, 10.946), ("resnet-50", 1, 9, 7.298), ("resnet-50", 2, 6, 16.804),
    ("resnet-50", 4, 6, 28.656), ("resnet-50", 4, 12, 18.076), ("resnet-50", 8, 6, 36.058),
    ("resnet-50", 12, 12, 32.985), ("vgg-16", 1, 6, 5.283), ("vgg-16", 2, 12, 5.777),
    ("vgg-16", 8, 6, 16.309), ("vgg-16", 12, 12, 10.055), ("resnext-110", 1, 3, 204.194),
    ("inception-bn", 1, 9, 65.548), ("seq2seq", 1, 9, 172.415),
    ("cnn-text-classification", 1, 11, 59.877), ("dssm", 1, 5, 1188.482), ("wlm", 1, 7, 88.604),
]


def test_ps_speed_matches_measurements(perf: PerfModel) -> None:
    errs = [abs(perf.ps_speed(m, w, p) / s - 1) for m, p, w, s in PS_MEASURED]
    assert max(errs) < 0.25  # measured 0.216 (vgg-16, 2 PS x 12 workers)
    assert sum(errs) / len(errs) < 0.09  # measured 0.07
    # the Optimus form over-predicts 1 worker on 1 PS (documented): resnet-50 measured 15.783
    assert perf.ps_speed("resnet-50", 1, 1) > 15.783


def test_ps_speed_edges(perf: PerfModel) -> None:
    assert perf.ps_speed("resnet-50", 4, 0) == 0.0
    assert perf.ps_speed("resnet-50", 0, 4) == 0.0
    # more parameter servers relieve a PS bottleneck for a big model
    assert perf.ps_speed("vgg-16", 8, 8) > perf.ps_speed("vgg-16", 8, 1)
    # a bigger batch per worker takes longer per mini-batch
    assert perf.ps_speed("resnet-50", 4, 4, 64) < perf.ps_speed("resnet-50", 4, 4)
    job = spec("resnet-50", 32, JobKind.PS, num_ps=2)
    assert perf.iteration_rate(job, {"a": 2, "b": 2}, {"a": 2}) == pytest.approx(
        perf.ps_speed("resnet-50", 4, 2))
    assert perf.iteration_rate(job, {"a": 4}, {}) == 0.0
    assert perf.ideal_rate(job, 4) == pytest.approx(perf.ps_speed("resnet-50", 4, 2))


# ---- any placement -----------------------------------------------------------------------

@pytest.mark.parametrize("app", APPS)
def test_any_placement_finite(perf: PerfModel, app: str) -> None:
    for counts in [(4, 4, 2), (3,), (8,), (8, 8), (4,) * 5, (4,) * 16, (2,) * 20, (4,) * 40,
                   (4, 4, 4, 4, 4, 4, 4, 1), (1,) * 64]:
        for bsz in (1, 3.5, perf.max_local_bsz(app), 3 * perf.max_local_bsz(app)):
            st, sy = perf.step_and_sync(app, counts, bsz)
            assert math.isfinite(st) and st > 0 and 0 <= sy <= st


@pytest.mark.parametrize("app", APPS)
def test_beyond_measured_nodes_not_faster(perf: PerfModel, app: str) -> None:
    bsz = perf.max_local_bsz(app) / 4
    t16 = perf.step_time(app, (4,) * 16, bsz)
    assert perf.step_time(app, (4,) * 32, bsz) >= t16
    assert perf.step_time(app, (4,) * 64, bsz) >= perf.step_time(app, (4,) * 32, bsz)


@pytest.mark.parametrize("app", APPS)
def test_unmeasured_node_count_between_neighbours(perf: PerfModel, app: str) -> None:
    bsz = perf.max_local_bsz(app) / 2
    lo, mid, hi = (perf.step_time(app, (4,) * n, bsz) for n in (4, 5, 6))
    assert min(lo, hi) - 1e-12 <= mid <= max(lo, hi) + 1e-12


def test_spreading_costs_what_data_says(perf: PerfModel) -> None:
    # cifar10 measured: 4 GPUs on one node 0.0582 s, one GPU on each of 4 nodes 0.1269 s
    assert perf.step_time("cifar10", (1, 1, 1, 1), 32) > 2 * perf.step_time("cifar10", (4,), 32)
    for app in APPS:
        bsz = perf.max_local_bsz(app) / 2
        assert perf.step_time(app, (2, 2), bsz) > perf.step_time(app, (4,), bsz)


@pytest.mark.parametrize("app", ["bert", "cifar10", "deepspeech2", "imagenet", "yolov3"])
def test_more_workers_not_slower_at_large_batch(perf: PerfModel, app: str) -> None:
    # At the largest measured total batch the data shows these apps scale: 1->2->4 GPUs on one
    # node and 4->8->16 packed GPUs. (ncf is sync-bound and does not: it is left out.)
    job = spec(app, max(perf.measured_batch_sizes(app)))
    rates = [perf.ideal_rate(job, w) for w in (1, 2, 4, 8, 16)]
    assert rates == sorted(rates)
    assert perf.ideal_rate(job, 64) > perf.ideal_rate(job, 4)


def test_iteration_rate_rules(perf: PerfModel) -> None:
    job = spec("cifar10", 512)
    workers = {"n1": 4, "n2": 4}
    assert perf.iteration_rate(job, workers, {}) == pytest.approx(
        1 / perf.step_time("cifar10", (4, 4), 64))
    assert perf.iteration_rate(job, {}, {}) == 0.0
    assert perf.iteration_rate(job, {"n1": 0}, {}) == 0.0
    assert perf.ideal_rate(job, 8) == pytest.approx(perf.iteration_rate(job, workers, {}))
    # gradient accumulation: yolov3 max local batch 8, batch 64 on 2 GPUs -> 32 local, accum 3
    yolo = spec("yolov3", 64)
    st, sy = perf.step_and_sync("yolov3", (2,), 8)
    assert perf.iteration_rate(yolo, {"n": 2}, {}) == pytest.approx(1 / (st + 3 * (st - sy)))


def test_cache_matches_uncached(perf: PerfModel) -> None:
    raw = PerfModel.from_package(cached=False)
    for app in APPS:
        job = spec(app, 256)
        for w in ({"a": 4}, {"a": 4, "b": 4, "c": 1}, {f"n{i}": 3 for i in range(7)}):
            assert raw.iteration_rate(job, w, {}) == perf.iteration_rate(job, w, {})
            assert raw.iteration_rate(job, w, {}) == perf.iteration_rate(job, w, {})


# ---- convergence -------------------------------------------------------------------------

# (app, batch, iteration of row max_epochs-1 of validation-<batch>.csv)
TOTALS = [("bert", 12, 14774), ("bert", 96, 1885), ("cifar10", 128, 39062),
          ("cifar10", 1024, 5722), ("imagenet", 800, 150231), ("yolov3", 8, 103444),
          ("ncf", 256, 194174), ("deepspeech2", 20, 28536)]


@pytest.mark.parametrize("app,batch,iters", TOTALS)
def test_total_iterations_at_measured_batch(perf: PerfModel, app, batch, iters) -> None:
    assert perf.total_iterations(app, batch) == pytest.approx(iters)
    assert perf.epoch_iterations(app, batch) == pytest.approx(iters / perf.max_epochs(app))


def test_total_iterations_between_and_outside(perf: PerfModel) -> None:
    # linear in batch size between measured sizes, as the artifact does
    assert perf.total_iterations("cifar10", 192) == pytest.approx((39062 + 20377) / 2, rel=1e-4)
    sizes = perf.measured_batch_sizes("cifar10")
    assert perf.total_iterations("cifar10", sizes[0] / 2) == pytest.approx(2 * 39062)
    for app in APPS:
        sizes = perf.measured_batch_sizes(app)
        its = [perf.total_iterations(app, b) for b in sizes]
        assert its == sorted(its, reverse=True)  # bigger batch -> fewer iterations


@pytest.mark.parametrize("app", APPS)
def test_metric_improves_with_iterations(perf: PerfModel, app: str) -> None:
    sign = 1.0 if perf.metric_increases(app) else -1.0
    for b in perf.measured_batch_sizes(app):
        total = perf.total_iterations(app, b)
        values = [sign * perf.metric_at(app, b, total * f / 20) for f in range(21)]
        assert values[-1] >= values[0]
        steps = [b - a for a, b in itertools.pairwise(values)]
        assert sum(steps) / len(steps) >= 0  # not worse on average
        half = len(values) // 2
        assert sum(values[half:]) / (len(values) - half) >= sum(values[:half]) / half


def test_metric_interpolates_between_batches(perf: PerfModel) -> None:
    total = perf.total_iterations("cifar10", 192)
    m = perf.metric_at("cifar10", 192, total)
    lo, hi = perf.metric_at("cifar10", 128, 39062), perf.metric_at("cifar10", 256, 20377)
    assert min(lo, hi) <= m <= max(lo, hi)
    assert perf.metric_at("cifar10", 128, 39062) == pytest.approx(0.9448)


def test_ps_synthetic_curve(perf: PerfModel) -> None:
    total = perf.total_iterations("resnet-50", 32)
    losses = [perf.metric_at("resnet-50", 32, total * f / 10) for f in range(11)]
    assert losses == sorted(losses, reverse=True)
    assert losses[0] == pytest.approx(1.1)
    assert not perf.metric_increases("resnet-50")


def test_statistical_efficiency(perf: PerfModel) -> None:
    for app in APPS:
        b0 = perf.measured_batch_sizes(app)[0]
        assert perf.statistical_efficiency(app, b0, 0) == pytest.approx(1.0)
        big = perf.measured_batch_sizes(app)[-1]
        gain = perf.statistical_efficiency(app, big, perf.total_iterations(app, big) / 2)
        assert 1.0 <= gain <= big / b0  # a bigger batch helps, never more than linearly


def test_step_time_normalises_counts(perf: PerfModel) -> None:
    assert perf.step_time("imagenet", (2, 4, 0, 4), 40) == perf.step_time("imagenet", (4, 4, 2), 40)


def test_unknown_names(perf: PerfModel) -> None:
    with pytest.raises(KeyError, match="no measured profile"):
        perf.step_time("alexnet", (1,), 32)
    with pytest.raises(KeyError, match="no PS speed fit"):
        perf.ps_speed("alexnet", 1, 1)
