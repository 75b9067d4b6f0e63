// A job's time, phase by phase: one horizontal bar per phase, spans laid along the clock;
// drawn again whenever its part of the page is (parts.js).
(function () {
  const colors = {
    queued: "#94a3b8", starting: "#a78bfa", productive: "#16a34a",
    checkpoint_stall: "#f59e0b", lost: "#dc2626", recovering: "#2563eb",
  };
  const names = {
    queued: gettext("queued"), starting: gettext("starting"), productive: gettext("productive"),
    checkpoint_stall: gettext("checkpoint stall"), lost: gettext("lost"),
    recovering: gettext("recovering"),
  };

  function draw() {
    const chart = document.getElementById("ettr-timeline");
    const spans = JSON.parse(document.getElementById("ettr-spans").textContent);
    if (!chart || !spans.length) return;
    const phases = Object.keys(colors).filter((p) => spans.some((s) => s.phase === p));
    const traces = phases.map((phase) => {
      const mine = spans.filter((s) => s.phase === phase);
      return {
        type: "bar", orientation: "h", name: names[phase],
        y: mine.map(() => names[phase]),
        base: mine.map((s) => new Date(s.start * 1000)),
        x: mine.map((s) => (s.end - s.start) * 1000),
        marker: { color: colors[phase] },
        hovertemplate: gettext("%{base|%H:%M:%S} for %{customdata:.0f} s") + "<extra></extra>",
        customdata: mine.map((s) => s.end - s.start),
      };
    });
    Plotly.newPlot(chart, traces, {
      barmode: "overlay", showlegend: false, height: 60 + 32 * phases.length,
      margin: { t: 10, r: 10, b: 30, l: 120 }, xaxis: { type: "date" },
    }, { displaylogo: false, modeBarButtons: [["toImage"]], responsive: true });
  }

  draw();
  document.addEventListener("wanka:parts", ({ detail }) => {
    if (detail.includes("job-ettr")) draw();
  });
})();
