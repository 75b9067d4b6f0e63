"""A self-contained HTML report of a simulation's results, with Plotly figures.

Figures: allocated GPUs over time, the queueing-delay CDF and the ETTR of each policy, and each
queue's mean GPUs against its guarantee; a table of the headline figures per policy above
them. A run with an inference service adds the tide: the GPUs its replicas and the other work
held, hour by hour, under each policy. Plotly.js comes from the plotly package: by default
embedded once, gzipped and base64-encoded, and unpacked by the browser (`DecompressionStream`),
which keeps the file near 2 MB instead of the 4.8 MB of the plain library; `plotlyjs="inline"`
embeds it as is, for browsers without `DecompressionStream`.

Its words pass through `gettext`, English by default: the portal renders the report in its
reader's language with Django's (`makemessages` finds each `gettext("...")` here).
"""

from __future__ import annotations

import base64
import gzip
import html
import json
from collections.abc import Callable
from functools import cache
from pathlib import Path

import plotly
import plotly.graph_objects as go
from plotly.subplots import make_subplots

MAX_POINTS = 1500  # per line of a time series figure
TEMPLATE = "plotly_white"
Words = Callable[[str], str]


def english(text: str) -> str:
    return text


def write_html(
    results: dict, path: str | Path, title: str = "Wanka what-if simulation", plotlyjs: str = "gzip"
) -> None:
    """Write the report of `runner.run`'s results to `path`."""
    Path(path).write_text(render(results, title, plotlyjs))


def render(
    results: dict, title: str, plotlyjs: str = "gzip", gettext: Words = english, lang: str = "en"
) -> str:
    """The report as one HTML page, in the language of `gettext` (`lang`)."""
    figures = {
        "utilization": utilization_figure(results, gettext),
        "tide": tide_figure(results, gettext),
        "waits": wait_cdf_figure(results, gettext),
        "shares": share_figure(results, gettext),
        "ettr": ettr_figure(results, gettext),
    }
    figures = {name: fig for name, fig in figures.items() if fig is not None}
    divs = "\n".join(_div(name, fig) for name, fig in figures.items())
    specs = script_json({name: json.loads(fig.to_json()) for name, fig in figures.items()})
    large = next(iter(results["policies"].values()), {}).get("large_gangs", {}).get("min_gpus")
    return PAGE.format(
        lang=lang,
        definitions=definitions(large, gettext),
        title=html.escape(title),
        summary=summary_table(results, gettext),
        setup=setup_text(results, gettext),
        divs=divs,
        figures=specs,
        plotly=plotly_script(plotlyjs),
    )


def _div(name: str, fig: go.Figure) -> str:
    """The figure's place on the page, as tall as its layout asks where it asks."""
    height = fig.layout.height
    style = f' style="height: {height}px"' if height else ""
    return f'<div id="{name}" class="figure"{style}></div>'


def script_json(data: object) -> str:
    """JSON to embed in a <script>: "<", ">" and "&" escaped, so that no name in it (a queue
    of a trace, say) can close the script and run as markup (as Django's json_script does)."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


@cache  # the same 2 MB for every report
def plotly_script(mode: str) -> str:
    """The script tags that define `window.Plotly` and then call `drawFigures()`."""
    source = (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_bytes()
    if mode == "inline":
        return f"<script>{source.decode()}</script><script>drawFigures()</script>"
    if mode != "gzip":
        raise ValueError(f"plotlyjs must be gzip or inline, not {mode!r}")
    packed = base64.b64encode(gzip.compress(source, compresslevel=9, mtime=0)).decode()
    return f'<script id="plotly-gz" type="text/plain">{packed}</script>\n<script>{UNPACK}</script>'


UNPACK = """(async () => {
  const text = document.getElementById("plotly-gz").textContent;
  const bytes = Uint8Array.from(atob(text), c => c.charCodeAt(0));
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  const script = document.createElement("script");
  script.textContent = await new Response(stream).text();
  document.head.appendChild(script);
  drawFigures();
})();"""

PAGE = """<!DOCTYPE html>
<html lang="{lang}"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }}
table {{ border-collapse: collapse; font-size: 0.9em; }}
th, td {{ border-bottom: 1px solid #ddd; padding: 0.3em 0.7em; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
.figure {{ height: 420px; margin: 1.5em 0; }}
</style></head><body>
<h1>{title}</h1>
{setup}
{summary}
{divs}
{definitions}
<script>
const FIGURES = {figures};
function drawFigures() {{
  for (const [id, fig] of Object.entries(FIGURES)) {{
    Plotly.newPlot(id, fig.data, fig.layout, {{responsive: true, displaylogo: false}});
  }}
}}
</script>
{plotly}
</body></html>
"""


def setup_text(results: dict, gettext: Words = english) -> str:
    cluster, trace, config = results["cluster"], results["trace"], results["config"]
    gpus = ", ".join(f"{count:,} {model}" for model, count in cluster["gpus"].items())
    setup = gettext(
        "Cluster <b>{name}</b>: {nodes} nodes ({gpus}) in {datacenters} data center(s), {pods} "
        "pods, {leaves} leaves; {queues} queues. Trace: {jobs} jobs over {days} days, "
        "{gpu_hours} GPU-hours. Engine cycle every {cycle} s at most; faults {faults} per "
        "million GPU-hours; seed {seed}."
    ).format(
        name=html.escape(cluster["name"]),
        nodes=f"{cluster['nodes']:,}",
        gpus=gpus,
        datacenters=cluster["datacenters"],
        pods=cluster["pods"],
        leaves=cluster["leaves"],
        queues=len(cluster["queues"]),
        jobs=f"{trace['jobs']:,}",
        days=f"{trace['submit_span_days']:.1f}",
        gpu_hours=f"{trace['gpu_hours']:,.0f}",
        cycle=f"{config['cycle_s']:g}",
        faults=f"{config['failures_per_gpu_hour'] * 1e6:.2f}",
        seed=config["seed"],
    )
    return f"<p>{setup}</p>" + service_text(results, gettext) + preemption_text(results, gettext)


def service_text(results: dict, gettext: Words = english) -> str:
    """What the inference service added beside the trace was, and where the run stopped."""
    service = results.get("service")
    if service is None:
        return ""
    said = gettext(
        "Beside the trace, the inference service <b>{name}</b> ({trace} trace under the daily "
        "curve, peak at 14:00), its peak {peak} {model} GPUs ({share} of {model_gpus}) in "
        "replicas of {replica} GPUs, queue {queue} with its peak as quota. The run stopped at "
        "its horizon (a run with a service needs one), hour {hour} of the simulated clock."
    ).format(
        name=html.escape(service["name"]),
        trace=html.escape(service["trace"]),
        peak=f"{service['peak_gpus']:,}",
        model=html.escape(service["gpu_model"]),
        share=f"{service['share']:.0%}",
        model_gpus=f"{service['model_gpus']:,}",
        replica=service["replica_gpus"],
        queue=html.escape(service["queue"]),
        hour=f"{results['config']['horizon_s'] / 3600:,.1f}",
    )
    return f"<p>{said}</p>"


def preemption_text(results: dict, gettext: Words = english) -> str:
    """Which preemption settings each policy ran with, in Kueue's names."""
    items = []
    for name, figures in results["policies"].items():
        settings = "; ".join(
            (
                gettext("{count} queue: {words}")
                if count == 1
                else gettext("{count} queues: {words}")
            ).format(count=count, words=html.escape(words))
            for words, count in figures.get("preemption", {}).items()
        )
        items.append(f"<li><b>{html.escape(name)}</b>: {settings}</li>")
    said = gettext("Preemption settings (Kueue's names):")
    return f"<p>{said}</p><ul>{''.join(items)}</ul>"


def gettext_noop(text: str) -> str:
    """Marks `text` for translation where it is said later (`makemessages` finds it)."""
    return text


ROWS = (
    (
        gettext_noop("GPUs allocated (mean)"),
        lambda p, gettext: f"{p['utilization']['allocated']:.1%}",
    ),
    (gettext_noop("GPUs busy (mean)"), lambda p, gettext: f"{p['utilization']['busy']:.1%}"),
    (
        gettext_noop("queueing delay, mean"),
        lambda p, gettext: _duration(p["wait_s"]["mean"], gettext),
    ),
    (
        gettext_noop("queueing delay, median"),
        lambda p, gettext: _duration(p["wait_s"]["median"], gettext),
    ),
    (
        gettext_noop("queueing delay, p95"),
        lambda p, gettext: _duration(p["wait_s"]["p95"], gettext),
    ),
    (
        gettext_noop("queueing delay, p99"),
        lambda p, gettext: _duration(p["wait_s"]["p99"], gettext),
    ),
    (
        gettext_noop("large gangs' wait, mean"),
        lambda p, gettext: _duration(p["large_gangs"]["wait_s"]["mean"], gettext),
    ),
    (
        gettext_noop("large gangs' wait, p95"),
        lambda p, gettext: _duration(p["large_gangs"]["wait_s"]["p95"], gettext),
    ),
    (gettext_noop("JCT, mean"), lambda p, gettext: _duration(p["jct_s"]["mean"], gettext)),
    (gettext_noop("makespan"), lambda p, gettext: _duration(p["makespan_s"], gettext)),
    (
        gettext_noop("jobs finished / never started"),
        lambda p, gettext: f"{p['finished']:,} / {p['never_started']:,}",
    ),
    (
        gettext_noop("preemptions (GPU-h lost)"),
        lambda p, gettext: (
            f"{p['preemptions']['count']:,} ({p['preemptions']['gpu_hours_lost']:,.0f})"
        ),
    ),
    (
        gettext_noop("shrinks (throughput / GPUs kept)"),
        lambda p, gettext: _shrinks(p["preemptions"]),
    ),
    (
        gettext_noop("moves: to a faster GPU model / to defragment"),
        lambda p, gettext: (
            f"{p['preemptions']['moves']:,} / {p['preemptions'].get('defrag_moves', 0):,}"
        ),
    ),
    (
        gettext_noop("faults (GPU-h lost)"),
        lambda p, gettext: f"{p['faults']['count']:,} ({p['faults']['gpu_hours_lost']:,.0f})",
    ),
    (gettext_noop("ETTR, overall"), lambda p, gettext: f"{p['ettr']['overall'] or 0:.3f}"),
    (
        gettext_noop("finish-time fairness rho, mean / p95"),
        lambda p, gettext: f"{p['fairness_rho']['mean']:.2f} / {p['fairness_rho']['p95']:.2f}",
    ),
    (
        gettext_noop("fragmented GPUs (mean)"),
        lambda p, gettext: f"{p['fragmentation']['mean_gpus']:,.1f}",
    ),
    (gettext_noop("guarantee violations"), lambda p, gettext: f"{p['guarantee']['violations']:,}"),
)


def definitions(large: int | None, gettext: Words = english) -> str:
    """What the figures mean."""
    items = (
        gettext(
            "Queueing delay: all the time a job waited, over every spell (a preempted job waits "
            "again), of the jobs that started; jobs that never started are counted apart."
        ),
        gettext("Large gangs: jobs of at least {large} GPUs.").format(large=large),
        gettext(
            "Guarantee: a queue's nominal quota, what reclaim gives back. A violation: a job fit "
            "in what was left of its queue's guarantee and waited two cycle periods or more while "
            "it did (its clock starts at its submission or requeue, or when jobs of its size start "
            "to fit, and starts again whenever the queue's guarantee is filled); counted once per "
            "spell of such cycles per queue."
        ),
        gettext(
            "ETTR: productive compute time (not lost to faults or preemptions) over wall time "
            "since the job was first admitted; overall weighted by GPUs."
        ),
        gettext(
            "Finish-time fairness rho (Themis): a job's completion time over its duration alone "
            "(its trace duration: an empty cluster, no faults); 1 is ideal."
        ),
        gettext(
            "Fragmented GPUs: free GPUs that no pending job of their GPU model could use, while "
            "work waits."
        ),
        gettext(
            "Baselines: <b>fifo</b> one strict-FIFO queue per region, gangs, no preemption; "
            "<b>static</b> each queue only its own quota, no borrowing or lending; "
            "<b>no-reclaim</b> priority with borrowing, never reclaiming. All run the production "
            "engine."
        ),
    )
    heading = gettext("Definitions")
    return f"<h2>{heading}</h2><ul>" + "".join(f"<li>{item}</li>" for item in items) + "</ul>"


def summary_table(results: dict, gettext: Words = english) -> str:
    policies = results["policies"]
    head = "".join(f"<th>{html.escape(name)}</th>" for name in policies)
    rows = "".join(
        f"<tr><td>{gettext(label)}</td>"
        + "".join(f"<td>{cell(p, gettext)}</td>" for p in policies.values())
        + "</tr>"
        for label, cell in ROWS
    )
    return f"<table><tr><th></th>{head}</tr>{rows}</table>"


def _shrinks(preemptions: dict) -> str:
    """How many shrinks, and what they kept on average."""
    count, kept = preemptions["shrinks"], preemptions["shrink_throughput_kept"]
    if not count:
        return "0"
    return f"{count:,} ({kept:.0%} / {preemptions['shrink_gpus_kept']:.0%})"


def _duration(seconds: float, gettext: Words = english) -> str:
    if seconds < 120:
        return gettext("{n} s").format(n=f"{seconds:.0f}")
    if seconds < 7200:
        return gettext("{n} min").format(n=f"{seconds / 60:.1f}")
    if seconds < 4 * 86400:
        return gettext("{n} h").format(n=f"{seconds / 3600:.1f}")
    return gettext("{n} d").format(n=f"{seconds / 86400:.1f}")


def _layout(title: str, xaxis: dict, yaxis: dict) -> dict:
    return {
        "title": {"text": title},
        "xaxis": xaxis,
        "yaxis": yaxis,
        "template": TEMPLATE,
        "legend": {"orientation": "h", "y": -0.2},
        "margin": {"t": 50},
    }


def utilization_figure(results: dict, gettext: Words = english) -> go.Figure:
    fig = go.Figure(
        layout=_layout(
            gettext("GPUs allocated over time"),
            {"title": {"text": gettext("day")}},
            # The whole scale: a light load read "0 %, 0 %, 0 %" on an axis fitted to it.
            {"title": {"text": gettext("share of GPUs")}, "tickformat": ".0%", "range": [0, 1.02]},
        )
    )
    for name, figures in results["policies"].items():
        series = figures["series"]
        days, values = _downsample([t / 86400 for t in series["t_s"]], series["allocated"])
        fig.add_trace(go.Scatter(x=days, y=values, name=name, mode="lines"))
    return fig


TIDE_LAYERS = (
    ("inference", gettext_noop("inference (the service's replicas)"), "#d62728"),
    ("other", gettext_noop("training (all other work)"), "#1f77b4"),
)


def tide_figure(results: dict, gettext: Words = english) -> go.Figure | None:
    """The tide: GPUs held by the service's replicas and by the other work, stacked, mean per
    hour, one row per policy, under the cluster's GPUs; None for a run without a service."""
    tides = {name: p for name, p in results["policies"].items() if "tide" in p}
    if not tides:
        return None
    gpus = sum(results["cluster"]["gpus"].values())
    found = gettext("{policy}: {share} of requests found a replica with room")
    titles = [
        found.format(policy=name, share=f"{p['service']['slo_attainment']:.2%}")
        for name, p in tides.items()
    ]
    fig = make_subplots(rows=len(tides), cols=1, shared_xaxes=True, subplot_titles=titles)
    for row, (name, figures) in enumerate(tides.items(), start=1):
        tide = figures["tide"]
        hours = [(t + tide["step_s"] / 2) / 3600 for t in tide["t_s"]]
        for key, label, color in TIDE_LAYERS:
            xs, ys = _downsample(hours, tide[key])
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=ys,
                    name=gettext(label),
                    mode="lines",
                    stackgroup=name,
                    line={"color": color},
                    legendgroup=key,
                    showlegend=row == 1,
                ),
                row=row,
                col=1,
            )
        fig.add_trace(
            go.Scatter(
                x=[hours[0], hours[-1]] if hours else [],
                y=[gpus, gpus],
                name=gettext("the cluster's GPUs"),
                mode="lines",
                line={"color": "black", "dash": "dash"},
                legendgroup="cluster",
                showlegend=row == 1,
            ),
            row=row,
            col=1,
        )
        fig.update_yaxes(title_text="GPUs", range=[0, gpus * 1.05], row=row, col=1)
    fig.update_xaxes(title_text=gettext("hour"), row=len(tides), col=1)
    fig.update_layout(
        title={"text": gettext("The tide: GPUs held by inference and by training, mean per hour")},
        template=TEMPLATE,
        legend={"orientation": "h", "y": -0.15},
        margin={"t": 80},
        height=200 + 220 * len(tides),
    )
    return fig


def _downsample(xs: list[float], ys: list[float]) -> tuple[list[float], list[float]]:
    """At most MAX_POINTS points: means of equal runs of consecutive points."""
    if len(xs) <= MAX_POINTS:
        return xs, ys
    step = -(-len(xs) // MAX_POINTS)
    chunks = range(0, len(xs), step)
    return (
        [round(xs[i], 4) for i in chunks],
        [round(sum(ys[i : i + step]) / len(ys[i : i + step]), 6) for i in chunks],
    )


def wait_cdf_figure(results: dict, gettext: Words = english) -> go.Figure:
    fig = go.Figure(
        layout=_layout(
            gettext("Queueing delay, CDF (delays under 1 s drawn at 1 s)"),
            {"title": {"text": gettext("queueing delay (s)")}, "type": "log"},
            {"title": {"text": gettext("share of jobs")}, "tickformat": ".0%"},
        )
    )
    for name, figures in results["policies"].items():
        points = figures["wait_cdf_s"]
        share = [i / (len(points) - 1) for i in range(len(points))] if len(points) > 1 else []
        fig.add_trace(
            go.Scatter(
                x=[max(1.0, w) for w in points],
                y=share,
                name=name,
                mode="lines",
                line={"shape": "hv"},
            )
        )
    return fig


def share_figure(results: dict, gettext: Words = english) -> go.Figure:
    policies = results["policies"]
    queues = sorted(results["cluster"]["queues"])
    fig = go.Figure(
        layout=_layout(
            gettext("Mean GPUs per queue, against its guarantee"),
            {"title": {"text": gettext("queue")}},
            {"title": {"text": "GPUs"}},
        )
    )
    fig.update_layout(barmode="group")
    for name, figures in policies.items():
        by_queue = figures["by_queue"]
        fig.add_trace(
            go.Bar(x=queues, y=[by_queue.get(q, {}).get("mean_gpus", 0) for q in queues], name=name)
        )
    first = next(iter(policies.values()), {"by_queue": {}})["by_queue"]
    fig.add_trace(
        go.Scatter(
            x=queues,
            y=[first.get(q, {}).get("guarantee_gpus", 0) for q in queues],
            name=gettext("guarantee"),
            mode="markers",
            marker={"symbol": "line-ew-open", "size": 24, "color": "black"},
        )
    )
    return fig


def ettr_figure(results: dict, gettext: Words = english) -> go.Figure:
    fig = go.Figure(
        layout=_layout(
            gettext("Effective training time ratio by job size"),
            {"title": {"text": gettext("GPUs per job")}},
            {"title": {"text": "ETTR"}, "range": [0, 1]},
        )
    )
    fig.update_layout(barmode="group")
    for name, figures in results["policies"].items():
        ettr = figures["ettr"]
        labels = [gettext("all"), *ettr["by_size"]]
        values = [ettr["overall"] or 0, *ettr["by_size"].values()]
        fig.add_trace(go.Bar(x=labels, y=values, name=name))
    return fig
