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
  }, { displayModeBar: false, responsive: true });
})();
