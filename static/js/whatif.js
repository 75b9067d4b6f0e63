// A what-if run's page: its progress bar moves live, and its report appears when done. Every
// few seconds it also asks where the run stands, in case it ended before the page's live
// connection opened.
(function () {
  const card = document.querySelector("[data-run]");
  const id = Number(card.dataset.run);
  const bar = document.getElementById("whatif-progress");
  const report = document.getElementById("whatif-report");
  let finished = ["done", "failed"].includes(card.dataset.state);
  const STATES = {
    pending: pgettext("value", "pending"), running: pgettext("value", "running"),
    done: pgettext("value", "done"), failed: pgettext("value", "failed"),
  };

  function show(run) {
    if (run.id !== id || finished) return;
    if (run.progress !== null) bar.value = run.progress;
    document.getElementById("whatif-message").textContent = run.message;
    document.getElementById("whatif-state").textContent = STATES[run.state] || run.state;
    finished = ["done", "failed"].includes(run.state);
    if (run.state === "done") {
      report.src = report.dataset.src;
      document.getElementById("whatif-links").hidden = false;
    }
  }

  // The run's message in the page's language: asked of the server, not taken from the event.
  async function refresh() {
    const response = await fetch(`/ops/whatif/${id}/status.json`);
    if (response.ok) show(await response.json());
  }

  document.addEventListener("wanka:whatif.progress", ({ detail }) => {
    if (detail.id === id && !finished) refresh();
  });
  const poll = setInterval(() => (finished ? clearInterval(poll) : refresh()), 3000);
})();
