// The fault drill page: faults and recoveries as they happen.
(function () {
  const feed = document.getElementById("fault-feed");
  const table = document.querySelector("#recoveries tbody");

  document.addEventListener("wanka:fault", ({ detail }) => {
    feed.querySelector(".none")?.remove();
    feed.querySelector(`[data-fault="${detail.id}"]`)?.remove();
    const item = document.createElement("li");
    item.dataset.fault = detail.id;
    item.textContent = `${new Date().toTimeString().slice(0, 8)} ${detail.kind} on ${detail.node}` +
      ` (${detail.title}); node ${detail.node_health}; ${detail.jobs_hit} job(s) hit`;
    feed.prepend(item);
  });

  document.addEventListener("wanka:recovery", ({ detail }) => {
    let row = table.querySelector(`[data-recovery="${detail.id}"]`);
    if (!row) {
      row = table.insertRow(0);
      row.dataset.recovery = detail.id;
      row.innerHTML = "<td></td><td></td><td></td><td data-k='step'></td>" +
        "<td data-k='outcome'></td><td></td><td data-k='detail'></td>";
      row.cells[0].textContent = new Date().toTimeString().slice(0, 8);
      row.cells[1].textContent = detail.workload;
    }
    row.querySelector("[data-k=step]").textContent = detail.step;
    row.querySelector("[data-k=outcome]").textContent = detail.outcome || "—";
    row.querySelector("[data-k=detail]").textContent = detail.detail;
  });
})();
