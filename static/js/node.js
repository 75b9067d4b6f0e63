// One node's GPUs now, DCGM-style: utilization and temperature per GPU side by side.
(function () {
  const chart = document.getElementById("node-gpus-chart");
  const gpus = JSON.parse(document.getElementById("node-gpus-data").textContent);
  if (!chart || !gpus) return;
  const x = gpus.map((g) => `GPU ${g.index}`);
  Plotly.newPlot(chart, [
    { type: "bar", name: gettext("Utilization") + " (%)", x, y: gpus.map((g) => g.util),
      marker: { color: "#2563eb" } },
    { type: "bar", name: gettext("Temperature") + " (°C)", x, y: gpus.map((g) => g.temperature_c),
      marker: { color: "#ea580c" } },
  ], {
    barmode: "group", height: 260, margin: { t: 10, r: 10, b: 40, l: 40 },
    legend: { orientation: "h", y: -0.25 }, yaxis: { rangemode: "tozero" },
  }, { displaylogo: false, modeBarButtons: [["toImage"]], responsive: true });
})();

// Each GPU over time, as Grafana's DCGM dashboard draws it: a chart per figure, a line per
// GPU. The page brings its range's points; the range buttons fetch another range's.
(function () {
  const section = document.getElementById("node-telemetry");
  if (!section) return;
  const FIGURES = [
    { key: "util", chart: "gpu-util-chart", title: gettext("Utilization") + " (%)", range: [0, 100] },
    { key: "memory_used_mb", chart: "gpu-memory-chart", title: gettext("Memory") + " (GiB)",
      scale: 1 / 1024 },
    { key: "temperature_c", chart: "gpu-temperature-chart", title: gettext("Temperature") + " (°C)" },
    { key: "power_w", chart: "gpu-power-chart", title: gettext("Power") + " (W)" },
  ];
  const links = section.querySelectorAll("#node-telemetry-ranges [data-range]");
  const csv = document.getElementById("node-telemetry-csv");
  const date = (t) => new Date(t * 1000);

  function draw(data) {
    const x = data.ts.map(date);
    const empty = data.ts.length === 0;
    for (const figure of FIGURES) {
      const scale = figure.scale || 1;
      const traces = data.gpus.map((g) => ({
        type: "scatter", mode: "lines", name: `GPU ${g.index}`, x,
        y: g[figure.key].map((v) => (v === null ? null : v * scale)),
        hovertemplate: `%{y:.1f}`,
      }));
      Plotly.react(document.getElementById(figure.chart), traces, {
        height: 260, margin: { t: 30, r: 10, b: 30, l: 50 }, hovermode: "x unified",
        title: { text: figure.title, font: { size: 13 } }, showlegend: true,
        xaxis: { type: "date", range: [date(data.since), date(data.until)] },
        yaxis: figure.range ? { range: figure.range } : { rangemode: "tozero" },
        annotations: empty ? [{ text: gettext("No telemetry yet"), xref: "paper", yref: "paper",
          x: 0.5, y: 0.5, showarrow: false, font: { color: "#64748b" } }] : [],
      }, { displaylogo: false, modeBarButtons: [["toImage"]], responsive: true });
    }
    links.forEach((link) => {
      const chosen = link.dataset.range === data.range;
      link.classList.toggle("quiet", !chosen);
      if (chosen) link.setAttribute("aria-current", "true");
      else link.removeAttribute("aria-current");
    });
    csv.search = `?range=${data.range}`;
  }

  links.forEach((link) => link.addEventListener("click", async (event) => {
    event.preventDefault();
    const span = link.dataset.range;
    const response = await fetch(`${section.dataset.url}?range=${span}`, {
      headers: { Accept: "application/json" },
    });
    if (!response.ok) return;
    draw(await response.json());
    history.replaceState(null, "", `?range=${span}`);  // a reload keeps the range
  }));
  draw(JSON.parse(document.getElementById("node-telemetry-data").textContent));
})();
