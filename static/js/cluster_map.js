// The cluster map: one heatmap cell per node, one row per leaf; the buttons choose the figure
// the colour shows. Cells without a figure (no fresh heartbeat) stay blank.
(function () {
  const data = JSON.parse(document.getElementById("cluster-map-data").textContent);
  const chart = document.getElementById("cluster-map");
  const width = Math.max(1, ...(data.col || []).map((c) => c + 1));
  const METRICS = {
    health: { title: gettext("Health"), discrete: true },
    held: { title: gettext("GPUs held"), unit: "" },
    util: { title: gettext("Utilization"), unit: " %" },
    memory: { title: gettext("Memory"), unit: " %" },
    temperature: { title: gettext("Temperature"), unit: " °C" },
    power: { title: gettext("Power"), unit: " W" },
  };
  const HEALTH_COLOURS = ["#16a34a", "#f59e0b", "#ea580c", "#dc2626", "#7c3aed", "#6b7280"];

  function grid(values) {
    const z = data.rows.map(() => new Array(width).fill(null));
    values.forEach((v, i) => { z[data.row[i]][data.col[i]] = v; });
    return z;
  }

  const healthName = (i) => data.health_labels[i];
  const text = grid((data.name || []).map((name, i) => {
    const jobs = data.jobs[i] ? `<br>${data.jobs[i]}` : "";
    return `${name} · ${healthName(data.health[i])}${jobs}`;
  }));

  function draw(metric) {
    const spec = METRICS[metric];
    const trace = {
      type: "heatmap", z: grid(data[metric] || []), y: data.rows, x: [...Array(width).keys()],
      text, hovertemplate: `%{text}<br>${spec.title}: %{z}${spec.unit || ""}<extra></extra>`,
      xgap: 1, ygap: 1, hoverongaps: false,
    };
    if (spec.discrete) {
      const n = data.health_names.length;
      trace.zmin = -0.5; trace.zmax = n - 0.5;
      trace.colorscale = HEALTH_COLOURS.slice(0, n).flatMap((c, i) => [[i / n, c], [(i + 1) / n, c]]);
      trace.colorbar = {
        tickvals: [...Array(n).keys()], ticktext: data.health_names.map((_, i) => healthName(i)),
      };
      trace.hovertemplate = "%{text}<extra></extra>";
    } else {
      trace.colorscale = "YlOrRd";
      trace.colorbar = { title: { text: spec.title } };
    }
    Plotly.react(chart, [trace], {
      height: Math.max(300, 18 * data.rows.length + 80), margin: { t: 10, r: 10, b: 30, l: 150 },
      yaxis: { autorange: "reversed", automargin: true }, xaxis: { title: { text: gettext("node") } },
    }, { displaylogo: false, modeBarButtons: [["toImage"]], responsive: true });
    document.querySelectorAll("#map-metrics button").forEach((b) => {
      b.setAttribute("aria-pressed", String(b.dataset.metric === metric));
    });
  }

  // A cell opens its node's page.
  const ids = grid(data.id || []);
  document.querySelectorAll("#map-metrics button").forEach((button) => {
    button.addEventListener("click", () => draw(button.dataset.metric));
  });
  draw("health");
  chart.on("plotly_click", ({ points }) => {
    const id = points.length && ids[points[0].pointIndex[0]][points[0].pointIndex[1]];
    if (id) location.href = `/ops/nodes/${id}/`;
  });
})();
