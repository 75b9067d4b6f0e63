// GPU-hours per day (per hour for short windows), one stacked bar per value of the first key.
(function () {
  const data = JSON.parse(document.getElementById("usage-series").textContent);
  const x = data.starts.map((s) => new Date(s));
  const traces = Object.entries(data.series).map(([name, hours]) => ({
    type: "bar", name: name || "—", x, y: hours,
    hovertemplate: `${name || "—"}: %{y:.1f} ${gettext("GPU-hours")}<extra></extra>`,
  }));
  Plotly.newPlot(document.getElementById("usage-chart"), traces, {
    barmode: "stack", height: 320, margin: { t: 10, r: 10, b: 40, l: 60 },
    yaxis: { title: { text: data.hourly ? gettext("GPU-hours per hour") : gettext("GPU-hours per day") } },
    legend: { orientation: "h", y: -0.2, title: { text: `${data.key}: ` } },
  }, { displaylogo: false, modeBarButtons: [["toImage"]], responsive: true });
})();
