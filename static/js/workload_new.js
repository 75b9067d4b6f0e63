// The submit form: each checkpoint policy's expected ETTR for the GPU count being typed.
(function () {
  const gpus = document.querySelector("input[name=gpus]");
  const box = document.getElementById("advice");
  let timer;
  const POLICIES = {
    none: pgettext("value", "none"), periodic: pgettext("value", "periodic"),
    async: pgettext("value", "async"), triggered: pgettext("value", "triggered"),
  };

  async function show() {
    const n = parseInt(gpus.value, 10);
    if (!(n > 0)) { box.textContent = ""; return; }
    const response = await fetch(`/api/v1/checkpoint-advice/?gpus=${n}`);
    if (!response.ok) return;
    const advice = await response.json();
    const rows = advice.policies.map((p) => {
      const every = p.interval_s
        ? interpolate(gettext("every %(n)s min"), { n: Math.round(p.interval_s / 60) }, true) : "";
      return `<tr><td>${POLICIES[p.policy] || p.policy}</td><td>${every}</td>` +
        `<td>${p.expected_ettr.toFixed(3)}</td></tr>`;
    });
    const at = interpolate(gettext("Expected ETTR at %(n)s GPUs"), { n }, true);
    box.innerHTML = `<table><thead><tr><th>${gettext("Policy")}</th><th>${gettext("Interval")}</th>` +
      `<th>${at}</th></tr></thead><tbody>${rows.join("")}</tbody></table><small></small>`;
    box.querySelector("small").textContent =
      interpolate(gettext("Failure rate: %(source)s."), advice, true);
    wankaScrolling();
  }

  gpus.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(show, 250); });
  show();
})();
