// The fault drill page: faults and recoveries as they happen.
(function () {
  const feed = document.getElementById("fault-feed");
  const table = document.querySelector("#recoveries tbody");
  const form = document.getElementById("drill-form");
  const faultOf = new Map();  // job name -> its latest fault, for the rows made live

  // A recovery's event names its job, the fault's event the jobs it hit; either comes first.
  function nameFaults() {
    table.querySelectorAll("[data-k=fault]:empty").forEach((cell) => {
      cell.textContent = faultOf.get(cell.parentElement.cells[1].textContent) || "";
    });
  }

  // Sent in place: a reload would drop the live connection just when the fault arrives, and
  // events sent before the new page's socket opens would never show.
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const button = form.querySelector("button[type=submit]");
    button.disabled = true;
    document.querySelectorAll("main > .flash").forEach((el) => el.remove());
    try {
      const response = await fetch(location.pathname, { method: "POST", body: new FormData(form) });
      if (!response.ok) {
        throw new Error(interpolate(gettext("the portal answered %(status)s"), { status: response.status }, true));
      }
      const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
      document.querySelector("main").prepend(...fresh.querySelectorAll("main > .flash"));
      document.getElementById("drills").replaceWith(fresh.getElementById("drills"));
    } catch (error) {
      const flash = document.createElement("p");
      flash.className = "flash error";
      flash.textContent = interpolate(gettext("Not sent: %(error)s."), { error: error.message }, true);
      document.querySelector("main").prepend(flash);
    } finally {
      button.disabled = false;
    }
  });

  document.addEventListener("wanka:fault", ({ detail }) => {
    feed.querySelector(".none")?.remove();
    feed.querySelector(`[data-fault="${detail.id}"]`)?.remove();
    const item = document.createElement("li");
    item.dataset.fault = detail.id;
    const where = interpolate(gettext("%(kind)s on %(node)s"), detail, true);
    item.textContent = `${new Date().toTimeString().slice(0, 8)} ${where} (${detail.title}); ` +
      interpolate(gettext("node %(node_health)s; %(jobs_hit)s job(s) hit"), detail, true);
    feed.prepend(item);
    (detail.workloads || []).forEach((job) => faultOf.set(job, where));
    nameFaults();
  });

  document.addEventListener("wanka:recovery", ({ detail }) => {
    let row = table.querySelector(`[data-recovery="${detail.id}"]`);
    if (!row) {
      row = table.insertRow(0);
      row.dataset.recovery = detail.id;
      row.innerHTML = "<td></td><td></td><td data-k='fault'></td><td data-k='step'></td>" +
        "<td data-k='outcome'></td><td data-k='resume'></td><td data-k='detail'></td>";
      row.cells[0].textContent = new Date().toTimeString().slice(0, 8);
      row.cells[1].textContent = detail.workload;
    }
    row.querySelector("[data-k=step]").textContent = wankaWord(detail.step);
    row.querySelector("[data-k=outcome]").textContent = detail.outcome ? wankaWord(detail.outcome) : "—";
    row.querySelector("[data-k=resume]").textContent =
      detail.resume_step === null ? "—" : interpolate(gettext("step %(step)s"), { step: detail.resume_step }, true);
    row.querySelector("[data-k=detail]").textContent = detail.detail;
    nameFaults();
  });
})();
