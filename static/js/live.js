// The page's live connection: one WebSocket, reconnecting with backoff. Every server event is
// re-dispatched on `document` as a "wanka:<event>" CustomEvent for page scripts, and
// "wanka:resync" each time the socket (re)opens.
//
// What a workload list shows is trusted only as far as its versions: each workload event
// carries the version of the workload it leaves (its newest event's id), and the list applies
// only what is newer than it shows. Whenever the socket opens, the list reconciles its rows
// with the API's answer for the same filter, in the same order (newest first), inserting,
// updating and removing rows, so an event sent before it listened (or lost while it was away)
// never leaves it wrong. Other parts of pages are drawn again by parts.js.
(function () {
  const dot = document.getElementById("live-status");
  let delay = 500;

  function connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const socket = new WebSocket(`${scheme}://${location.host}/ws/live/`);
    socket.onopen = () => {
      delay = 500;
      dot.className = "live-on";
      document.dispatchEvent(new CustomEvent("wanka:resync"));
    };
    socket.onclose = () => {
      dot.className = "live-off";
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 15000);
    };
    socket.onmessage = (message) => {
      const { event, payload } = JSON.parse(message.data);
      document.dispatchEvent(new CustomEvent(`wanka:${event}`, { detail: payload }));
    };
  }

  async function api(path) {
    const response = await fetch(path, { headers: { Accept: "application/json" } });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    return response.json();
  }

  // The states as the page's language names them (the server's `word` filter, for the same
  // values); the raw value where the catalogue has none.
  const WORDS = {
    pending: pgettext("value", "pending"), admitted: pgettext("value", "admitted"),
    starting: pgettext("value", "starting"), running: pgettext("value", "running"),
    preempting: pgettext("value", "preempting"), recovering: pgettext("value", "recovering"),
    succeeded: pgettext("value", "succeeded"), failed: pgettext("value", "failed"),
    cancelled: pgettext("value", "cancelled"), stopped: pgettext("value", "stopped"),
    approved: pgettext("value", "approved"), rejected: pgettext("value", "rejected"),
    saving: pgettext("value", "saving"), replacing: pgettext("value", "replacing"),
    restarting: pgettext("value", "restarting"), done: pgettext("value", "done"),
    in_place: pgettext("value", "in_place"), spare: pgettext("value", "spare"),
    shrunk: pgettext("value", "shrunk"), grown: pgettext("value", "grown"),
    requeued: pgettext("value", "requeued"), ended: pgettext("value", "ended"),
  };
  window.wankaWord = (value) => WORDS[value] || value;

  function setState(element, state) {
    element.textContent = wankaWord(state);
    element.className = `state state-${state}`;
  }

  const newer = (element, version) => version > Number(element.dataset.version || 0);

  // -- workload lists ---------------------------------------------------------------------------
  function ago(iso) {
    const minutes = Math.max(0, (Date.now() - Date.parse(iso)) / 60000);
    const ago = (text, n) => interpolate(text, { n }, true);
    if (minutes < 1) return gettext("moments ago");
    if (minutes < 60) return ago(gettext("%(n)s min ago"), Math.floor(minutes));
    if (minutes < 48 * 60) return ago(gettext("%(n)s h ago"), Math.floor(minutes / 60));
    const days = Math.floor(minutes / 1440);
    return ago(ngettext("%(n)s day ago", "%(n)s days ago", days), days);
  }

  function reasonOf(w) {
    if (w.state !== "pending") return "";
    return `${w.queue_position ? `#${w.queue_position} · ` : ""}${w.pending_reason || ""}`;
  }

  function etaOf(w, none) {
    if (w.state !== "pending") return "";
    if (!w.estimated_start) return none;
    const at = (moment) => new Date(moment).toLocaleString(document.documentElement.lang);
    const p90 = w.estimated_start_p90
      ? " " + interpolate(gettext("(90 %: by %(by)s)"), { by: at(w.estimated_start_p90) }, true)
      : "";
    return at(w.estimated_start) + p90;
  }

  function row(w) {
    const tr = document.createElement("tr");
    tr.dataset.workload = w.id;
    tr.innerHTML = '<td><a></a></td><td></td><td></td><td><span data-state></span></td>' +
      '<td class="reason" data-reason></td><td></td><td data-eta></td>';
    const [name, queue, gpus, , , submitted] = tr.children;
    name.firstChild.href = `/workloads/${w.id}/`;
    name.firstChild.textContent = w.name;
    queue.textContent = w.queue;
    gpus.textContent = `${w.gpus} × ${w.gpu_model}`;
    submitted.textContent = ago(w.submitted_at);
    return tr;
  }

  function update(tr, w, none) {
    tr.dataset.version = w.version;
    setState(tr.querySelector("[data-state]"), w.state);
    tr.querySelector("[data-reason]").textContent = reasonOf(w);
    tr.querySelector("[data-eta]").textContent = etaOf(w, none);
  }

  document.querySelectorAll("[data-live-list]").forEach((body) => {
    let timer = null, first = 0;

    async function reconcile() {
      const query = new URLSearchParams(body.dataset.query);
      query.set("limit", body.dataset.limit);
      const page = await api(`/api/v1/workloads/?${query}`).catch(() => null);
      if (!page) return;
      const rows = new Map([...body.querySelectorAll("tr[data-workload]")].map((tr) => [tr.dataset.workload, tr]));
      let before = body.firstElementChild;
      for (const w of page.results) {
        const tr = rows.get(String(w.id)) || row(w);
        rows.delete(String(w.id));
        if (newer(tr, w.version) || !tr.dataset.version) update(tr, w, body.dataset.noEstimate);
        if (tr !== before) body.insertBefore(tr, before);
        before = tr.nextElementSibling;
      }
      rows.forEach((tr) => tr.remove()); // no longer in the list's filter or its first page
      body.querySelector("tr.none")?.toggleAttribute("hidden", page.results.length > 0);
    }

    function soon() {
      // A burst of events costs one request, and a steady stream one a second at most.
      clearTimeout(timer);
      first = first || Date.now();
      const wait = Math.max(0, Math.min(300, first + 1000 - Date.now()));
      timer = setTimeout(() => { first = 0; reconcile(); }, wait);
    }

    document.addEventListener("wanka:resync", reconcile);
    document.addEventListener("wanka:workload.state", ({ detail: event }) => {
      const tr = body.querySelector(`tr[data-workload="${event.id}"]`);
      if (tr && newer(tr, event.version)) {
        const w = { ...event, pending_reason: event.reason, queue_position: null };
        update(tr, w, body.dataset.noEstimate);
      }
      soon(); // new rows, rows that leave the filter, and the order: as the API has them
    });
  });

  connect();
})();
