// Times as the reader's clock shows them: each <time data-local> the server wrote in UTC is
// rewritten in the browser's time zone (the charts are drawn in it too); hovering shows UTC.
// The words come from the page language's catalogue (gettext, served by /jsi18n/). Parts of
// the page drawn again (parts.js) are rewritten the same way.
(function () {
  const pad = (n) => String(n).padStart(2, "0");
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  window.wankaLocalTimes = (root) => {
    root.querySelectorAll("time[data-local]").forEach((el) => {
      const t = new Date(el.dateTime);
      const day = `${t.getFullYear()}-${pad(t.getMonth() + 1)}-${pad(t.getDate())}`;
      const clock = `${pad(t.getHours())}:${pad(t.getMinutes())}`;
      const seconds = `${clock}:${pad(t.getSeconds())}`;
      el.title = interpolate(gettext("%(utc)s · shown in %(zone)s"), { utc: el.textContent, zone }, true);
      el.textContent = { m: `${day} ${clock}`, s: `${day} ${seconds}`, t: seconds }[el.dataset.local];
    });
  };
  wankaLocalTimes(document);
  const note = document.getElementById("time-zone");
  if (note) note.textContent = interpolate(gettext("Times in %(zone)s."), { zone }, true);
})();
