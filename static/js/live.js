// The page's live connection: one WebSocket, reconnecting with backoff. Every server event is
// re-dispatched on `document` as a "wanka:<event>" CustomEvent for page scripts.
(function () {
  const dot = document.getElementById("live-status");
  let delay = 500;

  function connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const socket = new WebSocket(`${scheme}://${location.host}/ws/live/`);
    socket.onopen = () => { delay = 500; dot.className = "live-on"; };
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

  function setState(element, state) {
    element.textContent = state;
    element.className = `state state-${state}`;
  }

  // Workload rows and headings show their state without a reload, on every page.
  document.addEventListener("wanka:workload.state", ({ detail }) => {
    document.querySelectorAll(`[data-workload="${detail.id}"]`).forEach((row) => {
      row.querySelectorAll("[data-state]").forEach((el) => setState(el, detail.state));
      row.querySelectorAll("[data-reason]").forEach((el) => {
        if (detail.state !== "pending") el.textContent = "";
      });
    });
    const timeline = document.getElementById("timeline");
    if (timeline && document.querySelector(`section[data-workload="${detail.id}"]`)) {
      const item = document.createElement("li");
      item.innerHTML = `<time>${new Date().toISOString().slice(0, 19).replace("T", " ")}</time> → <b></b> `;
      item.querySelector("b").textContent = detail.state;
      item.append(detail.reason);
      timeline.append(item);
    }
  });

  document.addEventListener("wanka:quota.decided", ({ detail }) => {
    document.querySelectorAll(`[data-request="${detail.id}"] [data-state]`)
      .forEach((el) => setState(el, detail.status));
  });

  connect();
})();
