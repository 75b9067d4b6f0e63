// Cluster utilization: a Plotly chart fed first by the server's history, then live points.
(function () {
  const chart = document.getElementById("utilization-chart");
  const history = JSON.parse(document.getElementById("utilization-history").textContent);
  const time = (p) => new Date(p.ts * 1000);
  const pct = (p, key) => (p.gpus ? (100 * p[key]) / p.gpus : 0);

  Plotly.newPlot(chart, [
    { name: gettext("Allocated"), x: history.map(time), y: history.map((p) => pct(p, "allocated")),
      mode: "lines", line: { shape: "hv", color: "#2563eb" }, fill: "tozeroy" },
    { name: gettext("Busy"), x: history.map(time), y: history.map((p) => pct(p, "busy")),
      mode: "lines", line: { shape: "hv", color: "#f59e0b" } },
  ], {
    margin: { t: 10, r: 10, b: 40, l: 50 }, height: 300,
    yaxis: { title: { text: gettext("Share of GPUs (%)") }, range: [0, 100] },
    legend: { orientation: "h", y: -0.2 },
  }, { displaylogo: false, modeBarButtons: [["toImage"]], responsive: true });

  document.addEventListener("wanka:utilization", ({ detail }) => {
    const { point, summary } = detail;
    if (chart.dataset.live) {  // the last 30 minutes go on live; longer ranges are rolled up
      Plotly.extendTraces(chart, {
        x: [[time(point)], [time(point)]],
        y: [[pct(point, "allocated")], [pct(point, "busy")]],
      }, [0, 1], 900);
    }
    document.getElementById("tile-gpus").textContent = summary.total.gpus;
    document.getElementById("tile-allocated").textContent = summary.total.allocated;
    document.getElementById("tile-busy").textContent = Math.round(summary.total.busy);
    document.getElementById("tile-nodes").textContent =
      `${summary.total.ready_nodes}/${summary.total.nodes}`;
    for (const g of summary.groups) {
      const row = document.querySelector(`[data-group="${g.datacenter}/${g.gpu_model}"]`);
      if (!row) continue;
      row.querySelector('[data-k="ready"]').textContent = `${g.ready_nodes}/${g.nodes}`;
      row.querySelector('[data-k="allocated"]').textContent = g.allocated;
      row.querySelector('[data-k="busy"]').textContent = g.busy;
    }
  });
})();

// ETTR over the chosen range (a day, a week or a month), slice by slice, and the fault feed,
// newest first and live.
(function () {
  const points = JSON.parse(document.getElementById("ettr-series").textContent);
  const shown = points.filter((p) => p.ettr !== null);
  // The axis spans the whole range whatever has a figure (one point made it a millisecond wide).
  const width = points.length > 1 ? points[1].start - points[0].start : 3600;
  const span = [points[0].start, points[points.length - 1].start + width];
  Plotly.newPlot(document.getElementById("ettr-chart"), [
    { name: "ETTR", x: shown.map((p) => new Date(p.start * 1000)), y: shown.map((p) => p.ettr),
      mode: "lines+markers", line: { color: "#16a34a" } },
    { name: gettext("Goodput"), x: shown.map((p) => new Date(p.start * 1000)),
      y: shown.map((p) => p.goodput), mode: "lines", line: { color: "#64748b", dash: "dot" } },
  ], {
    margin: { t: 10, r: 10, b: 40, l: 50 }, height: 300, yaxis: { range: [0, 1.02] },
    xaxis: { type: "date", range: span.map((t) => new Date(t * 1000)) },
    legend: { orientation: "h", y: -0.2 },
  }, { displaylogo: false, modeBarButtons: [["toImage"]], responsive: true });

  const feed = document.getElementById("fault-feed");
  document.addEventListener("wanka:fault", ({ detail }) => {
    const old = feed.querySelector(`[data-fault="${detail.id}"]`);
    if (old) old.remove(); // operators hear a fault twice: keep the fuller message
    feed.querySelector(".none")?.remove();
    const item = document.createElement("li");
    item.dataset.fault = detail.id;
    item.innerHTML = `<time>${new Date().toTimeString().slice(0, 8)}</time> <b></b> ` +
      `${gettext("on")} <span></span> `;
    item.querySelector("b").textContent = detail.kind;
    item.querySelector("span").textContent = detail.node;
    const jobs = detail.workloads.length
      ? " · " + interpolate(gettext("hit %(jobs)s"), { jobs: detail.workloads.join(", ") }, true)
      : "";
    item.append(`${detail.title}${jobs}`);
    feed.prepend(item);
    while (feed.children.length > 10) feed.lastElementChild.remove();
  });
})();

// The tide: GPUs held by inference and by training over the chosen range, stacked.
(function () {
  const tide = JSON.parse(document.getElementById("tide-series").textContent);
  const x = tide.starts.map((s) => new Date(s));
  const area = (name, y, color) => ({
    name, x, y, type: "scatter", mode: "lines", stackgroup: "gpus",
    line: { shape: "hv", color }, hovertemplate: `${name}: %{y:.0f} ${gettext("GPUs")}<extra></extra>`,
  });
  Plotly.newPlot(document.getElementById("tide-chart"), [
    area(gettext("Inference"), tide.inference, "#c2410c"),
    area(gettext("Training"), tide.training, "#2563eb"),
  ], {
    margin: { t: 10, r: 10, b: 40, l: 50 }, height: 280,
    yaxis: { title: { text: gettext("GPUs held") }, rangemode: "tozero" },
    legend: { orientation: "h", y: -0.2 },
  }, { displaylogo: false, modeBarButtons: [["toImage"]], responsive: true });
})();
