// The cluster map: one heatmap cell per node, one row per leaf; the buttons choose the figure
// the colour shows. A cell's hover names its workloads and, per GPU in MIG mode, its MIG
// instances. Cells without a figure (no fresh heartbeat) stay blank. Each figure has a
// fixed scale (a cool GPU is pale whatever the others are), and the map is drawn again each
// time its data is (parts.js, every 15 s).
(function () {
  const chart = document.getElementById("cluster-map");
  const METRICS = {
    health: { title: gettext("Health"), discrete: true },
    held: { title: gettext("GPUs held"), unit: "", range: (data) => [0, Math.max(1, ...(data.gpus || []))] },
    util: { title: gettext("Utilization"), unit: " %", range: () => [0, 100] },
    memory: { title: gettext("Memory"), unit: " %", range: () => [0, 100] },
    // From a cool idle GPU to one at its slowdown temperature (about 90 °C on H100/H800).
    temperature: { title: gettext("Temperature"), unit: " °C", range: () => [25, 90] },
    power: {
      title: gettext("Power"), unit: " W",
      range: (data) => [0, Math.max(1, ...(data.power || []).filter((w) => w !== null))],
    },
  };
  // ready, cordoned, draining, down (out of service), repairing, failed (a fault took it down)
  const HEALTH_COLOURS = ["#16a34a", "#f59e0b", "#ea580c", "#64748b", "#7c3aed", "#dc2626"];
  let metric = "health";
  let ids = [];  // the node id of each cell, as drawn

  function draw() {
    const data = JSON.parse(document.getElementById("cluster-map-data").textContent);
    const width = Math.max(1, ...(data.col || []).map((c) => c + 1));
    const grid = (values) => {
      const z = data.rows.map(() => new Array(width).fill(null));
      values.forEach((v, i) => { z[data.row[i]][data.col[i]] = v; });
      return z;
    };
    const text = grid((data.name || []).map((name, i) => {
      const jobs = data.jobs[i] ? `<br>${data.jobs[i]}` : "";
      const shares = data.shares && data.shares[i] ? `<br>${data.shares[i]}` : "";
      const mig = data.mig && data.mig[i] ? `<br>MIG · ${data.mig[i]}` : "";
      return `${name} · ${data.health_labels[data.health[i]]}${jobs}${shares}${mig}`;
    }));
    const spec = METRICS[metric];
    const trace = {
      type: "heatmap", z: grid(data[metric] || []), y: data.rows, x: [...Array(width).keys()],
      text, hovertemplate: `%{text}<br>${spec.title}: %{z}${spec.unit || ""}<extra></extra>`,
      xgap: 1, ygap: 1, hoverongaps: false,
    };
    ids = grid(data.id || []);
    if (spec.discrete) {
      const n = data.health_names.length;
      trace.zmin = -0.5; trace.zmax = n - 0.5;
      trace.colorscale = HEALTH_COLOURS.slice(0, n).flatMap((c, i) => [[i / n, c], [(i + 1) / n, c]]);
      trace.colorbar = { tickvals: [...Array(n).keys()], ticktext: data.health_labels };
      trace.hovertemplate = "%{text}<extra></extra>";
    } else {
      [trace.zmin, trace.zmax] = spec.range(data);
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

  document.querySelectorAll("#map-metrics button").forEach((button) => {
    button.addEventListener("click", () => { metric = button.dataset.metric; draw(); });
  });
  draw();
  document.addEventListener("wanka:parts", ({ detail }) => {
    if (detail.includes("map-data")) draw();
  });
  // A cell opens its node's page.
  chart.on("plotly_click", ({ points }) => {
    const [row, col] = points.length ? points[0].pointIndex : [];
    const id = points.length && ids[row][col];
    if (id) location.href = `/ops/nodes/${id}/`;
  });
})();
