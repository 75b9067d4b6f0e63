// A service's replicas against its load: requests in flight (left axis), replicas ready and
// wanted (right axis), from the autoscaler's samples of the last hour, redrawn every 5 s.
(function () {
  const chart = document.getElementById("service-chart");

  async function draw() {
    const response = await fetch(chart.dataset.samples, { headers: { Accept: "application/json" } });
    if (!response.ok) return;
    const samples = await response.json();
    const x = samples.map((s) => new Date(s.at));
    const line = (name, key, extra) => ({
      type: "scatter", mode: "lines", name, x, y: samples.map((s) => s[key]), ...extra,
    });
    const most = Math.max(1, ...samples.map((s) => Math.max(s.ready || 0, s.desired || 0)));
    Plotly.react(chart, [
      line(gettext("requests in flight"), "in_flight", { fill: "tozeroy", line: { color: "#9ab" } }),
      line(gettext("replicas ready"), "ready", { yaxis: "y2", line: { shape: "hv", color: "#16a" } }),
      line(gettext("replicas wanted"), "desired", {
        yaxis: "y2", line: { shape: "hv", dash: "dot", color: "#c50" },
      }),
    ], {
      height: 320, margin: { t: 10, r: 60, b: 40, l: 60 },
      yaxis: { title: { text: gettext("requests in flight") }, rangemode: "tozero" },
      yaxis2: {
        title: { text: gettext("replicas") }, overlaying: "y", side: "right", rangemode: "tozero",
        tick0: 0, dtick: Math.max(1, Math.ceil(most / 5)),  // whole replicas, five ticks or so
      },
      legend: { orientation: "h", y: -0.2 },
    }, { displaylogo: false, modeBarButtons: [["toImage"]], responsive: true });
  }

  draw();
  setInterval(draw, 5000);
})();
