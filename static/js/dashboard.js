// Cluster utilization: a Plotly chart fed first by the server's history, then live points.
(function () {
  const chart = document.getElementById("utilization-chart");
  const history = JSON.parse(document.getElementById("utilization-history").textContent);
  const time = (p) => new Date(p.ts * 1000);
  const pct = (p, key) => (p.gpus ? (100 * p[key]) / p.gpus : 0);

  Plotly.newPlot(chart, [
    { name: "Allocated", x: history.map(time), y: history.map((p) => pct(p, "allocated")),
      mode: "lines", line: { shape: "hv", color: "#2563eb" }, fill: "tozeroy" },
    { name: "Busy", x: history.map(time), y: history.map((p) => pct(p, "busy")),
      mode: "lines", line: { shape: "hv", color: "#f59e0b" } },
  ], {
    margin: { t: 10, r: 10, b: 40, l: 50 }, height: 300,
    yaxis: { title: { text: "% of GPUs" }, range: [0, 100] },
    legend: { orientation: "h", y: -0.2 },
  }, { displayModeBar: false, responsive: true });

  document.addEventListener("wanka:utilization", ({ detail }) => {
    const { point, summary } = detail;
    Plotly.extendTraces(chart, {
      x: [[time(point)], [time(point)]],
      y: [[pct(point, "allocated")], [pct(point, "busy")]],
    }, [0, 1], 900);
    document.getElementById("tile-gpus").textContent = summary.total.gpus;
    document.getElementById("tile-allocated").textContent = summary.total.allocated;
    document.getElementById("tile-busy").textContent = Math.round(summary.total.busy);
    document.getElementById("tile-nodes").textContent =
      `${summary.total.ready_nodes}/${summary.total.nodes}`;
    for (const g of summary.groups) {
      const row = document.querySelector(`[data-group="${g.datacenter}/${g.gpu_model}"]`);
      if (!row) continue;
      row.querySelector('[data-k="allocated"]').textContent = g.allocated;
      row.querySelector('[data-k="busy"]').textContent = g.busy;
    }
  });
})();
