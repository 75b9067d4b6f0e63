// The job's output: a live tail of one run (attempt and node, or every node), read from the
// API with its cursor, so a page opened late or a missed poll never loses a line.
(function () {
  const pre = document.getElementById("log");
  const select = document.getElementById("log-run");
  if (!pre || !select) return;
  const status = document.getElementById("log-status");
  const download = document.getElementById("log-download");
  const base = select.dataset.url;
  const KEEP = 5000; // lines on the page; the download has them all
  const POLL_MS = 1500;
  let since = 0, run = null, timer = null, generation = 0;

  function query(extra) {
    const params = new URLSearchParams(extra);
    if (run) { params.set("attempt", run.attempt); params.set("node", run.node); }
    return params;
  }

  function fillRuns(runs) {
    const known = [...select.options].map((o) => o.value);
    const wanted = ["", ...runs.map((r) => `${r.attempt}|${r.node}`)];
    if (known.join() === wanted.join()) return;
    const chosen = select.value;
    select.replaceChildren(new Option(gettext("Every attempt and node"), ""));
    for (const r of runs) {
      const label = interpolate(ngettext("attempt %(attempt)s on %(node)s (%(lines)s line)",
        "attempt %(attempt)s on %(node)s (%(lines)s lines)", r.lines), r, true);
      select.add(new Option(label, `${r.attempt}|${r.node}`));
    }
    select.value = wanted.includes(chosen) ? chosen : "";
  }

  function append(chunks) {
    const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    const every = !run;
    const text = chunks.map((c) => c.lines.map((l) => (every ? `[${c.attempt} ${c.node}] ` : "") + l).join("\n")).join("\n");
    pre.append(document.createTextNode((pre.textContent ? "\n" : "") + text));
    const lines = pre.textContent.split("\n");
    if (lines.length > KEEP) pre.textContent = lines.slice(-KEEP).join("\n");
    if (atBottom) pre.scrollTop = pre.scrollHeight;
  }

  async function poll(mine) {
    try {
      const response = await fetch(`${base}?${query({ since })}`, { headers: { Accept: "application/json" } });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      const body = await response.json();
      if (mine !== generation) return; // the run was changed meanwhile
      fillRuns(body.runs);
      if (body.chunks.length) append(body.chunks);
      since = body.next;
      status.textContent = body.writing ? gettext("Following…")
        : (pre.textContent ? gettext("The job has ended.") : gettext("No output."));
      if (body.more) return poll(mine);
      if (body.writing) timer = setTimeout(() => poll(mine), POLL_MS);
    } catch (error) {
      status.textContent = interpolate(
        gettext("Cannot read the output (%(error)s); trying again."), { error: error.message }, true);
      timer = setTimeout(() => poll(mine), POLL_MS * 4);
    }
  }

  function restart() {
    clearTimeout(timer);
    const [attempt, node] = select.value ? select.value.split("|") : [];
    run = select.value ? { attempt, node } : null;
    since = 0;
    pre.textContent = "";
    download.href = `${download.pathname}?${query({})}`;
    poll(++generation);
  }

  select.addEventListener("change", restart);
  restart();
})();
