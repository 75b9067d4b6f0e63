// Parts of a page that stay true: each element with data-part (and an id) is drawn again from
// the server's own rendering of the page (the same templates, words and figures as the first
// draw) when the live socket (re)opens, when an event about what the page shows arrives, and,
// where figures move without an event (a service's load, a waiting job's estimate), every
// data-live-every seconds. The page says which events in data-live-events, and which
// workloads it shows in data-live-workloads (an event about others is not for it); one fetch
// at a time, data-live-gap seconds apart at least (1). Scripts that draw inside a part hear
// "wanka:parts" with the ids drawn again.
(function () {
  const main = document.querySelector("main");
  if (!document.querySelector("[data-part]")) return;
  const words = (value) => (value || "").split(" ").filter(Boolean);
  const events = words(main.dataset.liveEvents);
  const workloads = new Set(words(main.dataset.liveWorkloads));
  const gap = 1000 * Number(main.dataset.liveGap || 1);
  // The workloads each event is about.
  const ABOUT = {
    "workload.state": (p) => [p.id],
    "workload.estimate": (p) => p.ids,
    recovery: (p) => [p.workload_id],
    fault: (p) => p.workload_ids || [],
  };
  const drawn = new Map();  // part id -> the server's HTML it was last drawn from
  const CSRF = /name="csrfmiddlewaretoken" value="[^"]*"/g;
  let busy = false, again = false, last = 0;

  async function refresh() {
    if (busy) {
      again = true;
      return;
    }
    if (document.querySelector("dialog[open]")) {  // a confirmation keeps its form in place
      setTimeout(refresh, 2000);
      return;
    }
    busy = true;
    await new Promise((done) => setTimeout(done, Math.max(0, last + gap - Date.now())));
    last = Date.now();
    try {
      // The header keeps the page's one-time messages for the next page drawn whole.
      const headers = { Accept: "text/html", "X-Wanka-Part": "1" };
      const response = await fetch(location.href, { headers });
      if (response.ok) swap(new DOMParser().parseFromString(await response.text(), "text/html"));
    } catch (error) {
      // Offline or restarting: the next event, reconnect or tick tries again.
    } finally {
      busy = false;
      if (again) {
        again = false;
        refresh();
      }
    }
  }

  function swap(fresh) {
    const changed = [];
    document.querySelectorAll("[data-part]").forEach((part) => {
      const now = fresh.getElementById(part.id);
      const html = now && now.outerHTML.replace(CSRF, "");  // a new token each time it is drawn
      if (!now || drawn.get(part.id) === html) return;
      drawn.set(part.id, html);
      if (window.Plotly) part.querySelectorAll(".js-plotly-plot").forEach((plot) => Plotly.purge(plot));
      const copy = document.importNode(now, true);
      wankaLocalTimes(copy);
      part.replaceWith(copy);
      changed.push(part.id);
    });
    if (changed.length) document.dispatchEvent(new CustomEvent("wanka:parts", { detail: changed }));
  }

  document.addEventListener("wanka:resync", refresh);
  for (const name of events) {
    document.addEventListener(`wanka:${name}`, ({ detail }) => {
      const about = ABOUT[name];
      if (!workloads.size || !about || about(detail).some((id) => workloads.has(String(id)))) {
        refresh();
      }
    });
  }
  const every = Number(main.dataset.liveEvery || 0);
  if (every) setInterval(refresh, every * 1000);
})();
